"""proofs/checks/theorem1.py and theorem2.py on tiny models: Theorem 1/2 on real traces,
with a negative control for each check that can fail."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tolerances import assert_close

import refdec
from analysis.traces import depth_pairs, mean_tv_curve, traces
from proofs.checks.theorem1 import check_theorem1_traces
from proofs.checks.theorem2 import check_theorem2_traces, measured_costs
from proofs.prompts import model_prompts


@pytest.fixture(scope="module")
def laws():
    m = refdec.load_model("tiny-raven", dtype=torch.float64)
    return traces(m, model_prompts(m, "tiny-raven", 4))


def test_traces_are_laws_at_every_depth(laws):
    R, P, V = laws.shape
    assert (R, V) == (6, 13) and P == sum(
        len(p) for p in model_prompts(refdec.load_model("tiny-raven"), "tiny-raven", 4)
    )
    assert_close(laws.sum(-1), 1.0)


def test_depth_pairs():
    assert depth_pairs(4, False) == [(1, 2), (1, 3), (2, 3)]
    big = depth_pairs(32, False)
    assert (2, 8) in big and all(a < b < 32 and a <= 8 for a, b in big)
    assert len(depth_pairs(32, True)) == 31 * 30 // 2


def test_theorem1_on_traces_holds(laws):
    r = check_theorem1_traces(laws, depth_pairs(6, False), "tiny-raven")
    assert (
        r.kind == "theorem1" and r.passed and r.measured <= 2.0 and r.details.max_ratio_ungated <= 1.0 + 1e-9
    )
    assert r.details.cases == laws.shape[1] * 10 and r.details.source == "traces"
    assert (r.details.model, r.details.positions, r.details.depth_pairs) == ("tiny-raven", laws.shape[1], 10)


def test_theorem2_on_traces_holds_and_reports_the_optimum(laws):
    r = check_theorem2_traces(laws, depth_pairs(6, False), "tiny-raven")
    d = r.details
    assert r.kind == "theorem2_traces" and r.passed and r.measured <= 1.0
    assert d.mean_tv[-1] == 0.0 and all(e >= tv - 1e-12 for e, tv in zip(d.envelope, d.mean_tv))
    best = min(d.grid, key=lambda g: g.cost)
    assert d.measured_best == (best.d1, best.d2)
    assert d.d1_star > 0 and d.d2_star > 0


def test_measured_cost_is_the_cost_model(laws):
    costs = measured_costs(laws, [(1, 2)])[(1, 2)]
    assert costs["cost"] == pytest.approx(1 + costs["p_x1_rejected"] * 2 + costs["p_both_rejected"] * 6)
    curve = mean_tv_curve(laws)
    assert costs["p_x1_rejected"] == pytest.approx(curve[0])  # P(x1 rejected) = mean TV(p_1, p_R)


def test_theorem2_check_fails_when_the_envelope_is_too_low(laws, monkeypatch):
    """Negative control: an 'envelope' at a tenth of the fit no longer bounds the measured cost."""
    from proofs.checks import theorem2 as model_theorems

    real = model_theorems.fit_depth_curve
    monkeypatch.setattr(
        model_theorems,
        "fit_depth_curve",
        lambda curve: dataclasses.replace(real(curve), beta=real(curve).beta / 10),
    )
    r = check_theorem2_traces(laws, depth_pairs(6, False), "tiny-raven")
    assert not r.passed and r.measured > 1.0


def rising_laws(R: int = 4, P: int = 3) -> torch.Tensor:
    """(R, P, 2) laws whose TV to the full depth grows with depth below R: 0.1, 0.2, 0.3, 0."""
    laws = torch.empty(R, P, 2, dtype=torch.float64)
    for r in range(R):
        p = 0.5 + (0.1 * (r + 1) if r < R - 1 else 0.0)
        laws[r, :] = torch.tensor([p, 1 - p], dtype=torch.float64)
    return laws


def test_theorem2_is_not_applicable_where_tv_does_not_decay():
    """A curve rising with depth fits alpha <= 0: outside the theorem, said so, nothing raised; the
    same shape of laws with a decaying curve (the control) is checked."""
    r = check_theorem2_traces(rising_laws(), depth_pairs(4, False), "rising")
    assert r.not_applicable and "alpha" in r.not_applicable and "rising" in r.not_applicable
    decaying = rising_laws().flip(0)[[1, 2, 3, 0]]  # laws 0.8, 0.7, 0.6, 0.5: TV 0.3, 0.2, 0.1, 0
    control = check_theorem2_traces(decaying, depth_pairs(4, False), "decaying")
    assert control.not_applicable is None and control.details.alpha > 0


def test_theorem1_search_finds_nothing_above_the_bounds():
    from proofs.checks.theorem1 import check_theorem1_search

    r = check_theorem1_search(60, seed=1)
    assert r.passed and 0 < r.measured <= 2.0 + 1e-9
    assert r.details.max_ratio_ungated <= 1.0 + 1e-9 and r.details.n_failures == 0
    assert r.details.source == "search" and r.details.cases > 0


def test_theorem1_search_reports_a_violation(monkeypatch):
    """Negative control: if the rules broke the gated bound, the search must say so."""
    from proofs.checks import theorem1 as theorem1_search

    real = theorem1_search.check_theorem1_pair

    def broken(*laws):
        row = real(*laws)
        return dataclasses.replace(row, passed_gated=row.eps2 < 0.01)

    monkeypatch.setattr(theorem1_search, "check_theorem1_pair", broken)
    r = theorem1_search.check_theorem1_search(30, seed=1)
    assert not r.passed and r.details.n_failures > 0
