"""The reference decoder: recompute the whole prefix every step. Slow on purpose."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from refdec.errors import LoopcertError
from refdec.model import LoopedLM, check_depth
from refdec.sampling import Context, SamplingParams, greedy_token, sample, transform
from refdec.validate import check_int, check_seed, is_int


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
    V = model.cfg.vocab_size
    for name, named in (
        ("logit_bias", [t for t, _ in sampling.logit_bias]),
        ("stop_token_ids", sampling.stop_token_ids),
    ):
        if named and max(named) >= V:
            raise LoopcertError(f"{name} names token {max(named)}, outside the vocabulary [0, {V})")
    check_seed(seed)
    return ids, check_depth(model.cfg.recurrence if depth is None else depth)


def tokens_of(result) -> list[int]:
    """The new token ids of a generate() result: a sequence of ints or an object with .tokens.

    The other end of check_generate_args: what every decoder's generate() returns
    (proofs.decoders.protocol). Anything else is the decoder breaking the protocol; a check then
    records it as a failure, it never guesses.
    """
    toks = getattr(result, "tokens", result)
    if hasattr(toks, "tolist"):  # a tensor or array
        toks = toks.tolist()
    if isinstance(toks, (str, bytes)) or not isinstance(toks, Sequence):
        raise LoopcertError(f"generate() returned {type(result).__name__!r}, not token ids or .tokens")
    out = []
    for t in toks:
        if not is_int(t):
            raise LoopcertError(f"generate() returned a non-integer token {t!r}")
        out.append(int(t))
    return out


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
    """New token ids (not the prompt); a stop token (sampling.stop_ids(eos_token_id): the stop
    token ids, and the EOS id unless ignore_eos) is included when it ends the run. The law of each
    token follows the tokens before it (penalties, min_tokens: refdec.sampling's docstring)."""
    ids, depth = check_generate_args(model, prompt, max_new_tokens, sampling, seed, depth)
    gen = torch.Generator().manual_seed(seed)
    stops = sampling.stop_ids(eos_token_id)
    context = Context.of(ids, (), eos_token_id) if sampling.needs_context else None
    new: list[int] = []
    for _ in range(max_new_tokens):
        logits = model.depth_logits(ids, [depth])[0, -1]  # (V,) at the last position
        if sampling.plain and sampling.greedy:
            tok = greedy_token(logits)
        elif sampling.greedy:
            tok = greedy_token(transform(logits, sampling, context))  # the one-hot's argmax
        else:
            tok = sample(transform(logits, sampling, context), gen)
        new.append(tok)
        ids.append(tok)
        if context is not None:
            context = context.then(tok)
        if tok in stops:
            break
    return new
