"""Theorem 2 of LoopSpec (docs/design.md section 4): the cost model and its optimal depths.

With an envelope phi(r) = beta r^(-alpha) >= mean TV(p_r, p_R), the expected recurrent steps
per token are at most
    E[C] <= d1 + phi(d1) d2 + 2 phi(d2) R = d1 + beta d1^(-alpha) d2 + 2 beta d2^(-alpha) R
(draft to d1; with probability <= eps1 deepen to d2; with probability <= 2 eps2 restart at R,
Theorem 1). Setting both partial derivatives to zero:
    d/dd1: 1 = alpha beta d1^(-alpha-1) d2
    d/dd2: beta d1^(-alpha) = 2 alpha beta R d2^(-alpha-1)
gives d1^(alpha^2+alpha+1) = (alpha beta)^(alpha+1) (2 alpha R), hence the closed form below.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from refdec.errors import LoopcertError
from refdec.validate import check_int, check_number

PUBLISHED = {"alpha": 1.03, "beta": 0.175, "R": 32, "d1": 1.26, "d2": 8.85, "measured_best": (2, 8)}
PUBLISHED_TOL = 0.01  # the paper prints two decimals
# Depths whose mean TV(p_r, p_R) is below this have converged to p_R up to float64 rounding of
# softmax sums (~1e-16 per term); fitting log TV there fits rounding noise and tilts the slope.
TV_FLOOR = 1e-9
# Curves computed in float32 (the model card's) need a higher floor: their rounding noise is
# ~1e-7 per term, so a mean TV below this is rounding noise.
FLOAT32_TV_FLOOR = 1e-5


def _positive(name: str, x: float) -> float:
    return check_number(name, x, 0, low_open=True)


def expected_cost(d1: float, d2: float, alpha: float, beta: float, R: float) -> float:
    """Theorem 2's bound on expected recurrent steps per token: d1 + phi(d1) d2 + 2 phi(d2) R."""
    d1, d2 = _positive("d1", d1), _positive("d2", d2)
    alpha, beta, R = _positive("alpha", alpha), _positive("beta", beta), _positive("R", R)
    return d1 + beta * d1**-alpha * d2 + 2 * beta * d2**-alpha * R


def optimal_depths(alpha: float, beta: float, R: float) -> tuple[float, float]:
    """Continuous minimiser (d1*, d2*) of `expected_cost` (the stationary point, module docstring).

    Not clipped to 1 <= d1 < d2 <= R: a caller choosing integer depths should compare the
    neighbours with `expected_cost` or use `best_integer_depths`.
    """
    alpha, beta, R = _positive("alpha", alpha), _positive("beta", beta), _positive("R", R)
    k = alpha * alpha + alpha + 1
    d1 = (alpha * beta) ** ((alpha + 1) / k) * (2 * alpha * R) ** (1 / k)
    d2 = (alpha * beta) ** (alpha / k) * (2 * alpha * R) ** ((alpha + 1) / k)
    return d1, d2


def best_integer_depths(alpha: float, beta: float, R: int) -> tuple[int, int]:
    """argmin of `expected_cost` over integers 1 <= d1 < d2 < R (ties: smaller d1, then d2)."""
    R = check_int("R (for 1 <= d1 < d2 < R)", R, 3)
    pairs = [(d1, d2) for d1 in range(1, R) for d2 in range(d1 + 1, R)]
    return min(pairs, key=lambda d: expected_cost(d[0], d[1], alpha, beta, R))


def fit_envelope(depths: Sequence[float], tvs: Sequence[float]) -> tuple[float, float]:
    """(alpha, beta) of an upper envelope phi(r) = beta r^(-alpha) of measured (r, TV) points.

    alpha is the negated slope of the least-squares line through (log r, log TV); beta is then
    the smallest value with phi(r_i) >= TV_i at every point, beta = max_i TV_i r_i^alpha (the
    least-squares intercept is raised to touch the highest point, never lowered). Points with
    TV = 0 (r = R itself) need no fitting and lie below any envelope; at least two positive
    points at distinct depths are required. Exact on noise-free power-law data.
    """
    r = np.asarray(depths, dtype=np.float64)
    tv = np.asarray(tvs, dtype=np.float64)
    if r.ndim != 1 or r.shape != tv.shape:
        raise LoopcertError(f"depths and tvs must be 1-D, one length; got {r.shape}, {tv.shape}")
    if not (np.all(np.isfinite(r)) and np.all(r > 0)):
        raise LoopcertError(f"depths must be finite and > 0, got {depths!r}")
    if not (np.all(np.isfinite(tv)) and np.all(tv >= 0)):
        raise LoopcertError(f"tvs must be finite and >= 0, got {tvs!r}")
    pos = tv > 0
    if np.unique(r[pos]).size < 2:
        raise LoopcertError(f"need TV > 0 at two distinct depths to fit, got depths {depths!r}")
    x, y = np.log(r[pos]), np.log(tv[pos])
    slope = float(np.polyfit(x, y, 1)[0])
    alpha = -slope
    beta = float(np.max(tv[pos] * r[pos] ** alpha))
    return alpha, beta


@dataclass(frozen=True)
class Envelope:
    alpha: float
    beta: float
    depths: tuple[int, ...]  # the depths r the fit used


def fit_depth_curve(mean_tv: Sequence[float], floor: float = TV_FLOOR) -> Envelope:
    """The envelope of a depth curve, mean_tv[r - 1] = mean TV(p_r, p_R) for r = 1..R: the one
    fit behind the certificate, the speedup report and the model card.

    Fitted (`fit_envelope`) on the depths r < R with TV >= floor; when fewer than two are (a
    model that converges almost at once), on every depth r < R with TV > 0. LoopcertError when
    even that leaves fewer than two.
    """
    R = len(mean_tv)
    depths = [r for r in range(1, R) if mean_tv[r - 1] >= floor]
    if len(depths) < 2:
        depths = [r for r in range(1, R) if mean_tv[r - 1] > 0]
    alpha, beta = fit_envelope(depths, [mean_tv[r - 1] for r in depths])
    return Envelope(alpha, beta, tuple(depths))
