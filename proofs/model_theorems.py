"""Theorems 1 and 2 of LoopSpec on real model traces (DESIGN.md sections 4 and 6, check 5).

Traces: every position of each prompt gives next-token laws p_r (temperature 1, float64,
refdec's uncached `depth_logits`) at every depth r = 1..R.

Theorem 1: the (p_R, p_d1, p_d2) triples of a grid of depth pairs go through
`proofs.theorem1.check_theorem1_cases` (largest P(both rejected)/eps2, gated and ungated).

Theorem 2: mean TV(p_r, p_R) over positions, an upper envelope phi(r) = beta r^(-alpha) fitted
to it (`proofs.theorem2.fit_depth_curve`, on the depths above TV_FLOOR), the closed-form
(d1*, d2*), and the measured best pair on a grid. "Measured" here is the exact expected number
of recurrent steps per token of gated LoopSpec under the model's own laws,
E[C] = d1 + P(x1 rejected) d2 + P(both rejected) R, averaged over positions (Theorem 2's cost
model, each probability from `fastdec.accept.loopspec_law`): no timing noise, and the quantity
the theorem bounds.
The check: E[C] <= the envelope bound d1 + phi(d1) d2 + 2 phi(d2) R at every grid pair.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import torch

from fastdec.accept import loopspec_law, total_variation
from proofs.depth_profile import depth_profile
from proofs.result import CheckResult
from proofs.theorem1 import check_theorem1_cases
from proofs.theorem2 import TV_FLOOR, best_integer_depths, expected_cost, fit_depth_curve, optimal_depths

BOUND_SLACK = 1e-9  # float64 rounding of averages


def traces(model64, prompts: Sequence[Sequence[int]], max_positions: int | None = None) -> torch.Tensor:
    """(R, P, V) float64 laws at temperature 1: depth r-1, every position of every prompt
    (at most max_positions of them, evenly spaced)."""
    R = model64.cfg.recurrence
    _, laws = depth_profile(
        model64, [list(p) for p in prompts], list(range(1, R + 1)), R, keep_laws=True
    )  # (R, P, V): the one depth profile's laws
    P = laws.shape[1]
    if max_positions is not None and P > max_positions:
        laws = laws[:, torch.linspace(0, P - 1, max_positions).round().long()]
    return laws


def depth_pairs(R: int, full: bool) -> list[tuple[int, int]]:
    """d1 < d2 < R: all pairs for small R; for large R d1 <= 8 and d2 on a coarse grid."""
    pairs = [(a, b) for a in range(1, R) for b in range(a + 1, R)]
    if R <= 12 or full:
        return pairs
    d2s = sorted({*range(2, 13), 16, 20, 24, R - 1})
    return [(a, b) for a, b in pairs if a <= 8 and b in d2s]


def check_theorem1_traces(laws: torch.Tensor, pairs: Sequence[tuple[int, int]], label: str) -> CheckResult:
    R, P, _ = laws.shape
    triples = ((laws[R - 1, t], laws[a - 1, t], laws[b - 1, t]) for a, b in pairs for t in range(P))
    result = check_theorem1_cases(triples, "theorem1_traces")
    return dataclasses.replace(
        result, details={**result.details, "model": label, "positions": P, "depth_pairs": len(pairs)}
    )


def mean_tv_curve(laws: torch.Tensor) -> list[float]:
    """mean over positions of TV(p_r, p_R), r = 1..R."""
    R, P, _ = laws.shape
    return [float(np.mean([total_variation(laws[r, t], laws[R - 1, t]) for t in range(P)])) for r in range(R)]


def measured_costs(laws: torch.Tensor, pairs: Sequence[tuple[int, int]]) -> dict[tuple[int, int], dict]:
    R, P, _ = laws.shape
    out = {}
    for a, b in pairs:
        rej1 = both = 0.0
        for t in range(P):
            p_R, p1, p2 = laws[R - 1, t], laws[a - 1, t], laws[b - 1, t]
            rej1 += total_variation(p1, p_R)  # P(x1 rejected) = TV(p_d1, p_R) exactly
            both += loopspec_law(p_R, p1, p2, gate="on").p_both_rejected
        rej1, both = rej1 / P, both / P
        out[(a, b)] = {"p_x1_rejected": rej1, "p_both_rejected": both, "cost": a + rej1 * b + both * R}
    return out


def check_theorem2_traces(laws: torch.Tensor, pairs: Sequence[tuple[int, int]], label: str) -> CheckResult:
    R = laws.shape[0]
    curve = mean_tv_curve(laws)
    env = fit_depth_curve(curve)
    alpha, beta, fitted = env.alpha, env.beta, list(env.depths)
    d1s, d2s = optimal_depths(alpha, beta, R)
    costs = measured_costs(laws, pairs)
    ratios = {k: v["cost"] / expected_cost(k[0], k[1], alpha, beta, R) for k, v in costs.items()}
    best = min(costs, key=lambda k: (costs[k]["cost"], k))
    worst = max(ratios, key=ratios.get)
    d1r = min(max(1, round(d1s)), R - 2)
    near = (d1r, min(max(d1r + 1, round(d2s)), R - 1))
    details = {
        "model": label,
        "R": R,
        "positions": laws.shape[1],
        "temperature": 1.0,
        "mean_tv": curve,
        "alpha": alpha,
        "beta": beta,
        "fitted_depths": fitted,
        "tv_floor": TV_FLOOR,
        "envelope": [beta * r**-alpha for r in range(1, R + 1)],
        "envelope_covers_every_depth": all(beta * r**-alpha >= tv for r, tv in enumerate(curve, 1)),
        "d1_star": d1s,
        "d2_star": d2s,
        "bound_best_integer": best_integer_depths(alpha, beta, R) if R >= 3 else None,
        "measured_best": best,
        "measured_best_cost": costs[best]["cost"],
        "rounded_star": near,
        "rounded_star_cost": costs[near]["cost"] if near in costs else None,
        "autoregressive_cost": R,
        "measured": "exact expected recurrent steps per token, E[C] = d1 + P(x1 rejected) d2 + "
        "P(both rejected) R, gated LoopSpec, T=1, mean over positions",
        "grid": [
            {"d1": k[0], "d2": k[1], **v, "bound": expected_cost(k[0], k[1], alpha, beta, R)}
            for k, v in costs.items()
        ],
        "worst_pair": worst,
    }
    worst_ratio = ratios[worst] if ratios else math.nan
    return CheckResult("theorem2_traces", worst_ratio, 1.0, worst_ratio <= 1.0 + BOUND_SLACK, details)
