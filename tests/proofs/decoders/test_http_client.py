"""The HTTP transport never waits silently and never retries blindly (proofs/decoders/http_client.py):
a silent server fails within about the timeout, 5xx and dropped connections are retried a bounded
number of times, 4xx is not retried, outstanding requests print a progress line."""

from __future__ import annotations

import socket
import threading

import pytest

httpx = pytest.importorskip("httpx")

from proofs.decoders.http_client import HTTPClient, Transport  # noqa: E402
from refdec.errors import LoopcertError  # noqa: E402

FAST = dict(backoff_s=0.01, progress_every_s=0.2)


def mocked(handler, **transport) -> HTTPClient:
    c = HTTPClient("http://fake", Transport(**{**FAST, **transport}), say=lambda _line: None)
    c.client = httpx.Client(transport=httpx.MockTransport(handler))
    return c


def listener(on_accept):
    """A TCP listener on 127.0.0.1 whose accepted connections go to on_accept(conn); -> (url, stop)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held, done = [], threading.Event()

    def serve():
        srv.settimeout(0.1)
        while not done.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            held.append(conn)
            on_accept(conn)

    threading.Thread(target=serve, daemon=True).start()

    def stop():
        done.set()
        for c in held:
            c.close()
        srv.close()

    return f"http://127.0.0.1:{srv.getsockname()[1]}", stop


def test_a_server_that_never_answers_fails_within_about_the_timeout():
    accepted = []
    url, stop = listener(accepted.append)  # accepts, reads nothing, answers nothing
    lines = []
    # the progress thread ticks every 0.1 s of the 2 s wait: a line even on a busy machine
    c = HTTPClient(url, Transport(timeout_s=2.0, progress_every_s=0.1), say=lines.append)
    try:
        with pytest.raises(LoopcertError, match=r"POST /generate \(seed 3, n 1\): no answer within 2 s"):
            c.post("/generate", {"x": 1}, "POST /generate (seed 3, n 1)", samples=1)
        assert len(accepted) == 1  # not retried: one connection, one timeout (not four)
        assert any(line.startswith("http: 1 requests in flight, 0/0 samples done, oldest") for line in lines)
    finally:
        c.close()
        stop()


def test_a_server_that_closes_the_connection_is_retried_then_named():
    accepted = []
    url, stop = listener(lambda conn: (accepted.append(1), conn.close()))
    c = HTTPClient(url, Transport(retries=2, **FAST), say=lambda _line: None)
    try:
        with pytest.raises(LoopcertError) as e:
            c.post("/v1/completions", {}, "POST /v1/completions (seed 0, n 4)")
        msg = str(e.value)
        assert msg.startswith(
            f"{url}: cannot reach the server: POST /v1/completions (seed 0, n 4) failed 3 times"
        )
        # a close before the answer reads as either, depending on whether the request was sent
        # before the close arrived (RemoteProtocolError) or after (ReadError: connection reset)
        assert "last error: RemoteProtocolError" in msg or "last error: ReadError" in msg
        assert len(accepted) == 3
    finally:
        c.close()
        stop()


def test_a_server_found_dead_is_not_retried_by_later_requests_until_it_answers():
    """A server that died mid-run: the request that finds it unreachable retries, the ones after it
    fail at their first try (a check skips thousands of requests one by one, each would wait its
    backoff), and a request answered again restores the retries."""
    tries, up = [], [False]

    def handler(req):
        tries.append(req.url.path)
        if not up[0]:
            raise httpx.ConnectError("connection refused")
        return httpx.Response(200, json={"ok": True})

    c = mocked(handler, retries=2)
    try:
        retried = r"failed 3 times \(connection errors and HTTP 5xx are retried\)"
        with pytest.raises(LoopcertError, match=retried):
            c.post("/a", {}, "POST /a")
        assert len(tries) == 3
        once = r"POST /b failed 1 time \(not retried: the server was unreachable"
        with pytest.raises(LoopcertError, match=once):
            c.post("/b", {}, "POST /b")
        assert len(tries) == 4
        up[0] = True
        assert c.post("/c", {}, "POST /c") == {"ok": True}
        up[0] = False
        with pytest.raises(LoopcertError, match=r"POST /d failed 3 times"):
            c.post("/d", {}, "POST /d")
        assert len(tries) == 8
    finally:
        c.close()


def test_5xx_is_retried_with_backoff_and_can_succeed():
    statuses = [503, 503, 200]

    def handler(req):
        code = statuses.pop(0)
        return httpx.Response(code, json={"ok": code == 200} if code == 200 else None, text=None)

    c = mocked(handler)
    try:
        assert c.post("/x", {}, "POST /x") == {"ok": True} and statuses == []
    finally:
        c.close()
    always = mocked(lambda req: httpx.Response(500, text="engine died"), retries=1)
    with pytest.raises(LoopcertError, match=r"POST /x failed 2 times .*last error: HTTP 500: engine died"):
        always.post("/x", {}, "POST /x")
    always.close()


def test_4xx_is_not_retried_and_quotes_the_server():
    calls = []

    def handler(req):
        calls.append(1)
        return httpx.Response(400, text='{"error": "top_k must be 0 (disable)"}')

    c = mocked(handler)
    with pytest.raises(LoopcertError, match=r"http://fake: POST /x answered HTTP 400: .*top_k must be 0"):
        c.post("/x", {}, "POST /x")
    assert calls == [1]
    c.close()
    probe = mocked(lambda req: httpx.Response(404, text="Not Found"))
    assert probe.get("/get_model_info", optional=True) is None  # a probe: 404 means "no such endpoint"
    with pytest.raises(LoopcertError, match="answered HTTP 404"):
        probe.get("/get_model_info")
    probe.close()


def test_the_api_key_is_sent_as_a_bearer_token():
    seen = []

    def handler(req):
        seen.append(req.headers.get("authorization"))
        return httpx.Response(200, json={})

    c = mocked(handler, api_key="sk-123")
    c.get("/v1/models")
    c.close()
    bare = mocked(handler)
    bare.get("/v1/models")
    bare.close()
    assert seen == ["Bearer sk-123", None]


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "60", True])
def test_a_bad_timeout_is_named(bad):
    with pytest.raises(LoopcertError, match=r"--http-timeout must be a number of seconds > 0, got"):
        Transport(timeout_s=bad)
    with pytest.raises(LoopcertError, match="--api-key"):
        Transport(api_key=" ")
