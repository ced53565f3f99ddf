"""VLLMServer's failure paths, with stand-in servers (the real vLLM runs in tox -e vllm)."""

from __future__ import annotations

import os
import sys
import time

import pytest

from proofs.engines.vllm_server import VLLMServer, VLLMSettings, ngram_args
from refdec.errors import LoopcertError


def fake_python(tmp_path, body: str):
    """A stand-in interpreter: runs `body` whatever arguments vLLM's command line passes."""
    script = tmp_path / "fake_python"
    script.write_text(f"#!{sys.executable}\nimport sys, time, os, subprocess\n{body}\n")
    script.chmod(0o755)
    return str(script)


def test_the_command_carries_every_flag_the_docstring_names(tmp_path):
    cmd = VLLMSettings(tmp_path, extra_args=tuple(ngram_args())).command(1234)
    for flag in ("--skip-tokenizer-init", "--trust-remote-code", "--enforce-eager", "--speculative-config"):
        assert flag in cmd
    assert cmd[cmd.index("--dtype") + 1] == "float32" and cmd[cmd.index("--port") + 1] == "1234"
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert "--enforce-eager" not in VLLMSettings(tmp_path, enforce_eager=False).command(1)


def test_a_server_that_exits_is_named_with_its_last_log_lines(tmp_path):
    py = fake_python(tmp_path, "print('\\n'.join(f'line {i}' for i in range(100))); sys.exit(3)")
    with pytest.raises(LoopcertError) as e:
        VLLMServer(VLLMSettings(tmp_path, python=py), tmp_path / "log")
    msg = str(e.value)
    assert "exited with status 3" in msg and "line 99" in msg and "line 60" not in msg
    assert "vllm.entrypoints.openai.api_server" in msg


def test_a_server_that_never_answers_is_stopped_with_its_children(tmp_path):
    pids = tmp_path / "pids"
    body = (
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "print('loading', flush=True); time.sleep(600)"
    )
    py = fake_python(tmp_path, body)
    t0 = time.monotonic()
    with pytest.raises(LoopcertError, match="did not answer .* within 3 s"):
        VLLMServer(VLLMSettings(tmp_path, python=py, start_timeout_s=3), tmp_path / "log")
    assert time.monotonic() - t0 < 60
    for pid in map(int, pids.read_text().split()):
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), f"process {pid} outlived the stopped server"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie has exited: only its parent's wait is missing
        return f.read().split(") ")[-1][0] != "Z"
