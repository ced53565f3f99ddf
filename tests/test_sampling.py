"""The one sampling transform: exact constructed cases, then properties."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tolerances import approx, assert_close

from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams, greedy_token, sample, sample_from, transform


def logits_of(probs):
    return torch.log(torch.tensor(probs, dtype=torch.float64))


def test_greedy_is_one_hot_argmax_lowest_index_on_ties():
    x = torch.tensor([0.0, 3.0, 1.0, 3.0])
    assert greedy_token(x) == 1
    assert transform(x, SamplingParams()).tolist() == [0.0, 1.0, 0.0, 0.0]


def test_temperature_one_is_softmax():
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    p = transform(x, SamplingParams(temperature=1.0))
    assert_close(p, torch.softmax(x, -1))


def test_temperature_divides_logits():
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    p = transform(x, SamplingParams(temperature=0.5))
    assert_close(p, torch.softmax(2 * x, -1))


def test_top_k_keeps_exactly_k_and_lower_index_wins_boundary_tie():
    p = transform(logits_of([0.1, 0.3, 0.3, 0.3]), SamplingParams(temperature=1.0, top_k=2))
    # three tokens tie for first place: the two lowest ids are kept
    assert p.tolist() == approx([0.0, 0.5, 0.5, 0.0])


def test_top_p_smallest_nucleus():
    probs = [0.5, 0.2, 0.25, 0.05]
    keep = lambda top_p: (transform(logits_of(probs), SamplingParams(1.0, top_p=top_p)) > 0).tolist()
    assert keep(0.5) == [True, False, False, False]  # 0.5 alone reaches 0.5
    assert keep(0.51) == [True, False, True, False]
    assert keep(0.75) == [True, False, True, False]
    assert keep(0.76) == [True, True, True, False]
    assert keep(1.0) == [True, True, True, True]


def test_top_p_boundary_tie_keeps_lower_index():
    p = transform(logits_of([0.2, 0.4, 0.4]), SamplingParams(1.0, top_p=0.4))
    assert p.tolist() == pytest.approx([0.0, 1.0, 0.0])


def test_top_k_then_top_p_on_the_renormalised_law():
    # top-k=2 leaves {0: 0.4, 1: 0.3} -> renormalised 4/7, 3/7; top_p=0.5 keeps token 0 only
    p = transform(logits_of([0.4, 0.3, 0.2, 0.1]), SamplingParams(1.0, top_k=2, top_p=0.5))
    assert p.tolist() == pytest.approx([1.0, 0.0, 0.0, 0.0])


@given(st.lists(st.floats(-20, 20), min_size=1, max_size=12),
       st.floats(0.05, 5.0), st.none() | st.integers(1, 12), st.none() | st.floats(0.01, 1.0))
def test_transform_is_a_law_on_a_top_ranked_set(xs, t, k, top_p):
    x = torch.tensor(xs, dtype=torch.float64)
    p = transform(x, SamplingParams(temperature=t, top_k=k, top_p=top_p))
    assert math.isclose(float(p.sum()), 1.0, rel_tol=1e-12)
    assert bool((p >= 0).all())
    kept = p > 0
    if k is not None:
        assert int(kept.sum()) <= k
    # every kept token outranks every dropped one (ties: lower index first)
    order = sorted(range(len(xs)), key=lambda i: (-xs[i], i))
    ranks = [order.index(i) for i in range(len(xs))]
    worst_kept = max(r for r, kk in zip(ranks, kept.tolist()) if kk)
    assert all(kept[i] for i in range(len(xs)) if ranks[i] <= worst_kept)


def test_sample_from_inverse_cdf_and_zero_mass():
    p = torch.tensor([0.0, 0.25, 0.0, 0.75], dtype=torch.float64)
    assert sample_from(p, 0.0) == 1
    assert sample_from(p, 0.2499) == 1
    assert sample_from(p, 0.25) == 3
    assert sample_from(p, 0.999999) == 3
    assert sample_from(torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64), 1.0 - 1e-17) == 1


def test_sample_is_reproducible_from_the_generator():
    p = torch.softmax(torch.randn(20, dtype=torch.float64), -1)
    a = [sample(p, torch.Generator().manual_seed(7)) for _ in range(3)]
    assert len(set(a)) == 1
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    assert [sample(p, g1) for _ in range(30)] != [sample(p, g2) for _ in range(30)]


@pytest.mark.parametrize("kw", [dict(temperature=-1.0), dict(temperature=float("nan")),
                                dict(top_k=0), dict(top_k=2.5), dict(top_p=0.0), dict(top_p=1.5),
                                dict(temperature=True)])
def test_bad_sampling_params_name_the_value(kw):
    with pytest.raises(LoopcertError, match=list(kw)[0]):
        SamplingParams(**kw)
