"""Theorem 2 (analysis/cost_model.py, docs/design.md section 4): closed-form depths and the envelope fit."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.cost_model import (
    PUBLISHED,
    best_integer_depths,
    expected_cost,
    fit_depth_curve,
    fit_envelope,
    optimal_depths,
)
from proofs.checks.theorem2 import check_theorem2_published
from proofs.result import CheckResult
from refdec.errors import LoopcertError


def test_published_values():
    result = check_theorem2_published()
    assert result.passed and result.measured <= result.bound == 0.01
    assert result.details.d1_closed_form == pytest.approx(1.2583, abs=1e-4)
    assert result.details.d2_closed_form == pytest.approx(8.8451, abs=1e-4)
    assert result.details.best_integer_depths == (1, 8)


def test_published_check_can_fail():
    """Negative control: a slightly different alpha moves the optimum past the tolerance."""
    d1, d2 = optimal_depths(1.0, PUBLISHED["beta"], PUBLISHED["R"])
    assert max(abs(d1 - PUBLISHED["d1"]), abs(d2 - PUBLISHED["d2"])) > 0.01


models = st.tuples(st.floats(0.3, 3.0), st.floats(0.01, 2.0), st.floats(4.0, 256.0))


@settings(deadline=None)
@given(model=models)
def test_closed_form_minimises_expected_cost(model):
    alpha, beta, R = model
    d1s, d2s = optimal_depths(alpha, beta, R)
    best = expected_cost(d1s, d2s, alpha, beta, R)
    # A log grid over [d*/8, 8 d*] in both depths, step ratio 64^(1/120) ~ 3.5%.
    g1, g2 = (d * np.geomspace(1 / 8, 8, 121) for d in (d1s, d2s))
    costs = np.array([[expected_cost(a, b, alpha, beta, R) for b in g2] for a in g1])
    i, j = np.unravel_index(costs.argmin(), costs.shape)
    assert costs.min() >= best * (1 - 1e-12), (model, g1[i], g2[j])
    assert abs(i - 60) <= 1 and abs(j - 60) <= 1, (model, g1[i], g2[j], d1s, d2s)
    # Stationary: both partial derivatives vanish (central differences, relative step 1e-6).
    for k in (0, 1):
        lo, hi = [d1s, d2s], [d1s, d2s]
        h = 1e-6 * lo[k]
        lo[k] -= h
        hi[k] += h
        grad = (expected_cost(*hi, alpha, beta, R) - expected_cost(*lo, alpha, beta, R)) / (2 * h)
        assert abs(grad) < 1e-5 * max(1.0, best), (model, k, grad)


def test_best_integer_depths_is_brute_force():
    alpha, beta, R = 1.03, 0.175, 32
    pairs = [(a, b) for a, b in itertools.combinations(range(1, R), 2)]
    want = min(pairs, key=lambda d: expected_cost(*d, alpha, beta, R))
    assert best_integer_depths(alpha, beta, R) == want


@pytest.mark.parametrize(("alpha", "beta"), [(1.03, 0.175), (0.5, 1.0), (2.0, 0.01)])
def test_envelope_is_exact_on_power_law_data(alpha, beta):
    r = np.arange(1, 32, dtype=np.float64)
    tv = np.append(beta * r**-alpha, 0.0)  # TV(p_R, p_R) = 0 at r = R is ignored
    a, b = fit_envelope(np.append(r, 32.0), tv)
    assert a == pytest.approx(alpha, rel=1e-9) and b == pytest.approx(beta, rel=1e-9)


@settings(deadline=None)
@given(
    alpha=st.floats(0.2, 3.0),
    beta=st.floats(0.01, 1.0),
    noise=st.lists(st.floats(-0.5, 0.5), min_size=4, max_size=40),
)
def test_envelope_lies_above_noisy_data_and_touches_it(alpha, beta, noise):
    r = np.arange(1, len(noise) + 1, dtype=np.float64)
    tv = beta * r**-alpha * np.exp(noise)
    a, b = fit_envelope(r, tv)
    phi = b * r**-a
    assert np.all(phi >= tv * (1 - 1e-12)), (a, b)
    assert np.any(np.isclose(phi, tv, rtol=1e-9)), "the envelope should touch its highest point"


def test_envelope_needs_two_positive_depths():
    with pytest.raises(LoopcertError, match="two distinct depths"):
        fit_envelope([1, 2, 3], [0.3, 0.0, 0.0])
    with pytest.raises(LoopcertError, match="depths must be finite and > 0"):
        fit_envelope([0, 2], [0.3, 0.1])
    with pytest.raises(LoopcertError, match="one length"):
        fit_envelope([1, 2], [0.3])


@pytest.mark.parametrize(
    "args", [(0.0, 0.175, 32), (1.03, -1.0, 32), (1.03, 0.175, float("inf")), (True, 0.175, 32)]
)
def test_bad_models_raise(args):
    with pytest.raises(LoopcertError):
        optimal_depths(*args)


def test_check_result_serialises_plain_values():
    details = {"t": torch.tensor([1.0, 2.0]), "k": (1, 2)}
    result = CheckResult("x", np.float64(0.5), 1, np.bool_(True), details)
    assert result.measured == 0.5 and result.passed is True and isinstance(result.bound, float)
    assert json.loads(result.to_json()) == {
        "name": "x",
        "measured": 0.5,
        "bound": 1.0,
        "passed": True,
        "power": None,
        "details": {"t": [1.0, 2.0], "k": [1, 2]},  # untyped (a bench gate's): no kind
        "kind": None,
        "seconds": None,
        "error": None,
        "skipped": None,
        "not_applicable": None,
        "incomplete": None,
    }
    with pytest.raises(LoopcertError, match="name"):
        CheckResult("", 0.0, 1.0, True, {})


def test_fit_depth_curve_uses_the_depths_above_the_floor():
    R, alpha, beta = 16, 1.2, 0.3
    curve = [beta * r**-alpha for r in range(1, R)] + [0.0]
    curve[9:15] = [1e-12] * 6  # converged to rounding: below the floor, left out
    env = fit_depth_curve(curve)
    assert env.depths == tuple(range(1, 10))
    assert env.alpha == pytest.approx(alpha) and env.beta == pytest.approx(beta)
    # converged almost at once: every positive depth is fitted rather than none
    early = fit_depth_curve([0.2, 1e-12, 1e-13, 0.0])
    assert early.depths == (1, 2, 3)
    with pytest.raises(LoopcertError, match="two distinct depths"):
        fit_depth_curve([0.0] * 8)
