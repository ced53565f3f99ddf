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
from refdec.sampling import SamplingParams, transform


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
) -> torch.Tensor:
    """(n, V) float64: row i is the target law (refdec.sampling.transform) of continuation[i]
    given prompt + continuation[:i]."""
    logits = continuation_logits(model, prompt, continuation, depth)
    if logits.shape[0] == 0:
        return torch.zeros(logits.shape, dtype=torch.float64)  # transform stacks rows: none here
    return transform(logits, sampling)
