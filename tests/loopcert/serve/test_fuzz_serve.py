"""`loopcert serve` fuzzed over HTTP (loopback only): hypothesis-drawn JSON bodies for
/v1/completions and /generate, from valid requests with a few fields broken (random types, nested
junk, huge ints, NaN / infinities, empty lists, wrong shapes) to bodies that are not requests.

The property (`problem`): every answer is a 2xx, or a 4xx whose body is an OpenAI error naming a
field (`error.param`, or a field of the request in `error.message`); never a 5xx, never a
dropped connection. The server answers /health after every example, and its resident memory
ends within 10% of where it started. A fixed example count keeps the run to seconds (no
per-example deadline: the client's timeout bounds a hang); the `ci` profile (tests/conftest.py)
derandomizes it. The negative control runs the same property against the app with a broken
handler (a KeyError where a prompt is read), and the property must fail there.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

httpx = pytest.importorskip("httpx")  # the serve extra; tox's py env installs it
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from serving import start  # noqa: E402

EXAMPLES = 150
MEMORY_SLACK = 0.10

COMPLETION_FIELDS = ("prompt", "max_tokens", "temperature", "top_p", "top_k", "n", "seed", "stop")
COMPLETION_FIELDS += (
    "logprobs",
    "stream",
    "ignore_eos",
    "model",
    "presence_penalty",
    "best_of",
    "logit_bias",
)
GENERATE_FIELDS = ("input_ids", "text", "sampling_params", "rid", "stream", "return_logprob")
SAMPLING_FIELDS = (
    "max_new_tokens",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "sampling_seed",
    "min_new_tokens",
)
SAMPLING_FIELDS += ("ignore_eos", "n", "repetition_penalty", "stop")
FIELDS = set(COMPLETION_FIELDS + GENERATE_FIELDS + SAMPLING_FIELDS)

HUGE = st.sampled_from([2**31, 2**63, 2**64, -(2**63) - 1, 10**30, -(10**40)])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-3, 20)
    | HUGE
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e308])
    | st.text(max_size=6)
)
JUNK = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
TOKENS = st.lists(st.integers(0, 12), min_size=1, max_size=6)  # tiny-ouro's vocabulary: 13


def valid_completion():
    return st.fixed_dictionaries(
        {"prompt": TOKENS | st.lists(TOKENS, min_size=1, max_size=3)},
        optional={
            "max_tokens": st.integers(1, 4),
            "temperature": st.sampled_from([0, 0.5, 1.0, 2.0]),
            "top_k": st.integers(1, 13),
            "top_p": st.sampled_from([0.5, 1.0]),
            "n": st.integers(1, 2),
            "seed": st.integers(0, 2**63 - 1),
            "stream": st.booleans(),
            "logprobs": st.integers(0, 5),
            "ignore_eos": st.booleans(),
        },
    )


def valid_generate():
    sampling = st.fixed_dictionaries(
        {"max_new_tokens": st.integers(1, 4)},
        optional={
            "temperature": st.sampled_from([0, 0.7, 1.0, 3.0]),
            "top_k": st.sampled_from([-1, 1, 5, 2**30]),
            "top_p": st.sampled_from([0.3, 1.0]),
            "sampling_seed": st.integers(0, 2**63 - 1),
            "min_p": st.just(0),
            "ignore_eos": st.booleans(),
            "min_new_tokens": st.integers(0, 1),
        },
    )
    one = st.fixed_dictionaries(
        {"input_ids": TOKENS, "sampling_params": sampling}, optional={"rid": st.text(max_size=5)}
    )
    batch = st.lists(TOKENS, min_size=1, max_size=3).flatmap(
        lambda ids: st.fixed_dictionaries(
            {
                "input_ids": st.just(ids),
                "sampling_params": sampling | st.lists(sampling, min_size=len(ids), max_size=len(ids)),
            }
        )
    )
    return one | batch


@st.composite
def broken(draw, valid, fields):
    """A valid body with a few fields replaced by junk, removed, or added."""
    body = draw(valid)
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["replace", "remove", "add", "nest"]))
        if action == "replace" or (action == "remove" and not body):
            body[draw(st.sampled_from(fields))] = draw(JUNK)
        elif action == "remove":
            body.pop(draw(st.sampled_from(sorted(body))))
        elif action == "add":
            body[draw(st.text(min_size=1, max_size=8))] = draw(JUNK)
        elif isinstance(body.get("sampling_params"), dict):
            body["sampling_params"][draw(st.sampled_from(SAMPLING_FIELDS))] = draw(JUNK)
        else:
            body[draw(st.sampled_from(fields))] = [draw(JUNK), [draw(JUNK)]]
    return body


REQUESTS = st.one_of(
    st.tuples(st.just("/v1/completions"), valid_completion() | broken(valid_completion(), COMPLETION_FIELDS)),
    st.tuples(st.just("/generate"), valid_generate() | broken(valid_generate(), GENERATE_FIELDS)),
    st.tuples(st.sampled_from(["/v1/completions", "/generate"]), JUNK),
)


def problem(status: int, text: str, sent) -> str | None:
    """What is wrong with an answer to `sent` (None: nothing): the module docstring's property."""
    if 200 <= status < 300:
        return None
    if not 400 <= status < 500:
        return f"HTTP {status}: {text[:300]}"
    try:
        err = json.loads(text)["error"]
        message, param = err["message"], err["param"]
    except (ValueError, KeyError, TypeError):
        return f"HTTP {status} without an OpenAI error body: {text[:300]}"
    names = set(sent) if isinstance(sent, dict) else set()
    if not (isinstance(param, str) and param) and not any(f in message for f in names | FIELDS):
        return f"HTTP {status} names no field: {text[:300]}"
    return None


def encode(body) -> bytes:
    return json.dumps(body).encode()  # allow_nan: NaN and Infinity literals, as Python's json reads


def fuzz(post, examples: int, after=None) -> None:
    """Run the property over `examples` drawn requests; post(path, content) -> (status, text)."""

    @settings(
        max_examples=examples,
        deadline=None,  # a busy machine is not a bug; each request's client timeout bounds a hang
        report_multiple_bugs=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(REQUESTS)
    @example(("/v1/completions", {"prompt": [1, 2], "temperature": math.nan}))
    @example(
        ("/generate", {"input_ids": [1], "sampling_params": {"temperature": math.inf, "max_new_tokens": 2}})
    )
    @example(("/v1/completions", {"prompt": [[1]] * 33, "n": 128, "max_tokens": 1}))
    @example(("/generate", {"input_ids": [[1]], "sampling_params": [{"max_new_tokens": 1}], "stream": False}))
    @example(("/generate", {"input_ids": [2**64], "sampling_params": {"top_k": 10**30, "max_new_tokens": 1}}))
    def check(request):
        path, body = request
        status, text = post(path, encode(body))
        assert problem(status, text, body) is None, problem(status, text, body)
        if after is not None:
            after()

    check()


def resident_bytes(pid: int) -> int:
    pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    import resource

    return pages * resource.getpagesize()


@pytest.fixture(scope="module")
def server(request, tmp_path_factory):
    return start(request, tmp_path_factory, "tiny-ouro", "--draft-depth", "1")


@pytest.mark.tier2
@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc (Linux) for resident memory")
def test_the_server_answers_every_fuzzed_request_with_a_2xx_or_a_named_4xx(server):
    headers = {"content-type": "application/json"}
    with httpx.Client(base_url=server.root, headers=headers, timeout=30) as c:

        def post(path, content):
            r = c.post(path, content=content)  # a dropped connection raises: the example fails
            return r.status_code, r.text

        def healthy():
            assert c.get("/health").status_code == 200

        for _ in range(10):  # warm the paths first: their first allocations are not a leak
            post("/generate", encode({"input_ids": [[1, 2]] * 3, "sampling_params": {"max_new_tokens": 4}}))
            post("/v1/completions", encode({"prompt": [1], "max_tokens": 4, "n": 3, "logprobs": 2}))
        start_rss = resident_bytes(server.proc.pid)
        fuzz(post, EXAMPLES, after=healthy)
        end_rss = resident_bytes(server.proc.pid)
    assert server.proc.poll() is None
    assert end_rss <= start_rss * (1 + MEMORY_SLACK), (start_rss, end_rss)


def test_the_property_fails_on_a_broken_handler(monkeypatch):
    """Negative control: a handler that raises KeyError where it reads a prompt (every valid
    request reaches it) answers 500, and the same fuzz must find it."""
    from starlette.testclient import TestClient

    from loopcert.cli import build_parser
    from loopcert.commands.serve import build_served
    from loopcert.serve import intake
    from loopcert.serve.app import create_app

    served = build_served(build_parser().parse_args(["serve", "tiny-ouro", "--draft-depth", "1"]))

    def broken_prompt_ids(*_a, **_k):
        raise KeyError("prompt")

    monkeypatch.setattr(intake, "prompt_ids", broken_prompt_ids)
    served.scheduler.start()
    try:
        with TestClient(create_app(served), raise_server_exceptions=False) as c:

            def post(path, content):
                r = c.post(path, content=content, headers={"content-type": "application/json"})
                return r.status_code, r.text

            with pytest.raises(AssertionError, match="HTTP 500"):
                fuzz(post, 40)
    finally:
        served.scheduler.stop()
