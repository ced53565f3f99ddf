"""A `loopcert serve` subprocess on 127.0.0.1 at a free port, always stopped (bench, tests)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from refdec.errors import LoopcertError

ROOT = Path(__file__).resolve().parent.parent.parent
START_TIMEOUT_S = 120


class ServerProcess:
    """`python -m loopcert serve ARGS --host 127.0.0.1 --port 0`; `stop()` (or `with`) ends it.

    With `api_key` the server wants `Authorization: Bearer api_key` (`headers`; the openai client's
    `api_key`); without, it has no key even if LOOPCERT_API_KEY is set here."""

    def __init__(self, args: list[str], workdir: Path | None = None, api_key: str | None = None):
        import httpx

        self.api_key = api_key
        if api_key is not None:
            args = [*args, "--api-key", api_key]
        workdir = Path(workdir or tempfile.mkdtemp(prefix="loopcert-serve-"))
        port_file = workdir / "port"
        self.log = workdir / "server.log"
        env = {
            **os.environ,
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
            "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        }
        env.pop("LOOPCERT_API_KEY", None)
        cmd = [
            sys.executable,
            "-m",
            "loopcert",
            "serve",
            *args,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--port-file",
            str(port_file),
        ]
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while not port_file.exists():
                self._alive(deadline, args)
                time.sleep(0.1)
            self.port = int(port_file.read_text())
            self.root = f"http://127.0.0.1:{self.port}"
            self.url = self.root + "/v1"
            while True:  # the port file is written just before uvicorn starts accepting
                try:
                    if httpx.get(self.root + "/health", timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                self._alive(deadline, args)
                time.sleep(0.1)
        except BaseException:
            self.stop()
            raise

    def _alive(self, deadline: float, args) -> None:
        if self.proc.poll() is not None or time.monotonic() > deadline:
            raise LoopcertError(f"loopcert serve {' '.join(args)} did not start:\n{self.log.read_text()}")

    @property
    def headers(self) -> dict[str, str]:
        """What a request needs: the Authorization header when the server has a key."""
        return {} if self.api_key is None else {"Authorization": f"Bearer {self.api_key}"}

    def health(self) -> dict:
        import httpx

        return httpx.get(self.root + "/health", timeout=10).json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
