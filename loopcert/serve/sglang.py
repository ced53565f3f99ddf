"""SGLang's native API on `loopcert serve`: POST /generate and GET /get_model_info.

Field names, defaults and answer shapes follow SGLang's own source (read, not copied):
- the request: `GenerateReqInput` in python/sglang/srt/managers/io_struct.py (`text` or
  `input_ids`, one prompt or a batch; `sampling_params` one dict or a list, one per item; `rid`;
  `stream`; `return_logprob`);
- the sampling fields and their defaults: `SamplingParams` in
  python/sglang/srt/sampling/sampling_params.py (max_new_tokens 128, temperature 1.0, top_p 1.0,
  top_k -1 = every token, min_p 0, penalties 0 / 0 / 1.0, min_new_tokens 0, ignore_eos false,
  sampling_seed; a null field takes its default, as there; temperature 0 is greedy);
- the routes and the answer: python/sglang/srt/entrypoints/http_server.py (/generate on POST and
  PUT, /get_model_info) and the finish reasons of managers/schedule_batch.py
  ({"type": "length", "length": N}, {"type": "stop", "matched": EOS id}).

The answer to one prompt is {"text", "output_ids", "meta_info": {"id", "finish_reason",
"prompt_tokens", "completion_tokens", "cached_tokens", "loopcert"}}; a batch gets a list of
those, in order. `output_ids` holds every decoded token, the EOS that ended a sequence
included; `text` is their text without it (null for a model without a text form). The
`loopcert` field is /v1/completions' per-choice extension (seed, stats, batch).

Same scheduler and sampling law as /v1/completions (intake.py). Seeds: item i of a request
decodes with `sampling_seed + i` when one dict (or none) serves the whole batch, exactly as
/v1/completions decodes prompt i with `seed + i`; with a list of dicts, item i decodes with its
own dict's `sampling_seed`. An item without a seed takes the server's drawn base + i, reported in
its `loopcert.seed`.

Refused with a 400 naming the field, as /v1/completions refuses them: anything that would change
the law and is not implemented (min_p, penalties, logit_bias, stop strings, grammars, n > 1,
logprobs, streaming) unless sent at its neutral value; `min_new_tokens` > 0 on a model with an EOS
token (SGLang masks EOS until then: another law), while on a model without one every decode is
max_new_tokens long and the field changes nothing.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from loopcert.serve import intake
from loopcert.serve.api_errors import APIError
from loopcert.serve.scheduler import Job
from loopcert.serve.schema import MAX_SEED, refuse_set
from loopcert.serve.served import Served

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's SamplingParams default

# SGLang sampling fields loopcert does not implement, each accepted only at its neutral value
NEUTRAL = {
    "min_p": 0,
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "repetition_penalty": 1,
}
ABSENT = ("stop", "stop_token_ids", "stop_regex", "json_schema", "regex", "ebnf", "structural_tag")
ABSENT += ("logit_bias", "custom_params")


def _is_number(v, value) -> bool:
    return type(v) in (int, float) and v == value


class _SGLangImplemented(BaseModel):
    """SGLang's SamplingParams fields that loopcert implements, and the validators of all of them
    (SGLangSampling adds the unsupported ones, last)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    max_new_tokens: int | None = Field(DEFAULT_MAX_NEW_TOKENS, ge=1)  # null: the rest of the context
    min_new_tokens: int | None = Field(0, ge=0)
    temperature: float | None = Field(1.0, ge=0.0, allow_inf_nan=False)  # 0: greedy
    top_p: float | None = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    top_k: int | None = -1  # -1: every token
    ignore_eos: bool | None = False
    sampling_seed: int | None = Field(None, ge=0, le=MAX_SEED)  # None: the server draws one
    n: int | None = 1
    # detokenization only: they change no token
    skip_special_tokens: bool | None = True
    spaces_between_special_tokens: bool | None = True
    no_stop_trim: bool | None = False
    stream_interval: int | None = None

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, v):
        if v is not None and v != -1 and v < 1:
            raise ValueError("must be -1 (every token) or an integer >= 1")
        return v

    @field_validator("n")
    @classmethod
    def _one(cls, v):
        if v is not None and v != 1:
            raise ValueError("only n=1 is supported (send a batch of input_ids for more samples)")
        return v

    @field_validator(*NEUTRAL, check_fields=False)
    @classmethod
    def _neutral(cls, v, info):
        neutral = NEUTRAL[info.field_name]
        if v is not None and not _is_number(v, neutral):
            msg = f"is not supported (it would change the sampling law); omit it or send {neutral}"
            raise ValueError(msg)
        return v

    @field_validator(*ABSENT, check_fields=False)
    @classmethod
    def _absent(cls, v, info):
        if v is not None and v not in ([], {}):
            raise ValueError("is not supported on /generate (it would change what is decoded); omit it")
        return v


# the fields loopcert implements, then those it takes only at a neutral value or absent (module
# docstring): any type, judged by _SGLangImplemented's validators; one list of names, NEUTRAL and ABSENT
SGLangSampling = create_model(
    "SGLangSampling",
    __base__=_SGLangImplemented,
    __doc__="One item's `sampling_params` (SGLang's SamplingParams fields; null means the default).",
    **{name: (Any, None) for name in (*NEUTRAL, *ABSENT)},
)


class GenerateRequest(BaseModel):
    """POST /generate (SGLang's GenerateReqInput, the fields loopcert implements)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: SGLangSampling | list[SGLangSampling] | None = None
    rid: str | list[str] | None = None
    stream: bool = False
    return_logprob: bool | list[bool] | None = None
    # meaningful only with return_logprob, which is refused: accepted and unused
    logprob_start_len: int | list[int] | None = None
    top_logprobs_num: int | list[int] | None = None
    return_text_in_logprobs: bool = False
    log_metrics: bool = True

    _no_stream = refuse_set(
        "stream", "streaming is not supported on /generate; send false (or use /v1/completions)"
    )

    @field_validator("return_logprob")
    @classmethod
    def _no_logprob(cls, v):
        if v is True or (isinstance(v, list) and any(v)):
            raise ValueError("is not supported on /generate; send false (or use /v1/completions' logprobs)")
        return v


@dataclass(frozen=True)
class GeneratePlan:
    """A validated /generate request as scheduler jobs, item by item."""

    batch: bool  # the request was a batch: the answer is a list
    ids: list[list[int]]  # each item's prompt ids
    jobs: list[Job]  # one per item, in order
    rids: list[str]


def _items(req: GenerateRequest) -> tuple[bool, list, str]:
    """(batch?, each item's prompt, the field it came from)."""
    if req.text is not None and req.input_ids is not None:
        raise APIError(400, "text: send either text or input_ids, not both", "text")
    if req.input_ids is not None:
        v, name = req.input_ids, "input_ids"
        batch = bool(v) and isinstance(v[0], list)
    elif req.text is not None:
        v, name = req.text, "text"
        batch = isinstance(v, list)
    else:
        raise APIError(400, "input_ids is required (a list of token ids), or text", "input_ids")
    items = list(v) if batch else [v]
    if not items or (batch and not all(items)) or (not batch and not v):
        raise APIError(400, f"{name}: must not be empty (nor hold an empty prompt)", name)
    return batch, items, name


def _per_item(value, n: int, name: str, batch: bool) -> list:
    """A field given once for the request or once per item, as a list of n."""
    if not isinstance(value, list):
        return [value] * n
    if len(value) != n:
        what = f"{n} items" if batch else "one prompt"
        raise APIError(400, f"{name}: {len(value)} entries for {what} (send one per item, or one)", name)
    return list(value)


def plan(served: Served, req: GenerateRequest) -> GeneratePlan:
    """Validate what needs the model and build one job per item (the module docstring's seeds)."""
    batch, prompts, name = _items(req)
    n = len(prompts)
    intake.check_capacity(served, n, f"a batch of {n} prompts", name)
    shared = req.sampling_params is None or not isinstance(req.sampling_params, list)
    sp = req.sampling_params if req.sampling_params is not None else SGLangSampling()
    params = _per_item(sp, n, "sampling_params", batch)
    rids = _per_item(req.rid, n, "rid", batch)
    if req.rid is None:
        rids = [uuid.uuid4().hex for _ in range(n)]
    elif batch and isinstance(req.rid, str):
        rids = [f"{req.rid}_{i}" for i in range(n)]
    drawn = secrets.randbits(62)
    jobs, ids = [], []
    for i, (prompt, sp) in enumerate(zip(prompts, params)):
        where = f"{name}.{i}" if batch else name
        sp_name = f"sampling_params.{i}" if batch and not shared else "sampling_params"
        p = intake.prompt_ids(served, prompt, where, "input_ids")
        max_new = sp.max_new_tokens if sp.max_new_tokens is not None else served.max_seq_len - len(p)
        intake.check_context(served, p, where, max_new, f"{sp_name}.max_new_tokens")
        if sp.min_new_tokens and sp.min_new_tokens > max_new:
            field = f"{sp_name}.min_new_tokens"
            raise APIError(400, f"{field}={sp.min_new_tokens} exceeds max_new_tokens={max_new}", field)
        if sp.min_new_tokens and served.eos is not None:
            field = f"{sp_name}.min_new_tokens"
            raise APIError(
                400,
                f"{field}={sp.min_new_tokens} is not supported: model {served.model_id!r} has an EOS "
                f"token ({served.eos}) and masking it would change the sampling law; send 0",
                field,
            )
        temperature = 1.0 if sp.temperature is None else sp.temperature
        top_p = 1.0 if sp.top_p is None else sp.top_p
        top_k = None if sp.top_k in (None, -1) else sp.top_k
        if shared:  # one dict for the batch: item i takes base + i, as /v1/completions' prompt i
            seed = (sp.sampling_seed if sp.sampling_seed is not None else drawn) + i
        else:
            seed = sp.sampling_seed if sp.sampling_seed is not None else drawn + i
        eos = None if sp.ignore_eos else served.eos
        jobs.append(Job(p, max_new, intake.sampling(temperature, top_k, top_p), seed, eos))
        ids.append(p)
    return GeneratePlan(batch, ids, jobs, rids)


def output(served: Served, plan: GeneratePlan, i: int) -> dict:
    """Item i's answer, as SGLang shapes it (the module docstring)."""
    job = plan.jobs[i]
    intake.check_decoded(job, i)
    tokens = list(job.result.tokens)
    text_tokens, finish = tokens, {"type": "length", "length": len(tokens)}
    if job.eos_token_id is not None and tokens and tokens[-1] == job.eos_token_id:
        text_tokens, finish = tokens[:-1], {"type": "stop", "matched": job.eos_token_id}
    meta = {
        "id": plan.rids[i],
        "finish_reason": finish,
        "prompt_tokens": len(plan.ids[i]),
        "completion_tokens": len(tokens),
        "cached_tokens": 0,
        "loopcert": intake.extension(job, i, tokens),
    }
    return {"text": served.decode(text_tokens), "output_ids": tokens, "meta_info": meta}


def model_info(served: Served) -> dict:
    """GET /get_model_info: SGLang's fields, and loopcert's model identity (fingerprint, config,
    decoder) in the `loopcert` extension field."""
    return {
        "model_path": served.model_path or served.model_id,
        "tokenizer_path": None,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "loopcert": served.info,
    }
