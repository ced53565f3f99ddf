"""What every API of `loopcert serve` shares between a validated request and scheduler jobs.

/v1/completions (app.py) and SGLang's /generate (sglang.py) both end here: a prompt's token ids,
the context and capacity checks, and one mapping of sampling parameters onto
refdec.SamplingParams, so that one seed gives the same tokens through either endpoint.
Every refusal is an APIError (HTTP 4xx) whose `param` names the field a client can fix.
"""

from __future__ import annotations

from loopcert.serve.api_errors import APIError
from loopcert.serve.scheduler import Job, ShuttingDown
from loopcert.serve.served import Served
from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams

STAT_KEYS = (
    "strategy",
    "acceptance_rate",
    "gamma",
    "tokens",
    "from_first",
    "from_second",
    "from_restart",
    "proposals",
    "accepted",
    "steps",
    "mean_live_lanes",
)


def sampling(temperature: float, top_k: int | None, top_p: float) -> SamplingParams:
    """The law both APIs decode: temperature 0 is greedy; top_p 1.0 means no nucleus filter (the
    same law without a rounding cut); top_k None means every token."""
    if temperature == 0:
        return SamplingParams()
    return SamplingParams(temperature=temperature, top_k=top_k, top_p=None if top_p >= 1.0 else top_p)


def prompt_ids(served: Served, prompt, param: str, ids_field: str) -> list[int]:
    """A prompt (text, or token ids) as token ids in the vocabulary; `ids_field` names where a
    client sends token ids instead of text (a model without a text form takes only those)."""
    if isinstance(prompt, str):
        try:
            ids = served.encode(prompt)
        except LoopcertError as e:
            raise APIError(
                400, f"{param}: {e}; send token ids in `{ids_field}` (a list of ints) instead", param
            ) from None
    else:
        ids = list(prompt)
        bad = next((t for t in ids if not 0 <= t < served.vocab_size), None)
        if bad is not None:
            raise APIError(
                400, f"{param}: token id {bad} is outside the vocabulary [0, {served.vocab_size})", param
            )
    if not ids:
        raise APIError(400, f"{param}: the prompt encodes to no tokens", param)
    return ids


def check_context(served: Served, ids: list[int], param: str, max_new: int, max_field: str) -> None:
    """The prompt and its new tokens fit the model's context."""
    if len(ids) >= served.max_seq_len:
        raise APIError(
            400,
            f"{param}: {len(ids)} tokens; the context is {served.max_seq_len} tokens",
            param,
            code="context_length_exceeded",
        )
    if len(ids) + max_new > served.max_seq_len:
        raise APIError(
            400,
            f"{max_field}: a prompt of {len(ids)} tokens + {max_field}={max_new} "
            f"exceeds the context of {served.max_seq_len} tokens",
            max_field,
            code="context_length_exceeded",
        )


def check_capacity(served: Served, sequences: int, what: str, param: str) -> None:
    """A request of more sequences than the scheduler ever queues can never run: a 400 naming its
    size (a 503 would tell the client to retry a request that cannot succeed)."""
    limit = served.scheduler.max_waiting
    if sequences > limit:
        raise APIError(
            400,
            f"{param}: {what} = {sequences} sequences; this server queues at most {limit} "
            "sequences, so the request can never run: split it",
            param,
        )


def check_decoded(job: Job, index: int) -> None:
    """A job the decoder failed is the server's fault (HTTP 500), reported to its request only; one
    the server stopped before decoding is a 503 (retry elsewhere)."""
    if isinstance(job.error, ShuttingDown):
        why = f"choice {index} was not decoded: {job.error}"
        raise APIError(503, why, None, "server_error", "shutting_down")
    if job.error is not None:
        raise APIError(
            500,
            f"decoding choice {index} failed: {type(job.error).__name__}: {job.error}",
            None,
            "server_error",
        )


def extension(job: Job, index: int, tokens: list[int]) -> dict:
    """The `loopcert` extension of one decoded sequence: its seeds, new token ids, the decoder's
    stats and where it was batched (what certify over HTTP reads)."""
    stats = job.result.stats.as_dict()
    return {
        "index": index,
        "seed": job.decoded_seed,
        "requested_seed": job.seed,
        "tokens": tokens,
        "stats": {k: stats[k] for k in STAT_KEYS if k in stats},
        "round": job.round,
        "batch_size": job.batch_size,
        "batched": job.batched,
        "queue_seconds": job.t_start - job.t_submit,
        "decode_seconds": job.t_end - job.t_start,
    }
