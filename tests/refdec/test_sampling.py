"""The one sampling transform: exact constructed cases, then properties."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from logit_laws import filter_settings, spread_logits
from tolerances import approx, assert_close

from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams, filter_probs, greedy_token, sample, sample_from, transform


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


@given(
    st.lists(st.floats(-20, 20), min_size=1, max_size=12),
    st.floats(0.05, 5.0),
    st.none() | st.integers(1, 12),
    st.none() | st.floats(0.01, 1.0),
)
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


@pytest.mark.parametrize(
    "kw",
    [
        dict(temperature=-1.0),
        dict(temperature=float("nan")),
        dict(top_k=0),
        dict(top_k=2.5),
        dict(top_p=0.0),
        dict(top_p=1.5),
        dict(temperature=True),
        dict(order="mlx"),
    ],
)
def test_bad_sampling_params_name_the_value(kw):
    with pytest.raises(LoopcertError, match=list(kw)[0]):
        SamplingParams(**kw)


def transform_full_sort(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The transform as first written: one stable sort of the whole vocabulary (the reference the
    ranked-head version in refdec.sampling must equal bitwise)."""
    probs = torch.softmax(logits.to(torch.float64) / params.temperature, dim=-1)
    sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    keep = torch.ones_like(sorted_p, dtype=torch.bool)
    if params.top_k is not None:
        keep[..., params.top_k :] = False
        sorted_p = torch.where(keep, sorted_p, 0.0)
        sorted_p = sorted_p / sorted_p.sum(-1, keepdim=True)
    if params.top_p is not None:
        before = torch.cumsum(sorted_p, dim=-1) - sorted_p
        keep &= before < params.top_p
        sorted_p = torch.where(keep, sorted_p, 0.0)
        sorted_p = sorted_p / sorted_p.sum(-1, keepdim=True)
    return torch.zeros_like(probs).scatter(-1, order, sorted_p)


@pytest.mark.parametrize("V", [13, 61, 1500, 20000, 65536])
@pytest.mark.parametrize("spread", [0.3, 3.0, 30.0])  # near-uniform to concentrated laws
def test_ranked_head_filter_equals_a_sort_of_the_whole_vocabulary_bitwise(V, spread):
    """top-k / top-p sort only the head that can be kept (refdec.sampling._filter); on laws from
    near-uniform (every head size fails, whole-vocabulary fallback) to concentrated, with ties
    (logits rounded to a coarse grid) at every boundary, the result is bitwise the full sort's."""
    gen, laws = spread_logits(V, spread)
    for logits in laws:
        for params in filter_settings(V):
            got, want = transform(logits, params), transform_full_sort(logits, params)
            assert torch.equal(got, want), (V, spread, params, int((got != want).sum()))
    rows = torch.randn(3, V, generator=gen, dtype=torch.float64) * spread  # (R, V): row by row
    for params in (SamplingParams(1.0, top_k=4), SamplingParams(1.0, top_p=0.9)):
        assert torch.equal(transform(rows, params), transform_full_sort(rows, params))


@pytest.mark.parametrize("V", [2, 13, 61, 256, 65536])
def test_batched_transform_rows_are_the_rows_transformed_alone_bitwise(V):
    """fastdec computes the laws of a readout call's lanes in one transform over its (n, V)
    logits (fastdec.engine.Readout): row i must be bitwise the transform of row i alone, for any
    n and any neighbours, so that a sequence's law and draws do not depend on its batch; and
    filter_probs after the temperature's softmax is the whole transform."""
    g = torch.Generator().manual_seed(V)
    for n in (1, 2, 3, 17, 64, 257):
        if n * V > 4_000_000:
            continue
        x = (torch.randn(n, V, generator=g) * [0.3, 3.0, 30.0][n % 3]).float()  # float32, as readouts
        for params in (
            SamplingParams(0.0),
            SamplingParams(1.0),
            SamplingParams(0.7, top_k=min(V, 5)),
            SamplingParams(1.3, top_p=0.8),
        ):
            rows = transform(x, SamplingParams(params.temperature))
            for i in (0, n // 2, n - 1):
                alone = transform(x[i], params)
                assert torch.equal(filter_probs(rows[i], params), alone), (n, i, params)
    # the comparison can fail: a 1% change of temperature changes the bits
    assert not torch.equal(transform(x, SamplingParams(1.0))[0], transform(x[0], SamplingParams(1.01)))


def test_sample_from_matches_the_plain_inverse_cdf():
    """sample_from's scalar fast path (searchsorted on a Python float) draws what the plain
    tensor inverse CDF draws, boundaries included (u * total exactly at a cumulative mass)."""
    g = torch.Generator().manual_seed(3)
    for t in range(300):
        V = [1, 2, 13, 256][t % 4]
        x = torch.randn(V, generator=g, dtype=torch.float64) * [0.1, 3.0, 30.0][t % 3]
        if t % 5 == 0:
            x[torch.rand(V, generator=g) < 0.5] = -math.inf
            x[0] = 0.0
        p = torch.softmax(x, 0)
        cdf = torch.cumsum(p, 0)
        us = [float(torch.rand((), generator=g, dtype=torch.float64)), 0.0, 1 - 2**-53]
        us += [float(c / cdf[-1]) for c in cdf[:3]]
        for u in us:
            at = torch.tensor([u * float(cdf[-1])], dtype=torch.float64)
            want = min(int(torch.searchsorted(cdf, at, right=True)), V - 1)
            if p[want] <= 0:
                want = int(torch.nonzero(p > 0)[-1])
            assert sample_from(p, u) == want
