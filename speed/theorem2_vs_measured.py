"""The depth spectrum of the decoded positions and Theorem 2's optimum beside the measured best
(d1, d2) of the grid (docs/design.md section 4; the envelope is analysis.cost_model.fit_depth_curve, the
certificate's fit)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from analysis.cost_model import best_integer_depths, expected_cost, fit_depth_curve, optimal_depths
from analysis.depth_profile import depth_profile
from refdec.errors import LoopcertError
from speed.rows import GridRow


@dataclass(frozen=True)
class DepthSpectrum:
    R: int
    positions: int
    temperature: float
    depth: list[int]  # 1..R
    mean_tv: list[float]  # mean TV(p_r, p_R) over the positions
    max_tv: list[float]
    agreement: list[float]  # share of positions with argmax p_r == argmax p_R


def depth_spectrum(
    model, prompts: Sequence[Sequence[int]], generated: Sequence[Sequence[int]]
) -> DepthSpectrum:
    """Per depth r = 1..R, over the decoded positions (the baseline's greedy tokens): mean
    TV(p_r, p_R) at temperature 1 and the greedy agreement argmax p_r == argmax p_R, from the
    one depth profile (analysis.depth_profile, refdec's block maths, float64 laws)."""
    R = model.cfg.recurrence
    pairs = [(p, g) for p, g in zip(prompts, generated) if g]
    if not pairs:
        raise LoopcertError("depth spectrum: no decoded positions")
    seqs = [list(p) + list(g[:-1]) for p, g in pairs]  # position t's law predicts token t+1
    prof = depth_profile(model, seqs, list(range(1, R + 1)), R, starts=[len(p) - 1 for p, _ in pairs])
    depths = list(prof.depths)
    return DepthSpectrum(
        R,
        prof.n_positions,
        1.0,
        depths,
        [prof.tv[r] for r in depths],
        [prof.max_tv[r] for r in depths],
        [prof.agree[r] for r in depths],
    )


@dataclass(frozen=True)
class BestSetting:
    d1: int
    d2: int | None
    speedup: float
    label: str


@dataclass(frozen=True)
class Theorem2Comparison:
    R: int
    measured_best: BestSetting | None = None  # highest speedup among pipelined settings
    measured_best_with_d2: BestSetting | None = None
    fitted: bool = False
    reason: str | None = None  # why the envelope was not fitted
    alpha: float | None = None
    beta: float | None = None
    fitted_depths: list[int] = field(default_factory=list)
    d1_star: float | None = None  # the closed form (continuous)
    d2_star: float | None = None
    best_integer: tuple[int, int] | None = None  # argmin of the bound over 1 <= d1 < d2 < R
    best_on_grid: tuple[int, int] | None = None  # argmin of the bound over the measured grid
    bound_cost: dict = field(default_factory=dict)  # "d1,d2" -> the bound on steps per token


def _best(rows: Sequence[GridRow]) -> BestSetting | None:
    if not rows:
        return None
    b = max(rows, key=lambda r: r.speedup)
    return BestSetting(b.draft_depth, b.second_depth, b.speedup, b.label)


def theorem2_compare(spectrum: DepthSpectrum, rows: Sequence[GridRow]) -> Theorem2Comparison:
    """Theorem 2's optimum from the envelope fitted on the measured mean TV(p_r, p_R), beside the
    measured best (d1, d2) of the grid (highest speedup among pipelined settings)."""
    R = spectrum.R
    pipes = [r for r in rows if r.strategy == "pipelined"]
    measured = {
        "measured_best": _best(pipes),
        "measured_best_with_d2": _best([r for r in pipes if r.second_depth is not None]),
    }
    try:
        env = fit_depth_curve(spectrum.mean_tv)
    except LoopcertError as e:
        return Theorem2Comparison(R, **measured, fitted=False, reason=str(e))
    alpha, beta = env.alpha, env.beta
    if not alpha > 0:  # as the certificate's theorem2_traces check: not applicable, not an error
        why = (
            f"the mean TV to the full depth does not decay with depth (fitted alpha {alpha:.3g} <= 0 "
            f"over depths {list(env.depths)}): Theorem 2's envelope beta r^-alpha assumes it does"
        )
        return Theorem2Comparison(R, **measured, fitted=False, reason=why)
    d1, d2 = optimal_depths(alpha, beta, R)
    pairs = [(r.draft_depth, r.second_depth) for r in pipes if r.second_depth is not None]
    bound = {d: expected_cost(d[0], d[1], alpha, beta, R) for d in pairs}
    return Theorem2Comparison(
        R,
        **measured,
        fitted=True,
        alpha=alpha,
        beta=beta,
        fitted_depths=list(env.depths),
        d1_star=d1,
        d2_star=d2,
        best_integer=best_integer_depths(alpha, beta, R) if R >= 3 else None,
        best_on_grid=min(pairs, key=lambda d: (bound[d], d)) if pairs else None,
        bound_cost={f"{a},{b}": c for (a, b), c in bound.items()},
    )
