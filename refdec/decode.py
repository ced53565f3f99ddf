"""The reference decoder: recompute the whole prefix every step. Slow on purpose."""

from __future__ import annotations

import torch

from refdec.errors import LoopcertError
from refdec.model import LoopedLM, check_depth
from refdec.sampling import SamplingParams, greedy_token, sample, transform
from refdec.validate import check_int, check_seed


def check_generate_args(
    model: LoopedLM, prompt, max_new_tokens, sampling, seed, depth
) -> tuple[list[int], int]:
    """Validate what every decoder's generate() receives; returns (prompt ids, depth)."""
    return check_run_args(model, model.check_ids(prompt).tolist(), max_new_tokens, sampling, seed, depth)


def check_run_args(
    model: LoopedLM, ids: list[int], max_new_tokens, sampling, seed, depth
) -> tuple[list[int], int]:
    """check_generate_args for prompt ids already checked (model.check_ids(prompt).tolist()):
    a batch that repeats one prompt checks its ids once."""
    check_int("max_new_tokens", max_new_tokens, 0)
    if len(ids) + max_new_tokens > model.cfg.max_seq_len:
        raise LoopcertError(
            f"prompt of {len(ids)} tokens + max_new_tokens={max_new_tokens} exceeds "
            f"max_seq_len={model.cfg.max_seq_len}"
        )
    if not isinstance(sampling, SamplingParams):
        raise LoopcertError(f"sampling must be a SamplingParams, got {sampling!r}")
    check_seed(seed)
    return ids, check_depth(model.cfg.recurrence if depth is None else depth)


@torch.no_grad()
def generate(
    model: LoopedLM,
    prompt,
    max_new_tokens: int,
    sampling: SamplingParams = SamplingParams(),
    seed: int = 0,
    depth: int | None = None,
    eos_token_id: int | None = None,
) -> list[int]:
    """New token ids (not the prompt); the EOS token is included when it ends the run."""
    ids, depth = check_generate_args(model, prompt, max_new_tokens, sampling, seed, depth)
    gen = torch.Generator().manual_seed(seed)
    new: list[int] = []
    for _ in range(max_new_tokens):
        logits = model.depth_logits(ids, [depth])[0, -1]  # (V,) at the last position
        if sampling.greedy:
            tok = greedy_token(logits)
        else:
            tok = sample(transform(logits, sampling), gen)
        new.append(tok)
        ids.append(tok)
        if tok == eos_token_id:
            break
    return new
