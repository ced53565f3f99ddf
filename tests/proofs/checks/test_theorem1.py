"""Theorem 1 and its Lemma (proofs/checks/theorem1.py, docs/design.md section 4) on exact laws.

Hypothesis searches for counterexamples, steered by `target` towards the largest ratio; the
negative control shows the same check failing for a second proposal that is not a residual.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import example, given, settings, target
from hypothesis import strategies as st

from fastdec.accept import LoopSpecLaw, cascade_law, residual, total_variation
from proofs.checks.theorem1 import (
    RATIO_MIN_EPS2,
    check_theorem1_cases,
    check_theorem1_pair,
    check_theorem1_random,
)
from proofs.details import Theorem1Pair
from refdec.errors import LoopcertError

RATIO_TOL = 1e-9


def t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)


def _normalise(w: list[float]) -> torch.Tensor:
    x = torch.tensor(w, dtype=torch.float64)
    if float(x.sum()) == 0.0:
        x[0] = 1.0
    return x / x.sum()


weights = st.one_of(
    st.floats(0.0, 1.0),
    st.sampled_from([0.0, 1e-300, 1e-12, 1e-6, 1e-3, 0.5, 1.0]),  # zeros, tiny masses, ties
)


@st.composite
def triples(draw):
    vocab = draw(st.integers(2, 6))
    law = st.lists(weights, min_size=vocab, max_size=vocab).map(_normalise)
    return tuple(draw(law) for _ in range(3))


def tight_gated(a: float, b: float, c: float) -> tuple[torch.Tensor, ...]:
    """The near-extremal gated family of proofs.checks.theorem1._tight_gated on tokens (A, B, C, D)."""
    return t(1 - a, 0, a - c, c), t(0, 1 - b, 0, b), t(1 - b, 0, 0, b)


def _assert_pair(row: Theorem1Pair) -> None:
    assert row.passed_ungated, row
    assert row.passed_gated, row
    assert row.passed_lemma, row
    for key, bound in (("ratio_ungated", 1.0), ("ratio_gated", 2.0), ("lemma_ratio", 1.0)):
        assert math.isnan(getattr(row, key)) or getattr(row, key) <= bound + RATIO_TOL, (key, row)


@settings(deadline=None)
@given(triple=triples())
@example(triple=tight_gated(1e-3, 1e-3, 1e-4))  # gated ratio 1.9991
@example(triple=(t(0.5, 0.5, 0), t(0, 0, 1), t(1, 0, 0)))  # ungated ratio exactly 1
@example(triple=(t(1.0, 1e-300), t(1e-300, 1.0), t(1.0, 0.0)))  # tiny masses
def test_theorem1_has_no_counterexample(triple):
    row = check_theorem1_pair(*triple)
    for key in ("ratio_gated", "ratio_ungated", "lemma_ratio"):
        target(
            0.0 if math.isnan(getattr(row, key)) else min(getattr(row, key), 1e6), label=key
        )  # finite for target
    _assert_pair(row)


@pytest.mark.parametrize(("a", "b", "c"), [(1e-2, 1e-2, 1e-3), (1e-3, 1e-3, 1e-5), (0.2, 0.1, 0.0)])
def test_tight_gated_family_matches_its_closed_form(a, b, c):
    row = check_theorem1_pair(*tight_gated(a, b, c))
    assert row.eps2 == pytest.approx(a - c, rel=1e-12)
    assert row.ratio_gated == pytest.approx((b - c) / (a - c) + (1 - b) / (1 - c), rel=1e-9)
    _assert_pair(row)


def test_random_search_passes_and_gets_close_to_the_gated_bound():
    result = check_theorem1_random(300, seed=0, vocab=6)
    assert result.kind == "theorem1" and result.passed, result.details.failures
    assert result.bound == 2.0
    assert 1.9 < result.measured <= 2.0 + RATIO_TOL  # the adversarial families reach near 2
    d = result.details
    assert 0.999 < d.max_ratio_ungated <= 1.0 + RATIO_TOL  # tight, too
    assert d.max_lemma_ratio <= 1.0 + RATIO_TOL
    assert d.cases == 300 and d.cases_with_ratio > 200
    assert d.source == "random" and (d.seed, d.vocab) == (0, 6)
    assert d.worst["ratio_gated"].pair.ratio_gated == result.measured
    assert '"theorem1_random"' in result.to_json()


def test_random_search_is_reproducible():
    a, b = (check_theorem1_random(20, seed=7, vocab=5) for _ in range(2))
    assert a.to_json() == b.to_json()


def plain_second_draft_law(p_R, p_d1, p_d2, gate) -> LoopSpecLaw:
    """Mutant: x2 ~ p_d2 itself (not the residual p_d2 (-) p_d1), always drawn, scored correctly.

    Still lossless (a cascade over any independent proposals is), but Theorem 1 is about the
    residual proposal: here P(both rejected) = eps1 TV(p_d2, rho1), which can exceed eps2.
    """
    rho1, _ = residual(p_R, p_d1)
    eps1 = total_variation(p_d1, p_R)
    p_both = eps1 * total_variation(p_d2, rho1) if rho1 is not None else eps1
    return LoopSpecLaw(cascade_law(p_R, [p_d1, p_d2]), p_both, 1.0)


def test_check_fails_for_a_non_residual_second_proposal():
    """Negative control: the check is not vacuous. p_d2 = p_R gives eps2 = 0 but P(both) = 1/4."""
    triple = (t(0.5, 0.5), t(1.0, 0.0), t(0.5, 0.5))
    row = check_theorem1_pair(*triple, law=plain_second_draft_law)
    assert row.eps2 == 0.0 and row.p_both_rejected_ungated == pytest.approx(0.25)
    assert not row.passed_ungated and not row.passed_gated
    assert row.ratio_ungated == row.ratio_gated == math.inf
    result = check_theorem1_cases([triple], law=plain_second_draft_law)
    assert not result.passed and result.details.n_failures == 1
    assert result.details.failures[0].laws == tuple(tuple(p.tolist()) for p in triple)  # kept to replay
    assert result.measured == math.inf
    assert json.loads(result.to_json())["measured"] == "inf"  # strict JSON, no bare Infinity
    assert check_theorem1_cases([triple]).passed  # the real rule on the same laws


def test_the_gate_costs_up_to_a_factor_two():
    """The gated bound needs its factor 2: the gated ratio exceeds 1 where the gate closes on x1."""
    row = check_theorem1_pair(*tight_gated(1e-2, 1e-2, 1e-3))
    assert row.ratio_gated > 1.9 and row.ratio_ungated <= 1.0 + RATIO_TOL


def test_small_eps2_has_no_ratio_but_is_still_checked():
    p_R = t(0.5, 0.5)
    p_d2 = t(0.5 + 1e-9, 0.5 - 1e-9)
    row = check_theorem1_pair(p_R, t(1.0, 0.0), p_d2)
    assert row.eps2 < RATIO_MIN_EPS2 and math.isnan(row.ratio_gated)
    assert row.passed_gated and row.passed_ungated and row.passed_lemma


@pytest.mark.parametrize(("n", "vocab"), [(0, 4), (3, 1), (True, 4)])
def test_bad_arguments(n, vocab):
    with pytest.raises(LoopcertError):
        check_theorem1_random(n, seed=0, vocab=vocab)
    with pytest.raises(LoopcertError, match="no .* triples"):
        check_theorem1_cases([])
