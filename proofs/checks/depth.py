"""Greedy at depth and boundary coverage (docs/design.md section 6, "Coverage, next to power";
docs/certify.md#boundaries).

Greedy at depth: for every boundary within the plan's horizon (proofs/boundaries.py), a prompt
whose prefill ends just before it so that generation crosses it, a prompt longer than it (a
prefill that crosses it; declared boundaries), a prompt of exactly k + 1 tokens for each
speculation width k, and one long continuation that ends at the horizon and generates past two of
the largest window (the wrap after the wrap; at least LONG_TOKENS tokens). Each run's tokens are
judged by one teacher-forced float64 pass (proofs/checks/greedy.py judge): every token must be
refdec's argmax given the run's own prefix, or a numerical tie. A divergence is named by its
absolute position relative to the nearest boundary below it.

Coverage: each boundary, its source, the greedy runs and tokens and the samples that crossed it.
A declared boundary within the horizon that no run crossed fails as "no coverage", as a sampling
case without power fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

from proofs import boundaries as bd
from proofs.checks.greedy import GREEDY, TIE_TOLERANCE, judge, unjudged
from proofs.decoder_attributes import declared_compute_dtype
from proofs.decoders.candidates import DecoderFactoryError
from proofs.decoders.protocol import Decoder, run_generate
from proofs.details import CoverageDetails, CoverageRow, DepthDetails, DepthDivergence, DepthRun
from proofs.result import CheckResult
from proofs.stats.exact_laws import Oracle
from refdec.progress import Progress
from refdec.values import dtype_name

CROSS = 4  # tokens generated after a prompt placed at a boundary: positions b-1 .. b+2
LONG_TOKENS = 64  # the long continuation generates at least this many (two windows when longer)


@dataclass(frozen=True, order=True)
class Placement:
    prompt_len: int
    tokens: int
    why: str

    @property
    def label(self) -> str:
        return f"prompt {self.prompt_len} + {self.tokens} tokens: {self.why}"


def horizon_for(boundaries: Iterable[bd.Boundary], context: int, cap: int, max_len: int) -> int:
    """The context a plan reaches: at least `context` tokens and two of the largest window (plus
    the tokens that cross it), at most `cap` (within reason for the plan) and the model's length."""
    w = bd.largest_window(boundaries)
    return min(max(context, 2 * w) + CROSS, cap, max_len)


def placements(boundaries: Sequence[bd.Boundary], horizon: int, max_len: int) -> list[Placement]:
    """The runs of the greedy-at-depth check (module docstring), one per distinct (prompt, n)."""
    out: dict[tuple[int, int], str] = {}

    def add(p: int, n: int, why: str) -> None:
        if p >= 1 and n >= 1 and p + n <= max_len and (p, n) not in out:
            out[(p, n)] = why

    for b in bd.within(boundaries, horizon):
        if b.source == bd.SPECULATION:
            add(b.position, CROSS, f"exactly {b.position} prompt tokens ({b.what})")
            continue
        add(b.position - 1, CROSS, f"prefill ends before {b.position}, generation crosses it ({b.what})")
        if b.declared:
            add(b.position + 1, CROSS, f"prefill crosses {b.position} ({b.what})")
    w = bd.largest_window(boundaries)
    n = min(horizon - 1, max(2 * w + CROSS, LONG_TOKENS))  # generation past two windows
    past = f", generating past two windows of {w}" if w else ""
    add(horizon - n, n, f"the long continuation to the horizon {horizon}{past}")
    return [Placement(p, n, why) for (p, n), why in sorted(out.items())]


def check_depth(
    name: str,
    model_label: str,
    runs: Sequence[tuple[str, Decoder | DecoderFactoryError, torch.dtype]],
    oracle: Oracle,
    prompt_of: Callable[[int], tuple[int, ...]],
    places: Sequence[Placement],
    boundaries: Sequence[bd.Boundary],
    horizon: int,
    progress: Progress | None = None,
    cache: dict | None = None,
    until_bug: bool = False,
) -> CheckResult:
    """runs: (setting label, decoder or its factory's error, the dtype it was handed); prompt_of:
    a prompt of the given length. measured = real bugs + runs without a decoder, bound 0.
    `until_bug`: a run stops at its first real bug (the mutation check: one kill is enough)."""
    cache = {} if cache is None else cache
    rows, divergences, failed = [], [], 0
    for setting, decoder, dtype in runs:
        if isinstance(decoder, DecoderFactoryError):
            failed += 1
            rows.append(DepthRun(setting, dtype_name(dtype), len(places), 0, 0, str(decoder)))
            continue
        dtype = declared_compute_dtype(decoder) or dtype  # the tie tolerance's dtype
        tol = TIE_TOLERANCE.get(dtype, TIE_TOLERANCE[torch.float32])
        agree = tokens = 0
        for pl in places:
            prompt = prompt_of(pl.prompt_len)
            try:
                got = run_generate(decoder, prompt, pl.tokens, GREEDY, 0)
            except Exception as e:  # noqa: BLE001 - a decoder failure is a finding
                found = [unjudged(0, None, None, f"{type(e).__name__}: {e}")]
            else:
                found = judge(oracle, prompt, got, pl.tokens, tol, cache)
                tokens += min(len(got), pl.tokens)
            agree += not found
            stop = until_bug and any(d["classified"] == "real bug" for d in found)
            for d in found:
                pos = pl.prompt_len + d["position"]
                divergences.append(
                    DepthDivergence(
                        setting,
                        dtype_name(dtype),
                        pl.prompt_len,
                        pl.tokens,
                        pos,
                        d["reference"],
                        d["candidate"],
                        d["candidate_gap"],
                        d["classified"],
                        bd.near(pos, boundaries),
                        d.get("why"),
                    )
                )
            if stop:
                break
        rows.append(DepthRun(setting, dtype_name(dtype), len(places), agree, tokens))
        if progress:
            progress(f"  {name} {model_label} / {setting}: {agree}/{len(places)} placements equal")
    bugs = sum(d.classified == "real bug" for d in divergences)
    details = DepthDetails(
        model=model_label,
        horizon=horizon,
        placements=tuple(p.label for p in places),
        runs=tuple(rows),
        divergences=tuple(divergences),
        real_bugs=bugs,
        numerical_ties=len(divergences) - bugs,
        crossings=tuple((p.prompt_len, p.tokens) for p in places),
        boundaries=tuple((b.position, b.source, b.what) for b in boundaries),
    )
    return CheckResult(name, bugs + failed, 0, bugs + failed == 0, details)


def coverage(
    boundaries: Sequence[bd.Boundary],
    horizon: int,
    greedy: Iterable[tuple[int, int, int]],
    sampled: Iterable[tuple[int, int, int]],
) -> list[CoverageRow]:
    """One row per boundary. greedy: (prompt_len, n tokens, runs decoded so); sampled: (prompt_len,
    n tokens, samples drawn so)."""
    greedy, sampled = list(greedy), list(sampled)
    rows = []
    for b in boundaries:
        runs = toks = samples = 0
        for p, n, k in greedy:
            how = bd.crossing(b, p, n)
            if how:
                runs += k
                toks += k * max(0, min(n, p + n - 1 - b.position))  # tokens at positions past b
        for p, n, k in sampled:
            samples += k if bd.crossing(b, p, n) else 0
        if runs or samples:
            status = "covered"
        elif b.position + 2 > horizon:
            status = "beyond the horizon"
        else:
            status = "NO COVERAGE" if b.declared else "not crossed (ladder)"
        rows.append(CoverageRow(b.position, b.source, b.what, runs, toks, samples, status))
    return rows


def check_coverage(
    name: str, model_label: str, horizon: int, rows: Sequence[CoverageRow], error: str | None = None
) -> CheckResult:
    """measured = declared boundaries within the horizon that nothing crossed, bound 0."""
    uncovered = sum(r.status == "NO COVERAGE" for r in rows)
    details = CoverageDetails(model_label, horizon, tuple(rows), uncovered)
    if error:
        return CheckResult(name, float("nan"), 0, False, details, error=error)
    return CheckResult(name, uncovered, 0, uncovered == 0, details)
