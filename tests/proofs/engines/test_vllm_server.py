"""VLLMServer's start and failure paths, with stand-in servers (the real vLLM runs in tox -e vllm).

Nothing here asserts that something happens within a short wall time: a server that exits is
named because it exited (however loaded the machine), a start deadline is a stated timeout, and
the bounds on a stop are generous (they catch a hang, not a slow machine)."""

from __future__ import annotations

import http.server
import json
import os
import sys
import threading
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


# serves /health and /v1/models (naming the --model argument, as vLLM does) on --port
FAKE_VLLM = """
import http.server, json
port, model = int(sys.argv[sys.argv.index('--port') + 1]), sys.argv[sys.argv.index('--model') + 1]
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        card = {'data': [{'id': model, 'root': model, 'owned_by': 'vllm'}]}
        body = json.dumps(card).encode() if self.path == '/v1/models' else b''
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(('127.0.0.1', port), Handler).serve_forever()
"""


@pytest.fixture
def stranger():
    """Another program's server on a port: /health answers 200, /v1/models names another model."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data": [{"id": "/other/model", "root": "/other/model"}]}).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body if self.path == "/v1/models" else b"")

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_a_server_that_answers_for_its_model_is_started_and_stopped(tmp_path):
    server = VLLMServer(VLLMSettings(tmp_path, python=fake_python(tmp_path, FAKE_VLLM)), tmp_path / "log")
    try:
        assert server.alive() and server.url == f"http://127.0.0.1:{server.port}/v1"
    finally:
        server.stop()
    assert not server.alive()


@pytest.mark.parametrize("port_taken", [False, True])
def test_a_server_that_exits_is_named_with_its_last_log_lines(tmp_path, stranger, port_taken):
    """Named for its exit, when it exits: with another program answering on its port too (the port
    was free when chosen), whose answer is not this server's."""
    py = fake_python(tmp_path, "print('\\n'.join(f'line {i}' for i in range(100))); sys.exit(3)")
    with pytest.raises(LoopcertError) as e:
        VLLMServer(VLLMSettings(tmp_path, python=py), tmp_path / "log", port=stranger if port_taken else None)
    msg = str(e.value)
    assert "exited with status 3" in msg and "line 99" in msg and "line 60" not in msg
    assert "vllm.entrypoints.openai.api_server" in msg


def test_an_answer_for_another_model_is_not_this_server(tmp_path, stranger):
    py = fake_python(tmp_path, "time.sleep(600)")
    with pytest.raises(LoopcertError) as e:
        VLLMServer(VLLMSettings(tmp_path, python=py, start_timeout_s=3), tmp_path / "log", port=stranger)
    want = str(tmp_path.resolve())
    assert f"within 3 s (port {stranger} answers for ['/other/model', '/other/model'], not {want})" in str(
        e.value
    )


@pytest.mark.tier2
def test_a_server_that_never_answers_is_stopped_with_its_children(tmp_path):
    pids = tmp_path / "pids"
    body = (
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "print('loading', flush=True); time.sleep(600)"
    )
    py = fake_python(tmp_path, body)
    t0 = time.monotonic()
    # the deadline must leave the fake time to start its child (a second or two on a busy machine)
    with pytest.raises(LoopcertError, match="did not answer .* within 20 s"):
        VLLMServer(VLLMSettings(tmp_path, python=py, start_timeout_s=20), tmp_path / "log")
    assert time.monotonic() - t0 < 300  # the 20 s deadline held: not the fake's 600 s sleep
    for pid in map(int, pids.read_text().split()):
        deadline = time.monotonic() + 120  # a hang's bound: SIGTERM ends them at once
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
