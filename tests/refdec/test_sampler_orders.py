"""The two sampler conventions (refdec.sampling.SAMPLER_ORDERS): filters-first's law on constructed
cases, against an independent whole-vocabulary reference, and the claim that top-k alone (no
top-p) gives the same law under both orders."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from logit_laws import filter_settings, spread_logits
from tolerances import approx

from refdec.errors import LoopcertError
from refdec.sampling import (
    FILTERS_FIRST,
    SAMPLER_ORDERS,
    TEMPERATURE_FIRST,
    SamplingParams,
    filter_probs,
    kept_filters_first,
    transform,
)


def logits_of(probs):
    return torch.log(torch.tensor(probs, dtype=torch.float64))


def ff(t, **kw):
    return SamplingParams(temperature=t, order=FILTERS_FIRST, **kw)


def test_orders_are_named_and_a_bad_one_is_refused_by_name():
    assert SAMPLER_ORDERS == ("temperature-first", "filters-first")
    assert SamplingParams(1.0).order == TEMPERATURE_FIRST
    for bad in ("mlx", "", None, 1):
        with pytest.raises(LoopcertError, match=r"order.*temperature-first, filters-first.*" + repr(bad)[:3]):
            SamplingParams(1.0, top_p=0.5, order=bad)
    with pytest.raises(LoopcertError, match="'Filters-First'"):
        SamplingParams(1.0).with_order("Filters-First")
    assert SamplingParams(1.0, top_p=0.5).with_order(FILTERS_FIRST) == ff(1.0, top_p=0.5)


def test_filters_first_nucleus_is_judged_at_temperature_one_then_tempered():
    """p = (0.5, 0.2, 0.25, 0.05), T = 2, top_p = 0.5. At T = 1 token 0 alone reaches 0.5 (the
    mass before token 2 is 0.5, not < 0.5): filters-first keeps {0}. At T = 2 the law is
    proportional to sqrt(p): token 0 has 0.3765 < 0.5, so temperature-first keeps {0, 2}."""
    x = logits_of([0.5, 0.2, 0.25, 0.05])
    assert transform(x, ff(2.0, top_p=0.5)).tolist() == [1.0, 0.0, 0.0, 0.0]
    s = math.sqrt(0.5) + math.sqrt(0.25)
    assert transform(x, SamplingParams(2.0, top_p=0.5)).tolist() == approx(
        [math.sqrt(0.5) / s, 0.0, math.sqrt(0.25) / s, 0.0]
    )
    # top_p 0.51: filters-first keeps {0, 2}, then divides their logits by T = 2
    assert transform(x, ff(2.0, top_p=0.51)).tolist() == approx(
        [math.sqrt(0.5) / s, 0.0, math.sqrt(0.25) / s, 0.0]
    )


def test_filters_first_top_p_comparison_is_strict_like_mlx():
    """Kept iff the mass ranked before it is < top_p (mlx: dropped iff mass_above >= top_p)."""
    probs = [0.5, 0.2, 0.25, 0.05]
    keep = lambda top_p: (transform(logits_of(probs), ff(1.0, top_p=top_p)) > 0).tolist()
    assert keep(0.5) == [True, False, False, False]
    assert keep(0.51) == [True, False, True, False]
    assert keep(0.75) == [True, False, True, False]
    assert keep(0.76) == [True, True, True, False]


def test_filters_first_keeps_every_token_tied_with_the_last_of_the_nucleus():
    """mlx cuts at a logprob threshold: a tie at the nucleus boundary is kept whole (temperature-
    first keeps exactly the smallest nucleus, lower id first)."""
    x = logits_of([0.3, 0.3, 0.2, 0.2])
    assert (transform(x, ff(1.0, top_p=0.25)) > 0).tolist() == [True, True, False, False]
    assert (transform(x, SamplingParams(1.0, top_p=0.25)) > 0).tolist() == [True, False, False, False]
    x = logits_of([0.2, 0.4, 0.4])
    assert transform(x, ff(1.0, top_p=0.4)).tolist() == approx([0.0, 0.5, 0.5])


def test_filters_first_top_k_after_top_p_and_exactly_k_on_ties():
    x = logits_of([0.1, 0.3, 0.3, 0.3])
    assert transform(x, ff(1.0, top_k=2)).tolist() == approx([0.0, 0.5, 0.5, 0.0])  # lower ids
    # top_p 0.7 keeps {1, 2, 3} (0.6 before token 3 < 0.7), top-k 2 then the two lower ids
    assert transform(x, ff(1.0, top_k=2, top_p=0.7)).tolist() == approx([0.0, 0.5, 0.5, 0.0])
    # top-k larger than the nucleus: the nucleus
    y = logits_of([0.6, 0.3, 0.1])
    assert (transform(y, ff(1.0, top_k=3, top_p=0.5)) > 0).tolist() == [True, False, False]


def test_filters_first_top_p_one_is_no_filter_and_greedy_is_argmax():
    x = torch.tensor([0.0, -700.0, 2.0, 1.0], dtype=torch.float64)  # token 1's mass below 1e-300
    assert bool((transform(x, ff(1.0, top_p=1.0)) > 0).all())  # mlx applies top-p only for top_p < 1
    assert transform(x, ff(0.0, top_p=0.3, top_k=1)).tolist() == [0.0, 0.0, 1.0, 0.0]


def reference_filters_first(x: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """The filters-first law written out plainly (one stable sort of the whole vocabulary, the
    mlx steps in order): the reference refdec's ranked-head version must equal."""
    ones = torch.softmax(x.to(torch.float64), -1)
    vals, order = torch.sort(ones, descending=True, stable=True)
    keep = torch.ones_like(vals, dtype=torch.bool)
    if p.top_p is not None and p.top_p < 1:
        before = torch.cumsum(vals, -1) - vals
        n = int((before < p.top_p * ones.sum()).sum())
        keep = vals >= vals[n - 1]
    if p.top_k is not None:
        keep &= torch.cumsum(keep.long(), -1) <= p.top_k
    kept = order[keep]
    tempered = torch.softmax(x.to(torch.float64) / p.temperature, -1)
    out = torch.zeros_like(tempered)
    out[kept] = tempered[kept]
    return out / out.sum()


@pytest.mark.parametrize("V", [13, 1500, 65536])
@pytest.mark.parametrize("spread", [0.3, 3.0, 30.0])
def test_filters_first_equals_the_whole_vocabulary_reference(V, spread):
    _, laws = spread_logits(V, spread)
    for logits in laws:
        for params in filter_settings(V, FILTERS_FIRST):
            got, want = transform(logits, params), reference_filters_first(logits, params)
            assert torch.equal(got > 0, want > 0), (V, spread, params)
            assert torch.allclose(got, want, rtol=1e-12, atol=1e-300), (V, spread, params)


@given(
    st.lists(st.floats(-20, 20), min_size=1, max_size=12),
    st.floats(0.05, 5.0),
    st.integers(1, 12),
)
def test_top_k_alone_is_the_same_law_under_both_orders(xs, t, k):
    """Dividing every logit by the same T > 0 keeps their ranking, so top-k keeps the same k
    tokens (lower id first on a tie, both orders) at T and at 1, and both laws are the tempered
    law renormalised on them: equal up to rounding. Likewise with no filter at all."""
    x = torch.tensor(xs, dtype=torch.float64)
    a = transform(x, SamplingParams(t, top_k=k))
    b = transform(x, ff(t, top_k=k))
    assert torch.equal(a > 0, b > 0)
    assert float((a - b).abs().sum()) < 1e-12
    assert torch.equal(transform(x, SamplingParams(t)), transform(x, ff(t)))
    assert not SamplingParams(t, top_k=k).order_matters and SamplingParams(t, top_p=0.5).order_matters


def test_batched_filters_first_rows_are_the_rows_alone_and_filter_probs_refuses():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 300, generator=g).float() * 3
    p = ff(0.8, top_k=30, top_p=0.7)
    rows = transform(x, p)
    for i in range(5):
        assert torch.equal(rows[i], transform(x[i], p))
    assert torch.equal(
        kept_filters_first(torch.softmax(x[0].double(), -1), p).sort().values,
        torch.nonzero(rows[0] > 0).squeeze(-1),
    )
    with pytest.raises(LoopcertError, match="filters-first"):
        filter_probs(torch.softmax(x[0].double(), -1), p)
