"""`loopcert serve`: a real server subprocess on 127.0.0.1, the official `openai` client, bad
input, disconnects, and the batching scheduler."""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch

httpx = pytest.importorskip("httpx")  # the serve extra; tox's py env installs it
openai = pytest.importorskip("openai")  # the test extra; tox's py env installs it
pytest.importorskip("fastapi")  # the serve extra; tox's py env installs it too
pytest.importorskip("uvicorn")

from serving import start  # noqa: E402

import fastdec  # noqa: E402
import refdec  # noqa: E402
import refdec.config  # noqa: E402
from loopcert.serve.scheduler import Job, Scheduler  # noqa: E402
from refdec.sampling import SamplingParams  # noqa: E402

DEFAULT_ARGS = ("default", "--strategy", "pipelined", "--draft-depth", "2", "--second-depth", "8")


@pytest.fixture(scope="module")
def server(request, tmp_path_factory):
    return start(request, tmp_path_factory, *DEFAULT_ARGS)


@pytest.fixture(scope="module")
def local():
    """The same decoder in this process: what every response must equal."""
    model = refdec.load_model("default")
    return model, fastdec.Decoder(model, "pipelined", draft_depth=2, second_depth=8)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=120)


def test_models_and_health(server):
    models = httpx.get(server.url + "/models").json()
    assert [m["id"] for m in models["data"]] == ["default"]
    info = models["data"][0]["loopcert"]
    assert info["decoder"]["strategy"] == "pipelined" and info["decoder"]["lossless"] is True
    assert len(info["fingerprint"]) == 64
    h = server.health()
    assert h["status"] == "ok" and h["waiting"] == 0 and h["running"] == 0


def test_openai_client_greedy_matches_generate(client, local):
    model, dec = local
    out = client.completions.create(model="default", prompt="def ", max_tokens=12, temperature=0)
    want = dec.generate(list(b"def "), 12, SamplingParams()).tokens
    assert out.choices[0].text == bytes(want).decode("utf-8", errors="replace")
    assert out.choices[0].finish_reason == "length"
    assert out.usage.completion_tokens == 12 and out.usage.prompt_tokens == 4
    ext = out.model_extra["loopcert"]["choices"][0]
    assert ext["tokens"] == want
    assert ext["stats"]["strategy"] == "pipelined" and 0 <= ext["stats"]["acceptance_rate"] <= 1
    assert ext["stats"]["gamma"] >= 1


def test_openai_client_sampling_with_seed_n_and_logprobs(client, local):
    """Token-id prompt, seed, n=2, top_k/top_p, logprobs: choice i is generate(seed + i)."""
    model, dec = local
    prompt = list(b"import ")
    sp = SamplingParams(temperature=0.9, top_k=20, top_p=0.95)
    request = {"model": "default", "prompt": prompt, "max_tokens": 8, "seed": 11, "n": 2}
    kw = request | {"temperature": sp.temperature, "top_p": sp.top_p, "extra_body": {"top_k": sp.top_k}}
    out = client.completions.create(**kw, logprobs=2)
    for i, choice in enumerate(out.choices):
        ext = out.model_extra["loopcert"]["choices"][i]
        assert ext["seed"] == 11 + i
        assert ext["tokens"] == dec.generate(prompt, 8, sp, seed=11 + i).tokens
        lp = choice.logprobs
        assert len(lp.token_logprobs) == 8 and all(v <= 0 for v in lp.token_logprobs)
        assert all(len(top) <= 2 for top in lp.top_logprobs)
    again = client.completions.create(**kw)  # the same request without logprobs: the same text
    assert [c.text for c in again.choices] == [c.text for c in out.choices]


def test_the_engines_other_parameters_are_honoured(client, local):
    """min_p, the penalties, logit_bias, stop_token_ids and min_tokens reach fastdec as the
    SamplingParams of the same names: choice i is generate(seed + i) under them; a stop token ends
    a choice with finish "stop" (the token kept in loopcert.choices[].tokens)."""
    model, dec = local
    prompt = list(b"def ")
    likely = dec.generate(prompt, 1, SamplingParams()).tokens[0]
    sp = SamplingParams(
        temperature=0.9,
        top_p=0.95,
        min_p=0.05,
        repetition_penalty=1.3,
        frequency_penalty=0.5,
        presence_penalty=0.25,
        logit_bias={likely: 2.0},
        stop_token_ids=[likely],
        min_tokens=2,
    )
    extra = {
        "min_p": 0.05,
        "repetition_penalty": 1.3,
        "stop_token_ids": [likely],
        "min_tokens": 2,
    }
    out = client.completions.create(
        model="default",
        prompt=prompt,
        max_tokens=8,
        seed=3,
        n=4,
        temperature=0.9,
        top_p=0.95,
        frequency_penalty=0.5,
        presence_penalty=0.25,
        logit_bias={str(likely): 2.0},
        extra_body=extra,
    )
    stopped = 0
    for i, choice in enumerate(out.choices):
        want = dec.generate(prompt, 8, sp, seed=3 + i).tokens
        assert out.model_extra["loopcert"]["choices"][i]["tokens"] == want
        assert choice.finish_reason == ("stop" if want[-1] == likely else "length")
        stopped += want[-1] == likely
    assert stopped > 0
    with pytest.raises(openai.BadRequestError, match="logit_bias"):
        client.completions.create(model="default", prompt=prompt, max_tokens=2, logit_bias={"1000000": 1.0})
    with pytest.raises(openai.BadRequestError, match="min_p"):
        client.completions.create(model="default", prompt=prompt, max_tokens=2, extra_body={"min_p": 2.0})


def test_stream_equals_plain_and_stop_cuts(client):
    kw = dict(model="default", prompt="def ", max_tokens=24, temperature=0.8, seed=5)
    plain = client.completions.create(**kw)
    pieces, finish = [], None
    for chunk in client.completions.create(stream=True, **kw):
        for c in chunk.choices:
            pieces.append(c.text)
            finish = c.finish_reason or finish
    assert "".join(pieces) == plain.choices[0].text and finish == "length"
    text = plain.choices[0].text
    stop = text[5:7]
    cut = client.completions.create(stop=[stop], **kw)
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == text[: text.index(stop)]


@pytest.mark.tier2
def test_a_stream_sends_text_while_the_choice_decodes(server):
    """Incremental streaming: the first text arrives before the choice has ended (the server's own
    queue + decode time, from the final chunk's extension), and the pieces join to the whole text.
    Sent only when the choice ends, the first text would arrive after all of that time: the client's
    clock starts before the server's, so the bound holds at any load (a bound of half that time
    failed in CI with two suites sharing two cores: 1.88 s against 3.35 s)."""
    body = {"prompt": "def ", "max_tokens": 160, "temperature": 0.8, "seed": 11, "stream": True}
    texts, first, ext = [], None, None
    with httpx.Client(timeout=120) as c:
        t0 = time.perf_counter()
        with c.stream("POST", server.url + "/completions", json=body) as r:
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                for ch in chunk["choices"]:
                    if ch["text"]:
                        texts.append(ch["text"])
                        first = first if first is not None else time.perf_counter() - t0
                ext = chunk.get("loopcert", {}).get("choices", [ext])[0]
    plain = httpx.post(server.url + "/completions", json={**body, "stream": False}, timeout=120).json()
    assert "".join(texts) == plain["choices"][0]["text"]
    served_s = ext["queue_seconds"] + ext["decode_seconds"]
    assert len(texts) > 2 and first < served_s, (first, served_s, len(texts))


@pytest.mark.parametrize(
    "body,param",
    [
        ({"prompt": "x", "temperature": 2.5}, "temperature"),
        ({"prompt": "x", "top_p": 0}, "top_p"),
        ({"prompt": "x", "top_k": 0}, "top_k"),
        ({"prompt": "x", "n": 0}, "n"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "x", "seed": -1}, "seed"),
        ({"prompt": "x", "logprobs": 9}, "logprobs"),
        ({"prompt": "x", "max_tokens": True}, "max_tokens"),
        ({"prompt": "x", "temperature": "0.5"}, "temperature"),
        ({"prompt": "x", "frobnicate": 1}, "frobnicate"),
        # loopcert serve samples temperature-first only: asking for another order is refused
        ({"prompt": "x", "sampler_order": "filters-first"}, "sampler_order"),
        ({"prompt": "x", "presence_penalty": 2.5}, "presence_penalty"),
        ({"prompt": "x", "logit_bias": {"one": 5}}, "logit_bias"),
        ({"prompt": "x", "logit_bias": {"1": 500}}, "logit_bias"),
        ({"prompt": "x", "repetition_penalty": 0}, "repetition_penalty"),
        ({"prompt": "x", "stop_token_ids": [-1]}, "stop_token_ids"),
        ({"prompt": "x", "min_tokens": -1}, "min_tokens"),
        ({"prompt": "x", "best_of": 3}, "best_of"),
        ({"prompt": [1, 2, 256]}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": "x", "max_tokens": 5000}, "max_tokens"),
        ({"prompt": [65] * 4096, "max_tokens": 1}, "prompt"),
        ({}, "prompt"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(server, body, param):
    r = httpx.post(server.url + "/completions", json=body, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error" and param in err["message"]


def test_malformed_json_and_unknown_model(server):
    r = httpx.post(
        server.url + "/completions",
        content=b'{"prompt": "x",',
        timeout=30,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "body"
    assert "malformed JSON" in r.json()["error"]["message"]
    r = httpx.post(server.url + "/completions", json={"prompt": "x", "model": "gpt-9"}, timeout=30)
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"
    r = httpx.post(
        server.url + "/completions",
        content=b"[1, 2]",
        timeout=30,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400


def _settled(server, want_cancelled: int) -> dict:
    deadline = time.monotonic() + 60
    while True:
        h = server.health()
        if (
            h["waiting"] == 0 and h["running"] == 0 and h["cancelled"] >= want_cancelled
        ) or time.monotonic() > deadline:
            return h
        time.sleep(0.1)


def test_client_disconnects_leave_nothing_behind(server, client):
    """A long request occupies the decode thread; a streaming client that goes away while its
    request waits or decodes (it joins the running batch at the next step) is dropped, and one
    that goes away mid-stream too; the server then answers the next request as usual."""
    before = server.health()["cancelled"]
    long = {"prompt": "def ", "max_tokens": 200, "temperature": 0}
    blocker = threading.Thread(target=lambda: httpx.post(server.url + "/completions", json=long, timeout=300))
    blocker.start()
    _until(lambda: server.health()["running"] >= 1)  # the long one decodes (not: it had 0.5 s to arrive)
    with httpx.Client(timeout=30) as c:
        with c.stream(
            "POST",
            server.url + "/completions",
            json={"prompt": "x", "max_tokens": 50, "stream": True, "seed": 1},
        ) as r:
            assert r.status_code == 200
            h = server.health()
            assert h["waiting"] + h["running"] >= 2  # the long one decodes, this one waits or joined it
        # closed before the first chunk: the job is cancelled in the queue
    h = _settled(server, before + 1)
    blocker.join()
    assert h["waiting"] == 0 and h["running"] == 0 and h["cancelled"] >= before + 1
    with httpx.Client(timeout=60) as c:  # mid-stream: read one chunk, then go away
        with c.stream(
            "POST",
            server.url + "/completions",
            json={"prompt": "x", "max_tokens": 40, "stream": True, "seed": 2, "n": 3},
        ) as r:
            first = next(r.iter_lines())
            assert first.startswith("data: ")
            json.loads(first[6:])
    h = _settled(server, before + 1)
    assert h["waiting"] == 0 and h["running"] == 0
    out = client.completions.create(model="default", prompt="def ", max_tokens=4, temperature=0)
    assert out.choices[0].finish_reason == "length"


# -- the scheduler without HTTP ------------------------------------------------------------------


class FakeBatchDecoder:
    """Records each call's seeds; the tokens are [seed % 7] * max_new_tokens, so results are checkable."""

    max_batch = 64

    def __init__(self):
        self.calls = []

    def generate_batch(self, prompts, max_new_tokens, sampling, seeds, eos_token_id=None, keep_logits=False):
        assert len(prompts) == len(max_new_tokens) == len(sampling) == len(seeds)
        self.calls.append(list(seeds))
        return [fastdec.GenerateResult([s % 7] * n, None) for s, n in zip(seeds, max_new_tokens)]

    def generate(self, prompt, max_new_tokens, sampling, seed=0, eos_token_id=None, keep_logits=False):
        self.calls.append([seed])
        return fastdec.GenerateResult([seed % 7] * max_new_tokens, None)


def _until(done, bound_s: float = 120.0) -> None:
    """Wait until done() is true; `bound_s` only bounds a hang (the assertions after it say what
    went wrong), it is never what a test measures."""
    deadline = time.monotonic() + bound_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)


def _drain(sch: Scheduler, n: int) -> None:
    _until(lambda: sch.status()["completed"] >= n)
    sch.stop()


def test_scheduler_batches_what_waits_whatever_its_sampling():
    """Waiting jobs share a round whatever their sampling and length (generate_batch takes one of
    each per sequence); EOS splits rounds (it takes one); max_batch caps a round."""
    dec = FakeBatchDecoder()
    sch = Scheduler(dec, max_batch=4)
    greedy, hot = SamplingParams(), SamplingParams(temperature=1.0)
    jobs = [
        Job([1], 2 + i % 3, greedy if i % 2 else hot, seed=i, eos_token_id=None if i < 7 else 5)
        for i in range(9)
    ]
    sch.submit(jobs)  # all waiting before the decode thread starts: rounds take them together
    sch.start()
    _drain(sch, 9)
    assert sorted(s for call in dec.calls for s in call) == list(range(9))  # none lost or duplicated
    assert dec.calls == [[0, 1, 2, 3], [4, 5, 6], [7, 8]]  # arrival order, at most 4, EOS apart
    assert all(j.result.tokens == [j.seed % 7] * j.max_new_tokens and j.batched for j in jobs)
    assert [j.batch_size for j in jobs] == [4, 4, 4, 4, 3, 3, 3, 2, 2]


@pytest.mark.parametrize("window_s,rounds", [(9.0, [[0, 1]]), (0.0, [[0], [1]])])
def test_batch_window_fills_a_round(window_s, rounds):
    """A job that arrives within the window joins the round (a 9 s window, which ends as soon as
    max_batch = 2 jobs wait: the second comes about 0.2 s later, however loaded the machine);
    without a window the first job is decoded alone, before the second is submitted."""
    dec = FakeBatchDecoder()
    sch = Scheduler(dec, max_batch=2, window_s=window_s)
    sch.start()
    sch.submit([Job([1], 2, SamplingParams(), seed=0)])
    if window_s:
        time.sleep(0.2)  # the decode thread is in the window by then (or the two jobs wait together)
    else:
        _until(lambda: sch.status()["completed"] >= 1)
    sch.submit([Job([1], 2, SamplingParams(), seed=1)])
    _drain(sch, 2)
    assert dec.calls == rounds


def test_scheduler_drops_cancelled_waiting_jobs_and_isolates_errors():
    class Flaky(FakeBatchDecoder):
        def generate_batch(self, *a, **k):
            raise RuntimeError("batch failed")

        def generate(self, prompt, max_new_tokens, sampling, seed=0, eos_token_id=None, keep_logits=False):
            if seed == 2:
                raise RuntimeError("seed 2 is cursed")
            return super().generate(prompt, max_new_tokens, sampling, seed)

    dec = Flaky()
    sch = Scheduler(dec)
    jobs = [Job([1], 2, SamplingParams(), seed=i) for i in range(4)]
    sch.submit(jobs)
    sch.cancel([jobs[1]])
    sch.start()
    _drain(sch, 3)
    st = sch.status()
    assert st["waiting"] == 0 and st["running"] == 0 and st["cancelled"] == 1
    assert jobs[1].result is None and [1] not in dec.calls
    assert isinstance(jobs[2].error, RuntimeError) and jobs[0].result.tokens == [0, 0]
    assert jobs[3].result.tokens == [3, 3]


def test_ignore_seed_scheduler_reseeds():
    dec = FakeBatchDecoder()
    sch = Scheduler(dec, ignore_seed=True)
    jobs = [Job([1], 1, SamplingParams(), seed=5) for _ in range(3)]
    sch.submit(jobs)
    sch.start()
    _drain(sch, 3)
    assert len({j.decoded_seed for j in jobs}) == 3 and all(j.seed == 5 for j in jobs)


# -- continuous batching: the scheduler over a real fastdec.Decoder ------------------------------


def _slow_decoder(seconds_per_step: float = 0.004):
    """A tiny-model fastdec.Decoder (float64: tokens are a function of the seed) whose engine
    steps take a few ms, so that a request can arrive while another decodes."""
    model = refdec.LoopedLM(refdec.config.get_preset("tiny-raven")).init_weights(1).to(torch.float64)
    dec = fastdec.Decoder(model, "pipelined", draft_depth=1, second_depth=2, max_batch=4)
    dec._step_hook = lambda *_: time.sleep(seconds_per_step)
    return dec


def _gated(dec: fastdec.Decoder) -> threading.Event:
    """Hold dec's engine steps until the returned event is set (then they take their usual time):
    what a test does meanwhile happens before the decode moves on, however loaded the machine."""
    gate, step = threading.Event(), dec._step_hook
    dec._step_hook = lambda *a: (gate.wait(120), step(*a))
    return gate


def _wait_running(sch: Scheduler, n: int) -> None:
    _until(lambda: sch.status()["running"] >= n)


@pytest.mark.parametrize("join", ["step", "round"])
def test_a_request_joins_the_running_batch_at_the_next_step(join):
    """In step mode a job submitted while another decodes joins its batch before it ends (and
    leaves it first: it is shorter); in round mode (control) it waits for the round to end.
    Every result is generate() alone for its seed."""
    dec = _slow_decoder()
    gate = _gated(dec)  # the first job's first step waits until the second is submitted
    sch = Scheduler(dec, max_batch=4, join=join)
    sp = SamplingParams(temperature=1.0)
    first, second = Job([1, 2, 3], 40, sp, seed=1), Job([4, 5], 4, sp, seed=2)
    sch.start()
    sch.submit([first])
    _wait_running(sch, 1)
    sch.submit([second])
    gate.set()
    _drain(sch, 2)
    if join == "step":
        assert second.t_start < first.t_end and second.t_end < first.t_end
        assert second.round > first.round and second.batch_size == 2
    else:
        assert second.t_start >= first.t_end and second.round == first.round + 1
    alone = _slow_decoder(0.0)
    for j in (first, second):
        assert j.result.tokens == alone.generate(j.prompt, j.max_new_tokens, sp, seed=j.seed).tokens


def test_a_cancelled_decoding_job_leaves_the_batch_at_the_next_step():
    dec = _slow_decoder()
    gate = _gated(dec)  # no step until the cancel: `gone` cannot have ended by itself
    sch = Scheduler(dec, max_batch=4)
    sp = SamplingParams(temperature=1.0)
    gone, stays = Job([1, 2, 3], 120, sp, seed=1), Job([1, 2, 3], 30, sp, seed=2)
    sch.submit([gone, stays])
    sch.start()
    _wait_running(sch, 2)
    sch.cancel([gone])
    gate.set()
    _drain(sch, 1)
    # dropped mid-decode: it ended before `stays`, which has 90 tokens fewer to decode
    assert gone.t_end is not None and stays.t_end is not None and gone.t_end < stays.t_end
    st = sch.status()
    assert st["waiting"] == st["running"] == 0 and st["cancelled"] == 1 and st["completed"] == 1
    assert gone.result is None
    assert stays.result.tokens == _slow_decoder(0.0).generate([1, 2, 3], 30, sp, seed=2).tokens


@pytest.mark.parametrize("join", ["step", "round"])
def test_step_mode_reports_committed_tokens_as_it_decodes(join):
    """on_progress hands a decoding job its committed tokens after each step that added some: each
    a longer prefix of the result (fastdec commits for good). Round mode (control) reports none."""
    dec = _slow_decoder(0.0)
    sch = Scheduler(dec, max_batch=4, join=join)
    seen = []
    sp = SamplingParams(temperature=1.0)
    job = Job([1, 2, 3], 40, sp, seed=3, on_progress=lambda j: seen.append(j.partial))
    sch.submit([job])
    sch.start()
    _drain(sch, 1)
    final = job.result.tokens
    if join == "round":
        assert seen == []
        return
    assert len(seen) >= 3, seen
    assert all(0 < len(a) < len(b) for a, b in zip(seen, seen[1:]))
    assert all(p == final[: len(p)] for p in seen)


def test_step_mode_sizes_batches_and_keeps_fifo():
    """A job too long for the running batch waits until it drains (nothing overtakes it), then
    gets a batch of its own size."""
    dec = _slow_decoder(0.001)
    sch = Scheduler(dec, max_batch=4)
    sp = SamplingParams()
    short, long, after = Job([1], 8, sp, seed=0), Job([1] * 100, 20, sp, seed=1), Job([2], 4, sp, seed=2)
    sch.submit([short])
    sch.start()
    _wait_running(sch, 1)
    sch.submit([long, after])
    _drain(sch, 3)
    assert long.t_start >= short.t_end and after.t_start >= long.t_start
    assert all(j.result is not None and j.error is None for j in (short, long, after))
    assert long.result.tokens == _slow_decoder(0.0).generate([1] * 100, 20, sp).tokens
