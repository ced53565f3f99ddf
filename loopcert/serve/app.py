"""The FastAPI application of `loopcert serve`: /v1/completions, /v1/models, /health, and SGLang's
/generate and /get_model_info (sglang.py).

Request -> validated CompletionRequest (schema.py) -> one scheduler Job per choice ->
decoded in a batched round (scheduler.py) -> an OpenAI completion (or its SSE stream), with
the decoder's per-choice stats in the `loopcert` extension field.

Seeds: choice i of a request (prompt-major: prompt p, sample k, i = p * n + k) decodes with
`seed + i`; a request without a seed gets one drawn by the server, reported in the extension
field so that the response can be reproduced. Sampling parameters map onto
refdec.SamplingParams as `temperature` -> temperature (0: greedy), `top_k` -> top_k,
`top_p` -> top_p (1.0 -> None: no nucleus filter, the same law without a rounding cut).
`logprobs`: the log-probability of each chosen token under the model's own next-token law at
the target depth (temperature 1, no top-k / top-p), and that law's top `logprobs` tokens.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from dataclasses import replace

import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from loopcert.serve import api_errors, auth, intake, limits, sglang
from loopcert.serve.api_errors import APIError
from loopcert.serve.scheduler import Job, Overloaded
from loopcert.serve.schema import CompletionRequest
from loopcert.serve.served import Served
from loopcert.serve.sglang import GenerateRequest
from refdec.sampling import SamplingParams

POLL_S = 0.05  # how often a waiting request checks that its client is still there


class ClientGone(Exception):
    pass


# -- request -> jobs ----------------------------------------------------------------------------


def sampling_of(req: CompletionRequest) -> SamplingParams:
    """The request's law: temperature, top-k and top-p as both APIs read them (intake.sampling),
    and the engines' other parameters as refdec.SamplingParams names them."""
    base = intake.sampling(req.temperature, req.top_k, req.top_p)
    return replace(
        base,
        min_p=req.min_p if not base.greedy else 0.0,
        repetition_penalty=req.repetition_penalty,
        frequency_penalty=req.frequency_penalty,
        presence_penalty=req.presence_penalty,
        logit_bias={int(k): b for k, b in (req.logit_bias or {}).items()},
        stop_token_ids=req.stop_token_ids or (),
        min_tokens=req.min_tokens,
        ignore_eos=req.ignore_eos,
    )


def make_jobs(served: Served, req: CompletionRequest) -> tuple[list[list[int]], list[Job], int]:
    """Validate what needs the model; (prompt ids per prompt, jobs in choice order, base seed)."""
    if req.model is not None and req.model != served.model_id:
        raise APIError(
            404,
            f"model {req.model!r} is not served here (this server serves {served.model_id!r})",
            "model",
            "invalid_request_error",
            "model_not_found",
        )
    if req.best_of is not None and req.best_of != req.n:
        raise APIError(400, f"best_of={req.best_of} is not supported (only best_of == n)", "best_of")
    if req.stop and served.decode([]) is None:
        raise APIError(
            400,
            f"stop: model {served.model_id!r} has no text form (no tokenizer, vocabulary "
            f"{served.vocab_size} < 256)",
            "stop",
        )
    prompts = req.prompts()
    intake.check_capacity(served, req.n * len(prompts), f"n={req.n} x {len(prompts)} prompts", "n")
    params = [f"prompt.{i}" if len(prompts) > 1 else "prompt" for i in range(len(prompts))]
    ids = [intake.prompt_ids(served, p, param, "prompt") for p, param in zip(prompts, params)]
    for p, param in zip(ids, params):
        intake.check_context(served, p, param, req.max_tokens, "max_tokens")
    seed = req.seed if req.seed is not None else secrets.randbits(62)
    V = served.vocab_size
    named = (("logit_bias", [int(k) for k in req.logit_bias or {}]), ("stop_token_ids", req.stop_token_ids))
    for field, given in named:
        bad = next((t for t in given or () if t >= V), None)
        if bad is not None:
            raise APIError(400, f"{field}: token id {bad} is outside the vocabulary [0, {V})", field)
    sampling = sampling_of(req)
    eos = None if req.ignore_eos else served.eos
    jobs = [
        Job(p, req.max_tokens, sampling, seed + i * req.n + k, eos, keep_logits=req.logprobs is not None)
        for i, p in enumerate(ids)
        for k in range(req.n)
    ]
    return ids, jobs, seed


# -- jobs -> choices ----------------------------------------------------------------------------


def cut_at_stop(served: Served, tokens: list[int], stops: list[str]) -> tuple[list[int], str | None]:
    """(tokens up to and including the one that completes the first stop string, text before it),
    or (tokens, None) when no stop string occurs."""
    for k in range(1, len(tokens) + 1):
        text = served.decode(tokens[:k])
        hits = [text.find(s) for s in stops if s in text]
        if hits:
            return tokens[:k], text[: min(hits)]
    return tokens, None


def logprobs_of(served: Served, job: Job, tokens: list[int], k: int) -> dict:
    logits = job.result.target_logits[: len(tokens)]
    pieces = [served.decode([t]) for t in tokens]
    pieces = [str(t) if p is None else p for p, t in zip(pieces, tokens)]
    token_lps, tops = [], []
    for t, lg in zip(tokens, logits):
        lp = torch.log_softmax(lg.detach().to("cpu", torch.float64), dim=-1)  # (V,) the model's own law
        token_lps.append(float(lp[t]))
        if k:
            vals, idx = torch.topk(lp, k)
            tops.append({(served.decode([int(i)]) or str(int(i))): float(v) for v, i in zip(vals, idx)})
    offsets, pos = [], 0
    for p in pieces:
        offsets.append(pos)
        pos += len(p)
    return {
        "tokens": pieces,
        "token_logprobs": token_lps,
        "top_logprobs": tops if k else None,
        "text_offset": offsets,
    }


def choice_of(served: Served, req: CompletionRequest, job: Job, index: int) -> tuple[dict, dict]:
    """(the OpenAI choice, its loopcert extension entry)."""
    intake.check_decoded(job, index)
    tokens = list(job.result.tokens)
    finish = "length"
    text_tokens = tokens
    if tokens and tokens[-1] in job.sampling.stop_ids(job.eos_token_id):
        finish, text_tokens = "stop", tokens[:-1]
    text = None
    if req.stop:
        cut, text = cut_at_stop(served, text_tokens, req.stops())
        if text is not None:
            tokens, text_tokens, finish = cut, cut, "stop"
    if text is None:
        text = served.decode(text_tokens)
        if text is None:
            text = " ".join(map(str, text_tokens))
    lp = logprobs_of(served, job, tokens, req.logprobs) if req.logprobs is not None else None
    ext = intake.extension(job, index, tokens)
    return {"index": index, "text": text, "logprobs": lp, "finish_reason": finish}, ext


def usage(ids: list[list[int]], n: int, exts: list[dict]) -> dict:
    prompt = sum(len(p) for p in ids) * n
    completion = sum(len(e["tokens"]) for e in exts)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


# -- waiting ------------------------------------------------------------------------------------


def attach(jobs: list[Job], progress: bool = False) -> list[asyncio.Event]:
    """One event per job, set when it ends; with progress, each job also gets an event set
    (`job.tick`) whenever it ends or commits tokens (the scheduler's step mode reports them)."""
    loop = asyncio.get_running_loop()
    events = []
    for j in jobs:
        ev = asyncio.Event()
        if progress:
            tick = j.tick = asyncio.Event()
            j.on_progress = lambda _j, tick=tick: loop.call_soon_threadsafe(tick.set)
            j.on_done = lambda _j, ev=ev, tick=tick: loop.call_soon_threadsafe(lambda: (ev.set(), tick.set()))
        else:
            j.on_done = lambda _j, ev=ev: loop.call_soon_threadsafe(ev.set)
        events.append(ev)
    return events


def live_text(served: Served, req: CompletionRequest, job: Job) -> str | None:
    """Text of a choice still decoding that is safe to send: a prefix of its final text. Held back:
    an unfinished UTF-8 character, and the last len(stop) - 1 characters (a stop string may be
    completing there); None once a stop string has occurred (the final chunk cuts there)."""
    tokens = job.partial
    if tokens and tokens[-1] in job.sampling.stop_ids(job.eos_token_id):
        tokens = tokens[:-1]
    text = served.decode(tokens)
    if text is None:
        return None
    stops = req.stops() if req.stop else []
    if any(s in text for s in stops):
        return None
    text = text.rstrip("\ufffd")
    hold = max((len(s) for s in stops), default=1) - 1
    return text[: max(0, len(text) - hold)]


async def wait_for(request: Request, events: list[asyncio.Event]) -> None:
    """Until every event is set; ClientGone as soon as the client disconnects."""
    pending = {asyncio.ensure_future(ev.wait()) for ev in events if not ev.is_set()}
    try:
        while pending:
            _done, pending = await asyncio.wait(pending, timeout=POLL_S)
            if pending and await request.is_disconnected():
                raise ClientGone
    finally:
        for p in pending:
            p.cancel()


def sse(data) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


def pieces_of(served: Served, tokens: list[int], final_text: str) -> list[str]:
    """The text deltas of a stream, one per token, never splitting a UTF-8 character; they join
    to final_text."""
    out, sent = [], ""
    for k in range(1, len(tokens) + 1):
        text = served.decode(tokens[:k])
        if text is None or len(text) > len(final_text):
            break
        if text.startswith(sent) and not text.endswith("\ufffd") and final_text.startswith(text):
            out.append(text[len(sent) :])
            sent = text
        else:
            out.append("")
    out += [""] * (len(tokens) - len(out))
    if out:
        out[-1] += final_text[len(sent) :]
    elif final_text:
        out = [final_text]
    return out


# -- the app ------------------------------------------------------------------------------------


def create_app(
    served: Served,
    api_key: str | None = None,
    max_body_bytes: int = limits.MAX_BODY_BYTES,
    read_timeout_s: float = limits.READ_TIMEOUT_S,
) -> FastAPI:
    """The app; with api_key every route but /health needs it (auth.py). Each body is bounded in
    size and read time before any route sees it (limits.py)."""
    app = FastAPI(title="loopcert serve", version="1")
    api_errors.install(app)
    app.add_middleware(limits.BodyLimits, max_body_bytes=max_body_bytes, read_timeout_s=read_timeout_s)
    if api_key:  # added last: the outermost, so a request without the key is refused unread
        app.add_middleware(auth.APIKeyMiddleware, key=api_key)
    app.state.served = served

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": served.model_id, **served.scheduler.status()}

    @app.get("/v1/models")
    async def models():
        card = {
            "id": served.model_id,
            "object": "model",
            "created": served.created,
            "owned_by": "loopcert",
            "loopcert": served.info,
        }
        return {"object": "list", "data": [card]}

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        ids, jobs, seed = make_jobs(served, req)
        # text as it is decoded: byte-level text, no logprobs (they come with the choice's end)
        incremental = bool(req.stream) and served.prefix_stable and req.logprobs is None
        events = attach(jobs, progress=incremental)
        submit(served, jobs)
        head = {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": served.model_id,
            "system_fingerprint": served.info.get("fingerprint", "")[:16],
        }
        if req.stream:
            return StreamingResponse(
                stream(served, req, request, jobs, events, ids, seed, head, incremental),
                media_type="text/event-stream",
            )
        try:
            await wait_for(request, events)
        except ClientGone:
            served.scheduler.cancel(jobs)
            return Response(status_code=499)
        finally:
            served.scheduler.cancel([j for j in jobs if j.t_end is None])
        pairs = [choice_of(served, req, j, i) for i, j in enumerate(jobs)]
        exts = [e for _, e in pairs]
        ext = {"seed": seed, "choices": exts, "decoder": served.info.get("decoder")}
        return JSONResponse(
            {**head, "choices": [c for c, _ in pairs], "usage": usage(ids, req.n, exts), "loopcert": ext}
        )

    @app.api_route("/generate", methods=["POST", "PUT"])
    async def generate(req: GenerateRequest, request: Request):
        plan = sglang.plan(served, req)
        events = attach(plan.jobs)
        submit(served, plan.jobs)
        try:
            await wait_for(request, events)
        except ClientGone:
            served.scheduler.cancel(plan.jobs)
            return Response(status_code=499)
        finally:
            served.scheduler.cancel([j for j in plan.jobs if j.t_end is None])
        outs = [sglang.output(served, plan, i) for i in range(len(plan.jobs))]
        return JSONResponse(outs if plan.batch else outs[0])

    @app.get("/get_model_info")
    async def get_model_info():
        return sglang.model_info(served)

    return app


def submit(served: Served, jobs: list[Job]) -> None:
    """Queue a request's jobs; a full queue is a 503 (it can run once others have: retry)."""
    try:
        served.scheduler.submit(jobs)
    except Overloaded as e:
        raise APIError(503, str(e), None, "server_error", "overloaded") from None


async def stream(
    served: Served,
    req: CompletionRequest,
    request: Request,
    jobs: list[Job],
    events: list[asyncio.Event],
    ids,
    seed: int,
    head: dict,
    incremental: bool = False,
):
    """SSE chunks, choice by choice: its text (incremental: as the scheduler's steps commit it,
    see live_text; else token by token once the choice has ended), then its finish_reason and
    loopcert extension, then usage (stream_options.include_usage), [DONE]."""
    exts = []
    try:
        for i, (job, ev) in enumerate(zip(jobs, events)):
            sent = ""
            while incremental and not ev.is_set():
                job.tick.clear()  # before reading job.partial: a step after the read sets it again
                text = live_text(served, req, job)
                if text is not None and len(text) > len(sent) and text.startswith(sent):
                    delta = {"index": i, "text": text[len(sent) :], "logprobs": None, "finish_reason": None}
                    yield sse({**head, "choices": [delta]})
                    sent = text
                await wait_for(request, [job.tick])
            await wait_for(request, [ev])
            choice, ext = choice_of(served, req, job, i)
            exts.append(ext)
            toks = ext["tokens"]
            has_text = served.decode([]) is not None
            if sent:  # the rest of the final text (what was sent is its prefix: live_text)
                if not choice["text"].startswith(sent):
                    raise APIError(
                        500,
                        f"choice {i}: the text streamed so far is not a prefix of its final "
                        "text (the detokenizer is not prefix-stable)",
                        None,
                        "server_error",
                    )
                deltas = [choice["text"][len(sent) :]]
            else:
                deltas = pieces_of(served, toks, choice["text"]) if has_text else [choice["text"]]
            per_token = len(deltas) == len(toks)
            for k, piece in enumerate(deltas):
                lp = choice["logprobs"]
                if lp is not None and per_token:  # this token's slice of each list
                    lp = {key: (v[k : k + 1] if isinstance(v, list) else v) for key, v in lp.items()}
                delta = {"index": i, "text": piece, "logprobs": lp, "finish_reason": None}
                yield sse({**head, "choices": [delta]})
            yield sse(
                {
                    **head,
                    "choices": [
                        {"index": i, "text": "", "logprobs": None, "finish_reason": choice["finish_reason"]}
                    ],
                    "loopcert": {"seed": seed, "choices": [ext], "decoder": served.info.get("decoder")},
                }
            )
        if req.stream_options is not None and req.stream_options.include_usage:
            yield sse({**head, "choices": [], "usage": usage(ids, req.n, exts)})
        yield sse("[DONE]")
    except ClientGone:
        return
    except APIError as e:
        yield sse(api_errors.body(e.message, e.param, e.kind, e.code))
    finally:
        served.scheduler.cancel([j for j in jobs if j.t_end is None])
