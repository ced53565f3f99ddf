"""Teacher-forced scoring: the reference's logits and laws at every position of a continuation,
from one uncached forward over prompt + continuation (docs/design.md section 3).

Row i is what `refdec.generate` computes at step i when the tokens before it are the
continuation's own: the logits of the last position of `prompt + continuation[:i]`. A causal
forward over the whole sequence gives every row at once, so a candidate's n tokens are judged
with one forward instead of n, and a token after a tie (or after a wrong token) is still judged
on the candidate's own prefix. Nothing is cached: this is `LoopedLM.depth_logits` read at the
continuation's positions.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from refdec.errors import LoopcertError
from refdec.model import LoopedLM, check_depth
from refdec.sampling import Context, SamplingParams, transform


@torch.no_grad()
def continuation_logits(
    model: LoopedLM, prompt: Sequence[int], continuation: Sequence[int], depth: int | None = None
) -> torch.Tensor:
    """(n, V) logits in the model's dtype: row i scores continuation[i] given prompt +
    continuation[:i] at `depth` (default: the model's recurrence). n = len(continuation); the
    last continuation token is scored, never fed."""
    prompt, continuation = list(prompt), list(continuation)
    V = model.cfg.vocab_size
    if not prompt:
        raise LoopcertError("continuation_logits needs a non-empty prompt (the first token is scored on it)")
    n = len(continuation)
    if len(prompt) + n > model.cfg.max_seq_len:
        raise LoopcertError(
            f"prompt of {len(prompt)} tokens + a continuation of {n} exceeds "
            f"max_seq_len={model.cfg.max_seq_len}"
        )
    r = check_depth(model.cfg.recurrence if depth is None else depth)
    ids = model.check_ids(prompt + continuation).tolist()  # every id checked, the last one too
    if n == 0:
        return torch.zeros(0, V, dtype=model.embed_tokens.weight.dtype)
    logits = model.depth_logits(ids[:-1], [r])[0]  # (T - 1, V): position t predicts token t + 1
    return logits[len(prompt) - 1 :]  # (n, V)


@torch.no_grad()
def continuation_laws(
    model: LoopedLM,
    prompt: Sequence[int],
    continuation: Sequence[int],
    sampling: SamplingParams,
    depth: int | None = None,
    eos_token_id: int | None = None,
) -> torch.Tensor:
    """(n, V) float64: row i is the target law (refdec.sampling.transform) of continuation[i]
    given prompt + continuation[:i]: under penalties and min_tokens it is the law given that very
    prefix (Context(prompt, continuation[:i], eos_token_id)). A continuation that ends at a stop
    token is scored as it is (the stop is its last row); one that goes on past a stop token is not
    a sequence of this law: a LoopcertError names the position."""
    stops = sampling.stop_ids(eos_token_id)
    for i, t in enumerate(list(continuation)[:-1]):
        if int(t) in stops:
            raise LoopcertError(
                f"continuation goes on past the stop token {int(t)} at position {i}: a sequence of "
                "this law ends at its first stop token"
            )
    logits = continuation_logits(model, prompt, continuation, depth)
    if logits.shape[0] == 0:
        return torch.zeros(logits.shape, dtype=torch.float64)  # transform stacks rows: none here
    if not sampling.needs_context:
        return transform(logits, sampling)
    prompt = [int(t) for t in prompt]
    rows = []
    for i in range(logits.shape[0]):
        rows.append(transform(logits[i], sampling, Context.of(prompt, continuation[:i], eos_token_id)))
    return torch.stack(rows)  # (n, V)
