"""Test helper: a real `loopcert serve` subprocess on 127.0.0.1 (a free port), always stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 120


class ServerProcess:
    def __init__(self, args: list[str], workdir: Path):
        port_file = workdir / "port"
        self.log = workdir / "server.log"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        cmd = [sys.executable, "-m", "loopcert", "serve", *args, "--host", "127.0.0.1", "--port", "0",
               "--port-file", str(port_file)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log.open("w"),
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"loopcert serve {' '.join(args)} did not start:\n{self.log.read_text()}")
            time.sleep(0.1)
        self.port = int(port_file.read_text())
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.root = f"http://127.0.0.1:{self.port}"
        while True:  # the port file is written just before uvicorn starts accepting
            try:
                if httpx.get(self.root + "/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"loopcert serve {' '.join(args)} never answered:\n{self.log.read_text()}")
            time.sleep(0.1)

    def health(self) -> dict:
        return httpx.get(self.root + "/health", timeout=10).json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)


def start(request, tmp_path_factory, *args: str) -> ServerProcess:
    """Start a server for a fixture; its finalizer stops it whatever happens."""
    server = ServerProcess(list(args), tmp_path_factory.mktemp("serve"))
    request.addfinalizer(server.stop)
    return server
