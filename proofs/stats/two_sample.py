"""The two-sample statistics of the engine-relative check (docs/certify.md#the-engine-relative-check).

Two decoders of one engine (its speculative mode and its plain one) are sampled on the same
case; each view of the case (proofs/stats/views.py) counts both samples over the same bins,
fixed from refdec's exact law of the case (never from the samples). A chi-square test of
homogeneity on the 2 x B table then asks whether the two laws differ; it needs no exact law of
the engine, only the bins. Power is stated as for the one-sample check
(proofs/stats/chisquare.py detectable_tv): under a local alternative the statistic is about
non-central chi-square with dof B - 1 and lambda = n_eff sum_i (a_i - b_i)^2 / r_i, where
n_eff = n_a n_b / (n_a + n_b) and r is the pooled law; the Cauchy-Schwarz argument of
detectable_tv then bounds lambda >= n_eff delta^2 kappa(r) for every pair of laws at binned
TV delta. r is taken as refdec's law over the bins (the law the engine claims): the stated
power is the one at the claimed law. With n_a = n_b = N, n_eff = N / 2: a two-sample view
needs twice the one-sample N per decoder (proofs/checks/distribution.py relative_samples).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from proofs.stats.chisquare import _kappa, _power_model
from refdec.errors import LoopcertError


def two_sample_bins(probs: Sequence[float], n_a: int, n_b: int, min_expected: float = 5.0) -> list[list[int]]:
    """Bins of a view's cells for the homogeneity test, fixed from the law and the two totals:
    cells ordered by probability (descending, ties by index), each with min(n_a, n_b) p_i >=
    min_expected its own bin, the others pooled (as chisquare_gof pools one sample), a light
    pooled bin fed with the smallest single bins until its expected count reaches min_expected.
    The view's extra last cell (tokens outside the claimed law's support: index len(probs))
    always joins the last bin, so no bin is chosen from what was observed."""
    p = np.asarray(probs, dtype=np.float64)
    n = min(n_a, n_b)
    live = np.flatnonzero(p > 0)
    order = live[np.argsort(-p[live], kind="stable")]
    big = [int(i) for i in order if n * p[i] >= min_expected]
    rest = [int(i) for i in order if n * p[i] < min_expected]
    while rest and n * p[rest].sum() < min_expected and big:
        rest.insert(0, big.pop())
    bins = [[i] for i in big] + ([rest] if rest else [])
    if not bins:
        bins = [[]]
    bins[-1] = bins[-1] + [int(p.size)] + [int(i) for i in np.flatnonzero(p <= 0)]
    return bins


def homogeneity(counts_a: Sequence[int], counts_b: Sequence[int], bins: list[list[int]]) -> dict:
    """Pearson's chi-square test that two samples' counts over the cells come from one law.

    counts_*: (K + 1,) counts over a view's K cells and its extra cell; `bins` groups them
    (two_sample_bins). Bins neither sample reached carry no information and are left out (dof =
    bins reached - 1); with one bin left the test has none: stat 0, p-value 1. Returns
    dict(stat, dof, p_value, n_a, n_b, observed_a, observed_b, empirical_tv), the last the TV
    between the two samples' binned frequencies."""
    a = np.asarray(counts_a, dtype=np.int64)
    b = np.asarray(counts_b, dtype=np.int64)
    if a.shape != b.shape or a.ndim != 1:
        raise LoopcertError(f"two samples' counts must have one shape, got {a.shape} and {b.shape}")
    oa = np.array([a[c].sum() for c in bins], dtype=np.float64)
    ob = np.array([b[c].sum() for c in bins], dtype=np.float64)
    n_a, n_b = int(oa.sum()), int(ob.sum())
    empirical = 0.5 * float(np.abs(oa / n_a - ob / n_b).sum()) if n_a and n_b else None
    reached = (oa + ob) > 0
    dof = int(reached.sum()) - 1
    if n_a == 0 or n_b == 0 or dof < 1:
        stat, p_value = 0.0, 1.0
    else:
        oa, ob = oa[reached], ob[reached]
        pooled = (oa + ob) / (n_a + n_b)
        ea, eb = n_a * pooled, n_b * pooled
        stat = float(((oa - ea) ** 2 / ea).sum() + ((ob - eb) ** 2 / eb).sum())
        p_value = float(stats.chi2.sf(stat, dof))
    return {
        "stat": stat,
        "dof": max(dof, 0),
        "p_value": p_value,
        "n_a": n_a,
        "n_b": n_b,
        "observed_a": [int(x) for x in np.asarray([a[c].sum() for c in bins])],
        "observed_b": [int(x) for x in np.asarray([b[c].sum() for c in bins])],
        "empirical_tv": empirical,
    }


def two_sample_detectable_tv(
    n_a: int, n_b: int, bin_probs: Sequence[float], alpha: float, power: float = 0.99
) -> float:
    """Smallest binned TV between the two decoders' laws that the homogeneity test detects with
    probability >= power at level alpha (module docstring: n_eff = n_a n_b / (n_a + n_b), kappa
    at `bin_probs`, the claimed law over the test's bins). inf with fewer than 2 bins, no samples
    on a side, or a TV beyond what any law reaches (as detectable_tv)."""
    p, lam = _power_model(bin_probs, alpha, power)
    if lam is None or n_a <= 0 or n_b <= 0:
        return math.inf
    n_eff = n_a * n_b / (n_a + n_b)
    delta = math.sqrt(lam / (n_eff * _kappa(p)))
    return delta if delta <= 1.0 - float(p.min()) else math.inf
