"""Theorem 2 of LoopSpec (docs/design.md sections 4 and 6, check 5): the published optimum, and the
cost model on real model traces (analysis/traces.py).

Published: the closed form (analysis/cost_model.py) reproduces (1.26, 8.85) from (1.03, 0.175, R=32).

Traces: mean TV(p_r, p_R) over positions, an upper envelope phi(r) = beta r^(-alpha) fitted
to it (`analysis.cost_model.fit_depth_curve`, on the depths above TV_FLOOR), the closed-form
(d1*, d2*), and the measured best pair on a grid. "Measured" here is the exact expected number
of recurrent steps per token of gated LoopSpec under the model's own laws,
E[C] = d1 + P(x1 rejected) d2 + P(both rejected) R, averaged over positions (Theorem 2's cost
model, each probability from `fastdec.accept.loopspec_law`): no timing noise, and the quantity
the theorem bounds.
The check: E[C] <= the envelope bound d1 + phi(d1) d2 + 2 phi(d2) R at every grid pair.

The theorem's envelope decays with depth (alpha > 0). A model whose mean TV to the full depth does
not (a tiny random model may move away from its final law before it settles: the fitted alpha is
<= 0) is outside the theorem: the check is not applicable to it and says why, rather than stopping
the run with the closed form's own refusal of alpha <= 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from analysis.cost_model import (
    PUBLISHED,
    PUBLISHED_TOL,
    TV_FLOOR,
    best_integer_depths,
    expected_cost,
    fit_depth_curve,
    optimal_depths,
)
from analysis.traces import mean_tv_curve
from fastdec.accept import loopspec_law, total_variation
from proofs.details import DepthPairCost, Theorem2PublishedDetails, Theorem2TracesDetails
from proofs.result import CheckResult

BOUND_SLACK = 1e-9  # float64 rounding of averages


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
    if not alpha > 0:
        why = (
            f"the mean TV to the full depth does not decay with depth on {label} (fitted alpha "
            f"{alpha:.3g} <= 0 over depths {fitted}; mean TV {[round(tv, 4) for tv in curve]}): "
            "Theorem 2's envelope beta r^-alpha assumes it does"
        )
        return CheckResult("theorem2_traces", math.nan, 1.0, True, kind="theorem2_traces", not_applicable=why)
    d1s, d2s = optimal_depths(alpha, beta, R)
    costs = measured_costs(laws, pairs)
    ratios = {k: v["cost"] / expected_cost(k[0], k[1], alpha, beta, R) for k, v in costs.items()}
    best = min(costs, key=lambda k: (costs[k]["cost"], k))
    worst = max(ratios, key=ratios.get)
    d1r = min(max(1, round(d1s)), R - 2)
    near = (d1r, min(max(d1r + 1, round(d2s)), R - 1))
    details = Theorem2TracesDetails(
        model=label,
        R=R,
        positions=laws.shape[1],
        temperature=1.0,
        mean_tv=curve,
        alpha=alpha,
        beta=beta,
        fitted_depths=fitted,
        tv_floor=TV_FLOOR,
        envelope=[beta * r**-alpha for r in range(1, R + 1)],
        envelope_covers_every_depth=all(beta * r**-alpha >= tv for r, tv in enumerate(curve, 1)),
        d1_star=d1s,
        d2_star=d2s,
        bound_best_integer=best_integer_depths(alpha, beta, R) if R >= 3 else None,
        measured_best=best,
        measured_best_cost=costs[best]["cost"],
        rounded_star=near,
        rounded_star_cost=costs[near]["cost"] if near in costs else None,
        autoregressive_cost=R,
        how_measured="exact expected recurrent steps per token, E[C] = d1 + P(x1 rejected) d2 + "
        "P(both rejected) R, gated LoopSpec, T=1, mean over positions",
        grid=[
            DepthPairCost(k[0], k[1], **v, bound=expected_cost(k[0], k[1], alpha, beta, R))
            for k, v in costs.items()
        ],
        worst_pair=worst,
    )
    worst_ratio = ratios[worst] if ratios else math.nan
    return CheckResult("theorem2_traces", worst_ratio, 1.0, worst_ratio <= 1.0 + BOUND_SLACK, details)


def check_theorem2_published() -> CheckResult:
    """The closed form reproduces the published optimum (1.26, 8.85) from (1.03, 0.175, R=32)."""
    model = (PUBLISHED["alpha"], PUBLISHED["beta"], PUBLISHED["R"])
    d1, d2 = optimal_depths(*model)
    err = max(abs(d1 - PUBLISHED["d1"]), abs(d2 - PUBLISHED["d2"]))
    details = Theorem2PublishedDetails(
        **PUBLISHED,
        d1_closed_form=d1,
        d2_closed_form=d2,
        cost_closed_form=expected_cost(d1, d2, *model),
        # The cost model's own integer optimum; the paper's measured best is PUBLISHED's.
        best_integer_depths=best_integer_depths(*model),
    )
    return CheckResult("theorem2_published", err, PUBLISHED_TOL, err <= PUBLISHED_TOL, details)
