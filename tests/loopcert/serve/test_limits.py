"""`loopcert serve` guarded: --api-key with the real openai client, --max-body-bytes and
--read-timeout against a raw socket, the warning for a key-less public --host, and the messages of
requests that cannot run, each with the exact input a user sent."""

from __future__ import annotations

import socket
import time

import pytest

httpx = pytest.importorskip("httpx")  # the serve extra; tox's py env installs it
openai = pytest.importorskip("openai")  # the test extra
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from serving import start  # noqa: E402

from loopcert.cli import main  # noqa: E402
from loopcert.serve.auth import exposure_warning  # noqa: E402

KEY = "test-key-1234"
TIMEOUT_S = 1.0  # the server's --read-timeout here
SLACK_S = 60.0  # a dropped client is dropped within TIMEOUT_S + this: a hang's bound, not a speed
LIMIT = 32768  # --max-body-bytes here (a 4097-prompt batch of ids fits)
ARGS = ("tiny-ouro", "--draft-depth", "1", "--read-timeout", str(TIMEOUT_S), "--max-body-bytes", str(LIMIT))


@pytest.fixture(scope="module")
def server(request, tmp_path_factory):
    return start(request, tmp_path_factory, *ARGS, api_key=KEY)


def post(server, path: str, body=None, content: bytes | None = None, headers=None):
    headers = {**server.headers, "content-type": "application/json", **(headers or {})}
    return httpx.post(server.root + path, json=body, content=content, headers=headers, timeout=60)


def raw(server, head: bytes, body: bytes = b"", key: bool = True) -> socket.socket:
    """A socket that sent a request head (with the key) and `body`, and nothing more yet."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT_S + SLACK_S)
    auth = f"Authorization: Bearer {KEY}\r\n".encode() if key else b""
    s.sendall(head + b"Host: x\r\n" + auth + b"Content-Type: application/json\r\n\r\n" + body)
    return s


def read_all(s: socket.socket) -> bytes:
    """What the server sends until it closes the connection (a timeout here fails the test)."""
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    s.close()
    return out


# -- --api-key ------------------------------------------------------------------------------------


def test_the_openai_client_needs_the_key(server):
    good = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=60)
    out = good.completions.create(model="tiny-ouro", prompt=[1, 2], max_tokens=3, temperature=0)
    assert out.choices[0].finish_reason == "length"
    bad = openai.OpenAI(base_url=server.url, api_key="wrong", max_retries=0, timeout=60)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.completions.create(model="tiny-ouro", prompt=[1, 2], max_tokens=3)
    assert e.value.status_code == 401 and e.value.body["code"] == "invalid_api_key"


@pytest.mark.parametrize("path", ["/v1/completions", "/generate", "/v1/models", "/get_model_info"])
@pytest.mark.parametrize(
    "auth", [None, "Bearer wrong", KEY, f"Bearer {KEY}x", f"Basic {KEY}", f"Bearer {KEY.upper()}", "Bearer"]
)
def test_every_route_but_health_refuses_another_key(server, path, auth):
    headers = {} if auth is None else {"Authorization": auth}
    r = httpx.request("GET" if "model" in path else "POST", server.root + path, headers=headers, timeout=30)
    assert r.status_code == 401 and r.json()["error"]["param"] == "authorization", r.text
    assert httpx.get(server.root + "/health", timeout=30).status_code == 200
    assert httpx.get(server.root + "/get_model_info", headers=server.headers, timeout=30).status_code == 200


@pytest.mark.parametrize("auth", [f"bearer {KEY}", f"BEARER {KEY}", f"Bearer  {KEY}"])
def test_the_auth_scheme_is_matched_whatever_its_case(server, auth):
    """`Authorization: bearer KEY` was refused; HTTP auth schemes are case-insensitive
    (RFC 9110 section 11.1), the key is not (above)."""
    r = httpx.get(server.root + "/v1/models", headers={"Authorization": auth}, timeout=30)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    "host,warns",
    [("0.0.0.0", True), ("::", True), ("192.168.1.5", True), ("example.org", True)]
    + [("127.0.0.1", False), ("127.4.5.6", False), ("::1", False), ("[::1]", False), ("localhost", False)],
)
def test_a_public_host_without_a_key_warns(host, warns):
    assert (exposure_warning(host, None) is not None) == warns
    assert exposure_warning(host, "k") is None


def test_serve_prints_the_warning_once_at_startup(monkeypatch, capsys):
    """`loopcert serve --host 0.0.0.0` without a key: one warning line on stderr (uvicorn's run is
    replaced: nothing is served)."""
    import uvicorn

    monkeypatch.delenv("LOOPCERT_API_KEY", raising=False)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)
    assert main(["serve", "tiny-ouro", "--draft-depth", "1", "--host", "0.0.0.0", "--port", "0"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "WARNING" in line]
    assert len(lines) == 1 and "without an API key" in lines[0] and "--api-key" in lines[0]
    assert (
        main(
            ["serve", "tiny-ouro", "--draft-depth", "1", "--host", "0.0.0.0", "--port", "0", "--api-key", "k"]
        )
        == 0
    )
    assert "WARNING" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags,name",
    [
        (["--max-body-bytes", "10"], "--max-body-bytes"),
        (["--read-timeout", "0"], "--read-timeout"),
        (["--read-timeout", "nan"], "--read-timeout"),
        (["--api-key", ""], "--api-key"),
    ],
)
def test_bad_limit_flags_are_usage_errors(flags, name, capsys):
    assert main(["serve", "tiny-ouro", *flags]) == 2
    assert name in capsys.readouterr().err


# -- --max-body-bytes and --read-timeout ------------------------------------------------------------


def test_a_declared_huge_body_is_a_413_before_it_is_read(server):
    """The reported case: headers with Content-Length: 10000000000 and no body at all. Answered
    413 at once: a read timeout would have answered 408 (the next tests), not 413."""
    s = raw(server, b"POST /generate HTTP/1.1\r\nContent-Length: 10000000000\r\n")
    answer = read_all(s)
    assert answer.startswith(b"HTTP/1.1 413") and b'"param":"body"' in answer and b"10000000000" in answer


def test_a_chunked_body_past_the_limit_is_cut_off(server):
    s = raw(server, b"POST /generate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n")
    chunk = b"400\r\n" + b" " * 1024 + b"\r\n"
    try:
        for _ in range(LIMIT // 1024 + 2):
            s.sendall(chunk)
    except OSError:
        pass  # the server closed as soon as the body passed the limit
    assert read_all(s).startswith(b"HTTP/1.1 413")


def test_a_big_json_body_is_a_413_and_a_small_one_runs(server):
    r = post(server, "/generate", {"input_ids": [1] * LIMIT})
    assert r.status_code == 413 and r.json()["error"]["param"] == "body"
    assert str(LIMIT) in r.json()["error"]["message"]
    assert (
        post(server, "/generate", {"input_ids": [1], "sampling_params": {"max_new_tokens": 2}}).status_code
        == 200
    )


def test_a_client_that_stalls_after_its_headers_is_dropped(server):
    t0 = time.monotonic()
    s = raw(server, b"POST /generate HTTP/1.1\r\nContent-Length: 100\r\n", b'{"input_ids": [1')
    answer = read_all(s)
    took = time.monotonic() - t0
    assert answer.startswith(b"HTTP/1.1 408") and b"--read-timeout" in answer
    assert TIMEOUT_S * 0.9 <= took < TIMEOUT_S + SLACK_S


@pytest.mark.parametrize("head", [b"", b"POST /generate HTTP/1.1\r\nContent-Le"])
def test_a_client_that_never_finishes_its_headers_is_dropped(server, head):
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT_S + SLACK_S)
    s.sendall(head)
    assert read_all(s) == b"" and time.monotonic() - t0 < TIMEOUT_S + SLACK_S


def test_a_kept_alive_connection_serves_request_after_request(server):
    """The header timeout counts from each answer: a client that keeps its connection and sends
    its next request in time is served, however long the connection lives (5 gaps of 0.3 s: the
    connection outlives the 1 s timeout, and each request has 0.7 s to spare on a busy machine)."""
    with httpx.Client(headers=server.headers, timeout=30) as c:
        for _ in range(5):
            assert c.get(server.root + "/get_model_info").status_code == 200
            time.sleep(TIMEOUT_S * 0.3)


# -- messages of requests that cannot run ------------------------------------------------------------


@pytest.mark.parametrize("literal,shown", [(b"NaN", "nan"), (b"Infinity", "inf"), (b"-Infinity", "-inf")])
def test_a_non_finite_temperature_is_named(server, literal, shown):
    r = post(server, "/v1/completions", content=b'{"prompt": [1, 2], "temperature": ' + literal + b"}")
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (
        err["param"] == "temperature"
        and err["message"] == f"temperature must be a finite number, got {shown}"
    )
    r = post(
        server,
        "/generate",
        content=b'{"input_ids": [1], "sampling_params": {"temperature": ' + literal + b"}}",
    )
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "sampling_params.temperature"
    assert err["message"] == f"sampling_params.temperature must be a finite number, got {shown}"


def test_more_sequences_than_the_queue_holds_is_a_400_naming_them(server):
    """n x prompts beyond the scheduler's capacity (--max-waiting, 4096) can never run: a 400
    naming n, the prompt count and the limit, not a 503 that clients retry."""
    body = {"prompt": [[1]] * 33, "n": 128, "max_tokens": 1}
    r = post(server, "/v1/completions", body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "n"
    assert "n=128 x 33 prompts = 4224 sequences" in err["message"] and "at most 4096" in err["message"]
    r = post(server, "/generate", {"input_ids": [[1]] * 4097, "sampling_params": {"max_new_tokens": 1}})
    assert (
        r.status_code == 400
        and "4097" in r.json()["error"]["message"]
        and "4096" in r.json()["error"]["message"]
    )


@pytest.mark.parametrize(
    "path,body,field",
    [("/v1/completions", {"prompt": "hi"}, "prompt"), ("/generate", {"text": "hi"}, "input_ids")],
)
def test_text_to_a_model_without_a_tokenizer_says_to_send_ids(server, path, body, field):
    err = post(server, path, body).json()["error"]
    assert f"send token ids in `{field}`" in err["message"] and "--prompt-ids" not in err["message"]
