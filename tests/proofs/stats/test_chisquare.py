"""Statistics of the distributional checks (proofs/stats/chisquare.py, docs/design.md section 6, check 3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from proofs.stats.chisquare import (
    chisquare_gof,
    detectable_tv,
    holm,
    power_statement,
    required_samples,
)
from refdec.errors import LoopcertError

# -- chisquare_gof -------------------------------------------------------------------------------


def test_bins_come_from_expected_counts_only():
    probs = [0.15, 0.25, 0.45, 0.10, 0.05, 0.0]
    # N = 66: E = (9.9, 16.5, 29.7, 6.6, 3.3, 0). Cell 4 is pooled; the remainder (3.3 < 5)
    # takes the smallest singleton, cell 3; cell 5 has no mass and no bin.
    a = chisquare_gof([10, 20, 30, 5, 1, 0], probs)
    b = chisquare_gof([0, 0, 66, 0, 0, 0], probs)
    assert a["bins"] == b["bins"] == [[2], [1], [0], [3, 4]]
    assert a["expected"] == pytest.approx([29.7, 16.5, 9.9, 9.9])
    assert a["observed"] == [30, 20, 10, 6] and a["dof"] == 3 and a["n"] == 66
    assert a["bin_probs"] == pytest.approx([0.45, 0.25, 0.15, 0.15])


def test_matches_scipy_without_pooling():
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    obs = np.array([90, 230, 280, 400])
    got = chisquare_gof(obs, probs)
    want = sps.chisquare(obs, 1000 * probs)
    assert got["stat"] == pytest.approx(want.statistic, rel=1e-12)
    assert got["p_value"] == pytest.approx(want.pvalue, rel=1e-9)


def test_impossible_cell_fails_outright():
    got = chisquare_gof([50, 49, 1], [0.5, 0.5, 0.0])
    assert got["stat"] == math.inf and got["p_value"] == 0.0


def test_single_bin_has_no_information():
    got = chisquare_gof([3, 1], [0.5, 0.5])  # N = 4: everything pools into one bin
    assert got["dof"] == 0 and got["p_value"] == 1.0
    assert detectable_tv(4, got["bin_probs"], 1e-3) == math.inf


def test_null_p_values_are_calibrated_and_shifts_are_caught():
    rng = np.random.default_rng(0)
    probs = np.array([0.4, 0.3, 0.2, 0.06, 0.03, 0.005, 0.005])
    null = [chisquare_gof(rng.multinomial(2000, probs), probs)["p_value"] for _ in range(400)]
    assert 0.02 <= np.mean(np.array(null) < 0.05) <= 0.09  # Binomial(400, 0.05): 20 +- 4.4
    shifted = probs + np.array([-0.08, 0.08, 0, 0, 0, 0, 0])  # lambda ~ 75
    alt = [chisquare_gof(rng.multinomial(2000, shifted), probs)["p_value"] for _ in range(50)]
    assert np.mean(np.array(alt) < 1e-3) > 0.9


@pytest.mark.parametrize(
    "obs, probs, match",
    [
        ([1, 2], [0.5, 0.3, 0.2], "shape"),
        ([1, -2], [0.5, 0.5], "non-negative integers"),
        ([1.5, 2.0], [0.5, 0.5], "non-negative integers"),
        ([1, 2], [0.5, 0.6], "sum to 1"),
        ([0, 0], [0.5, 0.5], "nothing was sampled"),
        ([1, 2], [1.5, -0.5], "finite and >= 0"),
    ],
)
def test_gof_user_errors(obs, probs, match):
    with pytest.raises(LoopcertError, match=match):
        chisquare_gof(obs, probs)


# -- holm ------------------------------------------------------------------------------------------


def test_holm_literal():
    assert holm([0.01, 0.04, 0.03, 0.2], 0.05) == [True, False, False, False]
    assert holm([0.01, 0.012, 0.02, 0.04], 0.05) == [True, True, True, True]
    assert holm([0.0, 0.0], 0.01) == [True, True]
    assert holm([], 0.05) == []


@settings(deadline=None)
@given(ps=st.lists(st.floats(0.0, 1.0), max_size=12), alpha=st.floats(0.001, 0.5))
def test_holm_is_step_down_and_beats_bonferroni(ps, alpha):
    rej = holm(ps, alpha)
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    k = sum(rej)
    assert all(rej[i] for i in order[:k]) and not any(rej[i] for i in order[k:])
    assert all(rej[i] for i in range(m) if ps[i] <= alpha / m)  # Bonferroni's rejections
    if k < m:
        assert ps[order[k]] > alpha / (m - k)


def test_holm_user_errors():
    with pytest.raises(LoopcertError, match="alpha"):
        holm([0.1], 0.0)
    with pytest.raises(LoopcertError, match="p_values"):
        holm([0.1, float("nan")], 0.05)


# -- detectable_tv / required_samples ------------------------------------------------------------


def _least_visible(probs: np.ndarray, delta: float) -> np.ndarray:
    """The perturbation of TV delta with the smallest chi-square distance (docstring of
    detectable_tv): mass delta moved, proportionally to p, from the complement of the best
    split A (P(A) closest to 1/2) onto A."""
    k = probs.size
    sets = [np.array([bool(m >> i & 1) for i in range(k)]) for m in range(1, 2 ** (k - 1))]
    in_a = min(sets, key=lambda a: abs(probs[a].sum() - 0.5))
    pa = probs[in_a].sum()
    return probs + np.where(in_a, delta * probs / pa, -delta * probs / (1 - pa))


def test_detectable_tv_has_its_power_by_simulation():
    rng = np.random.default_rng(1)
    probs, n, alpha = np.array([0.45, 0.3, 0.15, 0.1]), 3000, 1e-3
    delta = detectable_tv(n, probs, alpha)
    alt = _least_visible(probs, delta)
    assert 0.5 * np.abs(alt - probs).sum() == pytest.approx(delta)
    hits = [chisquare_gof(rng.multinomial(n, alt), probs)["p_value"] <= alpha for _ in range(400)]
    assert np.mean(hits) >= 0.97  # nominal 0.99, non-central chi-square approximation
    # ... and the statement is not vacuous: a third of that deviation is usually missed.
    weak = _least_visible(probs, delta / 3)
    hits = [chisquare_gof(rng.multinomial(n, weak), probs)["p_value"] <= alpha for _ in range(200)]
    assert np.mean(hits) < 0.5


def test_detectable_tv_closed_forms():
    for n in (100, 400, 1600):
        d = detectable_tv(n, [0.5, 0.5], 0.01)  # kappa = 4 exactly
        crit = sps.chi2.isf(0.01, 1)
        lam = 4 * n * d * d
        assert sps.ncx2.sf(crit, 1, lam) == pytest.approx(0.99, abs=1e-9)
    d400, d1600 = (detectable_tv(n, [0.5, 0.5], 0.01) for n in (400, 1600))
    assert d400 == pytest.approx(2 * d1600)
    # A lopsided two-bin law: kappa = 1 / (0.9 * 0.1), so a smaller TV is detectable.
    assert detectable_tv(400, [0.9, 0.1], 0.01) == pytest.approx(
        detectable_tv(400, [0.5, 0.5], 0.01) * math.sqrt(4 * 0.09)
    )
    # More than EXACT_SPLIT_MAX_BINS bins: the conservative kappa = 4.
    many = np.full(25, 1 / 25)
    crit = sps.chi2.isf(0.01, 24)
    d = detectable_tv(1000, many, 0.01)
    assert sps.ncx2.sf(crit, 24, 4 * 1000 * d * d) == pytest.approx(0.99, abs=1e-9)
    assert detectable_tv(10, [0.5, 0.5], 0.01) == math.inf  # 0.78 > 0.5, the largest TV here


@pytest.mark.parametrize("tv", [0.3, 0.05, 0.01])
def test_required_samples_inverts_detectable_tv(tv):
    probs = [0.4, 0.3, 0.2, 0.1]
    n = required_samples(tv, probs, 1e-3)
    assert detectable_tv(n, probs, 1e-3) <= tv < detectable_tv(max(1, n - 1), probs, 1e-3)


def test_power_statement_names_its_numbers():
    s = power_statement(20_000, [0.2] * 5, 1e-3)
    assert "0.99" in s and "0.001" in s and "N=20000" in s and "5 bins" in s


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: detectable_tv(0, [0.5, 0.5], 0.01), "n_samples"),
        (lambda: detectable_tv(10, [0.5, 0.5], 1.0), "alpha"),
        (lambda: detectable_tv(10, [0.5, 0.5], 0.5, power=0.4), "power must exceed alpha"),
        (lambda: required_samples(0.0, [0.5, 0.5], 0.01), "tv"),
        (lambda: required_samples(0.1, [1.0], 0.01), "fewer than 2 bins"),
    ],
)
def test_power_user_errors(call, match):
    with pytest.raises(LoopcertError, match=match):
        call()
