"""Statistics of the distributional checks (docs/design.md section 6, check 3).

A candidate decoder is sampled N times; its token (or n-token) counts are tested against the
exact law enumerated from refdec with a chi-square goodness-of-fit test; p-values across cases
are Holm-corrected; and each result states its power as the smallest total-variation deviation
it detects with probability >= 0.99.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import optimize, stats

from refdec.errors import LoopcertError
from refdec.validate import check_int, check_number

PROB_SUM_TOL = 1e-6  # expected laws must sum to 1 within this; they are then renormalised
EXACT_SPLIT_MAX_BINS = 20  # up to 2^20 subset sums for the exact kappa in `detectable_tv`


def _probs(name: str, p: Sequence[float]) -> np.ndarray:
    a = np.asarray(p, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise LoopcertError(f"{name} must be a non-empty 1-D sequence, got shape {a.shape}")
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise LoopcertError(f"{name} must be finite and >= 0, got min {a.min()!r}")
    total = float(a.sum())
    if abs(total - 1.0) > PROB_SUM_TOL:
        raise LoopcertError(f"{name} must sum to 1 (within {PROB_SUM_TOL}), sums to {total!r}")
    return a / total


def _level(name: str, x: float) -> float:
    return check_number(name, x, 0, 1, low_open=True, high_open=True)


def chisquare_gof(
    observed_counts: Sequence[int], expected_probs: Sequence[float], min_expected: float = 5.0
) -> dict:
    """Chi-square goodness of fit of counts over K cells against a law over the same K cells.

    Bins depend on the expected counts E_i = N p_i only (N = total count), never on the
    observations, so the test keeps its level:
      1. cells with p_i = 0 get no bin; if any of them was observed the law is violated outright:
         stat = inf, p_value = 0;
      2. the other cells are ordered by E_i descending, ties by lower cell index;
      3. each cell with E_i >= min_expected is its own bin; all cells with E_i < min_expected
         are pooled into one remainder bin;
      4. while the remainder is non-empty with expected count < min_expected and a singleton bin
         is left, the last (smallest) singleton bin is merged into the remainder.
    Every bin then has expected count >= min_expected, unless only one bin is left, in which
    case dof = 0 and p_value = 1 (the test has no information; `detectable_tv` gives inf).

    Returns dict(stat, dof, p_value, bins, bin_probs, observed, expected, n): `bins` lists the
    cell indices of each bin in the order above, `observed` / `expected` are per-bin counts.
    """
    obs = np.asarray(observed_counts)
    p = _probs("expected_probs", expected_probs)
    if obs.shape != p.shape:
        raise LoopcertError(f"observed_counts has shape {obs.shape}, expected_probs {p.shape}")
    if not np.issubdtype(obs.dtype, np.integer) or np.any(obs < 0):
        raise LoopcertError(f"observed_counts must be non-negative integers, got {obs!r}")
    if isinstance(min_expected, bool) or not min_expected > 0:
        raise LoopcertError(f"min_expected must be > 0, got {min_expected!r}")
    n = int(obs.sum())
    if n == 0:
        raise LoopcertError("observed_counts are all zero: nothing was sampled")
    expected = n * p
    live = np.flatnonzero(p > 0)
    order = live[np.argsort(-expected[live], kind="stable")]
    big = [int(i) for i in order if expected[i] >= min_expected]
    rest = [int(i) for i in order if expected[i] < min_expected]
    while rest and expected[rest].sum() < min_expected and big:
        rest.insert(0, big.pop())
    bins = [[i] for i in big] + ([rest] if rest else [])
    bin_obs = np.array([obs[b].sum() for b in bins], dtype=np.float64)
    bin_exp = np.array([expected[b].sum() for b in bins])
    dof = len(bins) - 1
    if np.any(obs[p == 0] > 0):
        stat, p_value = math.inf, 0.0
    elif dof == 0:
        stat, p_value = 0.0, 1.0
    else:
        stat = float(((bin_obs - bin_exp) ** 2 / bin_exp).sum())
        p_value = float(stats.chi2.sf(stat, dof))
    return {
        "stat": stat,
        "dof": dof,
        "p_value": p_value,
        "bins": bins,
        "bin_probs": [float(p[b].sum()) for b in bins],
        "observed": [int(o) for o in bin_obs],
        "expected": [float(e) for e in bin_exp],
        "n": n,
    }


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down procedure: which hypotheses are rejected at family-wise level alpha.

    The i-th smallest p-value (i = 0, 1, ...; ties by input order) is rejected iff it and every
    smaller one satisfy p_(j) <= alpha / (m - j). Returned in input order.
    """
    alpha = _level("alpha", alpha)
    ps = np.asarray(p_values, dtype=np.float64)
    if ps.ndim != 1 or np.any(~np.isfinite(ps)) or np.any((ps < 0) | (ps > 1)):
        raise LoopcertError(f"p_values must be a 1-D sequence in [0, 1], got {p_values!r}")
    m = ps.size
    rejected = [False] * m
    for rank, i in enumerate(np.argsort(ps, kind="stable")):
        if ps[i] > alpha / (m - rank):
            break
        rejected[int(i)] = True
    return rejected


def _noncentrality_needed(dof: int, alpha: float, power: float) -> float:
    """The lambda at which the level-alpha chi-square test with `dof` has the given power."""
    crit = stats.chi2.isf(alpha, dof)

    def gap(lam: float) -> float:  # increasing in lam
        return stats.ncx2.sf(crit, dof, lam) - power

    hi = 1.0
    while gap(hi) < 0:
        hi *= 2.0
    return float(optimize.brentq(gap, 0.0, hi, xtol=1e-12, rtol=1e-12))


def _kappa(bin_probs: np.ndarray) -> float:
    """min over proper non-empty bin sets A of 1/P(A) + 1/(1 - P(A)), or its lower bound 4."""
    if bin_probs.size > EXACT_SPLIT_MAX_BINS:
        return 4.0
    sums = np.zeros(1)
    for p in bin_probs[:-1]:  # fixing the last bin outside A halves the work, by symmetry
        sums = np.concatenate([sums, sums + p])
    sums = sums[1:]  # drop the empty set
    return float((1.0 / (sums * (1.0 - sums))).min())


def _power_model(bin_probs: Sequence[float], alpha: float, power: float) -> tuple[np.ndarray, float | None]:
    """detectable_tv's and required_samples' shared inputs: the bins with mass, and lambda*, the
    noncentrality the test needs at this level and power (None with fewer than 2 bins)."""
    alpha, power = _level("alpha", alpha), _level("power", power)
    if power <= alpha:
        raise LoopcertError(f"power must exceed alpha, got power={power!r}, alpha={alpha!r}")
    p = _probs("bin_probs", bin_probs)
    p = p[p > 0]
    return p, (_noncentrality_needed(p.size - 1, alpha, power) if p.size >= 2 else None)


def detectable_tv(n_samples: int, bin_probs: Sequence[float], alpha: float, power: float = 0.99) -> float:
    """Smallest TV deviation of the binned law that the chi-square test detects with >= power.

    Model: under an alternative law p' the statistic is approximately non-central chi-square
    with dof = k - 1 and lambda = N sum_i (p'_i - p_i)^2 / p_i (the standard local asymptotics;
    an approximation, not a finite-N guarantee). Power grows with lambda, so a TV delta is
    detected with the given power iff even the least visible p' at TV delta reaches lambda*.

    Least visible p' at TV delta: write d = p' - p, A = {d > 0}, B = {d < 0}. Then
    sum_A d_i = delta = -sum_B d_i and, by Cauchy-Schwarz, sum_A d_i^2/p_i >= delta^2 / P(A)
    (equality for d_i proportional to p_i), likewise on B, and P(B) <= 1 - P(A), so
        lambda >= N delta^2 kappa,   kappa = min_A 1/P(A) + 1/(1 - P(A)) = min_A 1/(P(A)(1-P(A))).
    The minimum is over all bin sets A (exact enumeration up to EXACT_SPLIT_MAX_BINS bins, else
    the universal lower bound kappa >= 4, attained by a half/half split). Ignoring p' >= 0 can
    only lower the minimum, so the returned delta = sqrt(lambda* / (N kappa)) is conservative:
    every binned deviation of TV >= delta has lambda >= lambda*. lambda* is found by bisection
    (brentq) on the non-central chi-square power.

    TV here is between binned laws: mass moved between cells of one pooled bin is invisible.
    alpha is the level of this one test (after Holm, the strictest per-test level is alpha/m).
    Returns inf when there is a single bin or when delta exceeds 1 - min_i p_i, the largest TV
    any law has from p (all mass on the least likely bin): then no deviation is guaranteed.
    """
    check_int("n_samples", n_samples, 1)
    p, lam = _power_model(bin_probs, alpha, power)
    if lam is None:
        return math.inf
    delta = math.sqrt(lam / (int(n_samples) * _kappa(p)))
    return delta if delta <= 1.0 - float(p.min()) else math.inf


def required_samples(tv: float, bin_probs: Sequence[float], alpha: float, power: float = 0.99) -> int:
    """Smallest N with detectable_tv(N, bin_probs, alpha, power) <= tv (same model and bound)."""
    check_number("tv", tv, 0, 1, low_open=True)
    p, lam = _power_model(bin_probs, alpha, power)
    if lam is None:
        raise LoopcertError("bin_probs has fewer than 2 bins with mass: no sample size has power")
    return max(1, math.ceil(lam / (_kappa(p) * tv * tv)))


def power_statement(n_samples: int, bin_probs: Sequence[float], alpha: float, power: float = 0.99) -> str:
    """The power of one chi-square result in words, for CheckResult.power."""
    delta = detectable_tv(n_samples, bin_probs, alpha, power)
    return (
        f"detects binned TV >= {delta:.4g} with probability >= {power:g} at alpha {alpha:g} "
        f"(N={int(n_samples)}, {sum(1 for b in bin_probs if b > 0)} bins, non-central chi-square)"
    )
