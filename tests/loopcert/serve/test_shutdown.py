"""`loopcert serve` on SIGTERM with requests in flight: before, it waited out uvicorn's
graceful timeout, answered the request 500 and printed a 60-line traceback of the cancelled
task. Now every request in flight is answered at once (HTTP 503, code "shutting_down"), the log
holds the start line and one line saying so, and the process exits 143 without the interpreter's
teardown (the times before and after: docs/measurements.md, "Serving")."""

from __future__ import annotations

import signal
import threading
import time

import pytest

httpx = pytest.importorskip("httpx")  # the serve extra
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from serving import start  # noqa: E402

BUSY = {"model": "tiny-ouro", "prompt": [[1, 2]] * 64, "max_tokens": 120, "temperature": 1.0, "n": 8}


@pytest.mark.parametrize("sig", [signal.SIGTERM])  # SIGINT takes the same path (uvicorn handle_exit)
def test_a_signal_answers_the_requests_in_flight_and_exits_cleanly(request, tmp_path_factory, sig):
    server = start(request, tmp_path_factory, "tiny-ouro", "--draft-depth", "1")
    got = {}

    def ask():
        got["r"] = httpx.post(server.url + "/completions", json=BUSY, timeout=120)

    client = threading.Thread(target=ask)
    client.start()
    deadline = time.monotonic() + 60
    while server.health()["running"] + server.health()["waiting"] == 0:  # in flight, not yet done
        assert time.monotonic() < deadline and "r" not in got, "the request never started"
        time.sleep(0.02)
    server.proc.send_signal(sig)
    assert server.proc.wait(timeout=60) == 128 + sig
    client.join(timeout=60)
    r = got["r"]
    assert r.status_code == 503, r.text
    err = r.json()["error"]
    assert err["code"] == "shutting_down" and f"the server is shutting down ({sig.name})" in err["message"]
    log = server.log.read_text()
    assert "Traceback" not in log and len(log.splitlines()) == 2, log
    assert log.splitlines()[-1] == (
        f"loopcert serve: interrupted by {sig.name}; every request in flight was answered 503 (shutting down)"
    )
