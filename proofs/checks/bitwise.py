"""Bitwise agreement with the engine's own autoregressive baseline (docs/design.md section 6, check 2).

In fastdec's fixed-width mode every engine call, the baseline's included, runs at one width
W, so a row's arithmetic does not depend on what else is in the batch: every lossless
strategy must then emit exactly the baseline's greedy tokens in float32, with no tie excuse
(docs/design.md section 5, batch invariance by construction). Only candidates that have a
fixed-width mode can take this check; for others it is skipped with that reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastdec.config import DecodeConfig
from proofs.decoders.candidates import Candidate, fastdec_candidate
from proofs.decoders.protocol import run_generate
from proofs.details import BitwiseDetails, BitwiseRun, Mismatch
from proofs.result import CheckResult
from refdec.progress import Progress
from refdec.sampling import SamplingParams
from refdec.values import dtype_name

FIXED_WIDTH = 8


def check_bitwise(
    name: str,
    candidates: Sequence[Candidate],
    model32,
    prompts: Sequence[Sequence[int]],
    n_tokens: int,
    width: int = FIXED_WIDTH,
    progress: Progress | None = None,
    compile: bool = False,
) -> CheckResult:
    """measured = (strategy, prompt) pairs whose tokens differ from the baseline's; bound 0."""
    able = [c for c in candidates if c.fixed_width and c.lossless]
    if not able:
        why = "the candidate has no fixed-width mode (only fastdec's engine does)"
        return CheckResult(name, 0, 0, True, kind="bitwise", skipped=why)
    # compiled strategies against the compiled baseline: the same compiled kernels at one width
    baseline = fastdec_candidate(DecodeConfig("autoregressive"), compile=compile)
    baseline = baseline.build(model32, fixed_width=width)
    greedy = SamplingParams()
    base = {tuple(p): run_generate(baseline, p, n_tokens, greedy, 0) for p in prompts}
    rows, mismatches = [], []
    for c in able:
        dec = c.build(model32, fixed_width=width)
        equal = 0
        for p in prompts:
            try:
                got = run_generate(dec, p, n_tokens, greedy, 0)
            except Exception as e:  # noqa: BLE001 - a decoder failure is a finding
                got, err = None, f"{type(e).__name__}: {e}"
            else:
                err = None
            ref = base[tuple(p)]
            if got == ref:
                equal += 1
                continue
            first = (
                None
                if got is None
                else next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), min(len(ref), len(got)))
            )
            mismatches.append(Mismatch(c.label, tuple(p), first, tuple(ref), got, err))
        rows.append(BitwiseRun(c.label, len(prompts), equal))
        if progress:
            progress(f"  {name} {c.label}: {equal}/{len(prompts)} prompts bitwise equal at W={width}")
    details = BitwiseDetails(
        width=width,
        dtype=dtype_name(next(model32.parameters()).dtype),
        tokens_per_prompt=n_tokens,
        runs=tuple(rows),
        mismatches=tuple(mismatches),
    )
    return CheckResult(name, len(mismatches), 0, not mismatches, details)
