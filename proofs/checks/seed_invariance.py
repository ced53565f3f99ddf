"""Seed invariance: the same (prompt, sampling, seed) gives the same tokens whatever else is decoded
beside it (docs/certify.md#seed-invariance).

A per-request seed is a promise about one request: a server that batches requests, or a batch
decoder, must not let the neighbours of a row choose its random numbers (vllm #6038 mixed seeded
and unseeded rows of a batch; vLLM's Model Runner V2 and TensorRT-LLM's one-model path drew every
row from one stream). Each row's law may still be right, so the sampling checks pass such a
decoder; this check is where it fails. For each seed the target request is decoded alone, then
in batches beside other prompts and seeds (first, in the middle, last; a batch decoder's
`generate_batch`, which the HTTP decoder sends as concurrent requests, at most its declared batch),
and every decode must give the alone tokens.

Float rows at different batch widths may differ in their last bits, and so, at a near tie, in a
token (docs/design.md section 5): run it where the decoder is batch invariant (fastdec's
fixed-width mode, float64) or read a difference with the margin in mind. Power: the target's
tokens must depend on its seed (two seeds differ), else a batch-wide stream could go unseen; and
a negative control (`SharedStream`, one stream for the whole batch) must fail it
(tests/proofs/checks/test_seed_invariance.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from proofs.decoders.protocol import BatchDecoder, SeededDecoder, tokens_of
from proofs.details import ReproducedRun, SeedDifference, SeedInvarianceDetails
from proofs.result import CheckResult
from refdec.decode import check_generate_args
from refdec.progress import Progress
from refdec.sampling import Context, SamplingParams, sample, transform

NEIGHBOUR_SEED = 10_000  # neighbour j of a batch draws from seed NEIGHBOUR_SEED + j


def _batch(decoder, prompts, n_tokens, sampling, seeds) -> list[list[int]]:
    return [
        tokens_of(r) for r in decoder.generate_batch([list(p) for p in prompts], n_tokens, sampling, seeds)
    ]


def check_seed_invariance(
    name: str,
    decoder,
    label: str,
    prompt: Sequence[int],
    neighbours: Sequence[Sequence[int]],
    n_tokens: int,
    sampling: SamplingParams,
    seeds: Sequence[int],
    progress: Progress | None = None,
) -> CheckResult:
    """One decoder (check_decoders' rules): measured = decodes of the target that differ from it
    decoded alone; bound 0. A decoder without generate_batch fails: nothing is decoded beside it."""
    if not isinstance(decoder, BatchDecoder):
        return CheckResult(
            name, 0, 0, False, error=f"{label} has no generate_batch: nothing is decoded beside it"
        )
    return check_decoders(name, [(label, decoder)], prompt, neighbours, n_tokens, sampling, seeds, progress)


def check_decoders(
    name: str,
    decoders: Sequence[tuple[str, object]],
    prompt: Sequence[int],
    neighbours: Sequence[Sequence[int]],
    n_tokens: int,
    sampling: SamplingParams,
    seeds: Sequence[int],
    progress: Progress | None = None,
) -> CheckResult:
    """Every (label, decoder): measured = decodes of the target that differ from it decoded alone,
    over all; bound 0. Power: some decoder's target tokens depend on the seed. A decoder without
    generate_batch is listed (nothing is decoded beside it); when none has one the check is skipped."""
    others = [list(p) for p in neighbours]
    k = len(others)
    layouts = {  # where the target sits among its neighbours
        "first": lambda t: [t] + others,
        "middle": lambda t: others[: k // 2] + [t] + others[k // 2 :],
        "last": lambda t: others + [t],
    }
    runs, differ, no_batch, sensitive = [], [], [], False
    for label, decoder in decoders:
        if not isinstance(decoder, BatchDecoder):
            no_batch.append(label)
            continue
        outs, equal, total = [], 0, 0
        for s in seeds:
            alone = _batch(decoder, [prompt], n_tokens, sampling, [s])[0]
            outs.append(tuple(alone))
            for where, place in layouts.items():
                seeds_in = place(None)
                at = seeds_in.index(None)
                batch_seeds = [s if i == at else NEIGHBOUR_SEED + i for i in range(len(seeds_in))]
                got = _batch(decoder, place(list(prompt)), n_tokens, sampling, batch_seeds)[at]
                total += 1
                if got == alone:
                    equal += 1
                else:
                    differ.append(
                        SeedDifference(f"{label} ({where} of {k + 1})", s, tuple(alone), tuple(got))
                    )
        sensitive = sensitive or len(set(outs)) > 1
        runs.append(ReproducedRun(label, total, equal))
        if progress:
            progress(f"  {name} {label}: {equal}/{total} decodes beside others gave the alone tokens")
    details = SeedInvarianceDetails(
        prompt=tuple(prompt),
        tokens=n_tokens,
        temperature=sampling.temperature,
        seeds=tuple(seeds),
        runs=tuple(runs),
        differences=tuple(differ),
        seed_sensitive=sensitive,
        neighbours=k,
        no_batch=tuple(no_batch),
    )
    power = f"{len(seeds)} seeds, each alone and beside {k} other prompts (first, middle, last)"
    if not runs:
        why = f"no setting has generate_batch ({', '.join(no_batch)}): nothing is decoded beside another"
        return CheckResult(name, 0, 0, True, details, power, skipped=why)
    error = (
        None if sensitive else "every seed gave the same tokens: a shared stream could not show (no power)"
    )
    return CheckResult(name, len(differ), 0, not differ and sensitive, details, power, error=error)


class SharedStream(SeededDecoder):
    """The negative control: refdec's law, but `generate_batch` draws every row from one stream,
    torch.Generator(seeds[0]), row after row at each step (one random stream per batch instead of
    per request). Alone it is refdec.generate token for token; beside others it is not."""

    def __init__(self, model):
        self.model = model

    def decode(self, ids, depth, max_new_tokens, sampling, gen, eos_token_id) -> list[int]:
        return self._rows([ids], max_new_tokens, sampling, gen)[0]

    def generate_batch(self, prompts, max_new_tokens, sampling, seeds) -> list[list[int]]:
        rows = [
            check_generate_args(self.model, p, max_new_tokens, sampling, s, None)[0]
            for p, s in zip(prompts, seeds)
        ]
        return self._rows(rows, max_new_tokens, sampling, torch.Generator().manual_seed(seeds[0]))

    def _rows(self, rows, n, sampling, gen) -> list[list[int]]:
        prompts = [list(r) for r in rows]
        new: list[list[int]] = [[] for _ in rows]
        for _ in range(n):
            for i, p in enumerate(prompts):
                logits = self.model.depth_logits(p + new[i], [self.model.cfg.recurrence])[0, -1]
                ctx = Context.of(p, new[i]) if sampling.needs_context else None
                new[i].append(sample(transform(logits, sampling, ctx), gen))
        return new
