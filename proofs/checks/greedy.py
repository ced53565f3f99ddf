"""Greedy exactness against refdec (docs/design.md section 6, check 1).

The candidate's greedy tokens are compared token for token with `refdec.generate` run on a
float64 copy of the model, over models x prompts x settings. At the first divergence the
reference's depth-R logits (float64, proofs/stats/exact_laws.py) classify it: if the candidate's token
is within the dtype's tolerance of the reference maximum, the two runs faced a numerical tie
(a float32 decoder may legitimately break it the other way); otherwise it is a real bug.
Every divergence is listed, ties included: classified, never hidden. A decoder that raises
or returns the wrong number of tokens is a real bug too; a decoder factory that fails is its
run's failure, named as the factory's (no tokens, so no divergence).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

import refdec
from proofs.decoders.candidates import DecoderFactoryError
from proofs.decoders.protocol import Decoder, run_generate
from proofs.details import Divergence, GreedyDetails, GreedyRun
from proofs.progress import Progress
from proofs.result import CheckResult
from proofs.stats.exact_laws import Oracle
from refdec.sampling import SamplingParams
from refdec.values import dtype_name

# Logit gap (reference max minus the candidate's token, in nats) below which a divergence is
# a numerical tie, by the candidate's compute dtype: about the logit error a depth-32 looped
# forward accumulates in that precision (xformers-style table; grows as precision falls).
TIE_TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-3, torch.float16: 5e-2, torch.bfloat16: 2.5e-1}
GREEDY = SamplingParams()


def compute_dtype(decoder, given: torch.dtype) -> torch.dtype:
    """The dtype the decoder computes in, which sets the tie tolerance: its `compute_dtype`
    attribute (a torch dtype or its name) when it declares one, fastdec's `dtype`, else the dtype
    of the model it was handed. A decoder handed float64 weights that computes in float32 is
    judged with float32's tolerance, not float64's."""
    for name in ("compute_dtype", "dtype"):
        d = getattr(decoder, name, None)
        if isinstance(d, str):
            d = getattr(torch, d.replace("torch.", ""), None)
        if isinstance(d, torch.dtype):
            return d
    return given


def reference_tokens(model64, prompt: Sequence[int], n: int) -> list[int]:
    return refdec.generate(model64, list(prompt), n, GREEDY, seed=0)


def classify(
    oracle: Oracle, prompt: Sequence[int], ref: list[int], got: list[int], tol: float
) -> dict | None:
    """None when equal; else the first divergence's Divergence fields (position, tokens, margins,
    class) without the run's model, setting, prompt and dtype."""
    if got == ref:
        return None
    t = next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), min(len(ref), len(got)))
    reference = ref[t] if t < len(ref) else None
    candidate = got[t] if t < len(got) else None
    row = {"position": t, "reference": reference, "candidate": candidate}
    if reference is None or candidate is None or not 0 <= candidate < oracle.V:
        why = (
            f"returned {len(got)} tokens, expected {len(ref)}"
            if candidate is None
            else "token id outside the vocabulary"
        )
        return {**row, "top2_margin": None, "candidate_gap": None, "classified": "real bug", "why": why}
    logits = oracle.logits(list(prompt) + ref[:t])[-1]  # (V,) float64 at depth R
    top2 = torch.topk(logits, 2).values
    gap = float(logits.max() - logits[candidate])
    return {
        **row,
        "top2_margin": float(top2[0] - top2[1]),
        "candidate_gap": gap,
        "classified": "numerical tie" if gap < tol else "real bug",
    }


def check_greedy(
    name: str,
    runs: Sequence[tuple[str, str, Decoder, Oracle, torch.dtype]],
    prompts: Callable[[Oracle], Sequence[Sequence[int]]],
    n_tokens: int,
    progress: Progress | None = None,
    references: dict | None = None,
) -> CheckResult:
    """runs: (model label, setting label, decoder, oracle of that model, decoder dtype); the
    decoder is a DecoderFactoryError when its factory failed: that run is listed with the error
    and fails, with no divergence (nothing was decoded).

    measured = real bugs found plus runs whose factory failed, bound = 0; ties are counted and
    listed but pass. `references` keeps refdec's tokens across calls that share oracles (the
    mutation check's many runs).
    """
    refs: dict[tuple, list[int]] = {} if references is None else references
    rows: list[GreedyRun] = []
    divergences: list[Divergence] = []
    failed_builds = 0
    for model_label, setting, decoder, oracle, dtype in runs:
        if isinstance(decoder, DecoderFactoryError):  # no decoder: the run failed, nothing decoded
            failed_builds += 1
            n_prompts = len(prompts(oracle))
            rows.append(
                GreedyRun(model_label, setting, dtype_name(dtype), n_prompts, n_tokens, 0, str(decoder))
            )
            if progress:
                progress(f"  {name} {model_label} / {setting}: {decoder}")
            continue
        dtype = compute_dtype(decoder, dtype)
        tol = TIE_TOLERANCE.get(dtype, TIE_TOLERANCE[torch.float32])
        agree = 0
        for prompt in prompts(oracle):
            key = (id(oracle), tuple(prompt), n_tokens)
            if key not in refs:
                refs[key] = reference_tokens(oracle.model, prompt, n_tokens)
            ref = refs[key]
            try:
                got = run_generate(decoder, prompt, n_tokens, GREEDY, 0)
            except Exception as e:  # noqa: BLE001 - a decoder failure is a finding
                d = {
                    "position": 0,
                    "reference": ref[0],
                    "candidate": None,
                    "top2_margin": None,
                    "candidate_gap": None,
                    "classified": "real bug",
                    "why": f"{type(e).__name__}: {e}",
                }
            else:
                d = classify(oracle, prompt, ref, got, tol)
            if d is None:
                agree += 1
            else:
                divergences.append(Divergence(model_label, setting, tuple(prompt), dtype_name(dtype), **d))
        n_prompts = len(prompts(oracle))
        rows.append(GreedyRun(model_label, setting, dtype_name(dtype), n_prompts, n_tokens, agree))
        if progress:
            progress(f"  {name} {model_label} / {setting}: {agree}/{n_prompts} prompts equal")
    bugs = sum(d.classified == "real bug" for d in divergences)
    details = GreedyDetails(
        runs=tuple(rows),
        divergences=tuple(divergences),
        real_bugs=bugs,
        numerical_ties=len(divergences) - bugs,
        tie_tolerance={dtype_name(k): v for k, v in TIE_TOLERANCE.items()},
        tokens_per_prompt=n_tokens,
    )
    failures = bugs + failed_builds
    return CheckResult(name, failures, 0, failures == 0, details)
