"""Martingale evidence (proofs/stats/martingale.py): the increments are centred with their exact
variance under the law; the e-processes keep their level on lossless chains with ties and
zero-probability tokens (at any stopping time: the sup over every prefix is what is tested); they
reject temperature drifts of 1.05x, 1.1x and 0.9x at the token counts `tokens_needed` plans, as
often as `detection_probability` says; a loosened nucleus is an impossible token. Fixed seeds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from proofs.stats import martingale as mg
from proofs.stats import pit


def laws_of(rng, n: int, V: int, scale: float, ties: bool = False, zeros: bool = False) -> np.ndarray:
    """(n, V) random laws: softmax of scale x normal logits; with ties (logits rounded, so tokens
    share a probability) and zeros (a top-k of 2 to V/2 tokens kept per row)."""
    logits = rng.normal(size=(n, V)) * scale
    if ties:
        logits = np.round(logits)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    if zeros:
        k = rng.integers(2, V // 2, size=n)
        kth = -np.sort(-p, axis=1)[np.arange(n), k - 1]
        p = np.where(p >= kth[:, None], p, 0.0)
    return p / p.sum(axis=1, keepdims=True)


def draw(rng, q: np.ndarray) -> np.ndarray:
    """One token per row of (n, V) laws, by the inverse CDF."""
    u = rng.random(q.shape[0])
    return np.minimum((np.cumsum(q, axis=1) < u[:, None]).sum(axis=1), q.shape[1] - 1)


def run(rng, laws: np.ndarray, q: np.ndarray) -> list[float]:
    """The three statistics' anytime p-values over one sample of tokens drawn from q, judged by p."""
    x = draw(rng, q)
    u, px = pit.randomized_pit(laws, x, rng.random(laws.shape[0]))
    assert (px > 0).all()
    inc = mg.increments(laws, x, u)
    out = []
    for s, name in enumerate(mg.STATISTICS):
        e = mg.EProcess(name)
        e.feed(inc.d[s], inc.v[s], inc.hi[s], inc.lo[s])
        out.append(e.p_value)
    return out


def test_increments_are_centred_with_their_exact_variance():
    """Enumerating every token of each law: E_p[d] = 0 and E_p[d^2] = v for the score; the bounds
    hold over the support; the PIT moments are exact for U uniform."""
    rng = np.random.default_rng(1)
    laws = laws_of(rng, 5, 40, 3.0, ties=True, zeros=True)
    for i in range(5):
        support = np.flatnonzero(laws[i] > 0)
        rows = np.repeat(laws[i : i + 1], support.size, axis=0)
        inc = mg.increments(rows, support, np.full(support.size, 0.5))
        d, v = inc.d[0], inc.v[0][0]
        assert float((laws[i, support] * d).sum()) == pytest.approx(0.0, abs=1e-12)
        assert float((laws[i, support] * d * d).sum()) == pytest.approx(v, rel=1e-9)
        assert (d <= inc.hi[0] + 1e-12).all() and (-d <= inc.lo[0] + 1e-12).all()
    assert mg.PIT_MEAN_VAR == pytest.approx(1 / 12) and mg.PIT_SPREAD_VAR == pytest.approx(1 / 180)


def test_psi_is_bennetts_and_tends_to_the_gaussian_at_zero_bound():
    lam, c = np.array([0.5, 1.0]), np.array([2.0, 1e-15])
    assert mg.psi(lam, c)[0] == pytest.approx((math.exp(1.0) - 2.0) / 4.0)
    assert mg.psi(lam, c)[1] == pytest.approx(0.5)


@pytest.mark.parametrize(("ties", "zeros"), [(False, False), (True, True)])
def test_the_level_holds_on_lossless_chains(ties, zeros):
    """200 lossless samples of 1,000 tokens (laws spread and concentrated, with ties and zeros):
    the anytime p-value of each statistic is below 0.05 in at most 10 of them (the level; Ville's
    inequality holds at every prefix, so the e-processes are conservative: about none here)."""
    rng = np.random.default_rng([7, ties, zeros])
    rejections = np.zeros(3, dtype=int)
    for _ in range(200):
        laws = laws_of(rng, 1000, 30, rng.uniform(0.5, 4.0), ties, zeros)
        rejections += np.array(run(rng, laws, laws)) <= 0.05
    assert (rejections <= 10).all(), rejections


@pytest.mark.parametrize("factor", [1.05, 1.1, 0.9])
def test_temperature_drifts_are_caught_at_the_planned_size(factor):
    """tokens_needed plans the tokens for power 0.99 at level 1e-3 from one pilot's laws; 60 samples
    of that many tokens from the drifted sampler reject at least 57 times (0.95), and the predicted
    probability of detection at that size is at least 0.99."""
    rng = np.random.default_rng([11, int(factor * 100)])
    pilot = laws_of(rng, 400, 30, 2.0)
    x = draw(rng, pilot)
    u, _ = pit.randomized_pit(pilot, x, rng.random(400))
    null = mg.increments(pilot, x, u)
    n = mg.tokens_needed(pilot, null, 1e-3, 0.99, [factor], 10**6)
    assert mg.detection_probability(pilot, null, n, 1e-3, factor) >= 0.99
    hits = 0
    for _ in range(60):
        laws = laws_of(rng, n, 30, 2.0)
        hits += min(run(rng, laws, mg.tempered(laws, 1 / factor))) <= 1e-3
    assert hits >= 57, (n, hits)


def test_a_loosened_nucleus_draws_impossible_tokens():
    """A top-p 0.9 law sampled with top-p 0.95: tokens of reference probability 0 (the per-position
    check fails on the first)."""
    import torch

    from refdec.sampling import SamplingParams, transform

    rng = np.random.default_rng(3)
    logits = torch.tensor(rng.normal(size=(200, 50)) * 2.0)
    p = transform(logits, SamplingParams(temperature=1.0, top_p=0.9)).numpy()
    q = transform(logits, SamplingParams(temperature=1.0, top_p=0.95)).numpy()
    x = draw(rng, q)
    assert (p[np.arange(200), x] == 0).sum() > 0


def test_detectable_factors_shrink_with_tokens():
    rng = np.random.default_rng(5)
    pilot = laws_of(rng, 300, 30, 2.0)
    x = draw(rng, pilot)
    u, _ = pit.randomized_pit(pilot, x, rng.random(300))
    null = mg.increments(pilot, x, u)
    small = mg.detectable_factors(pilot, null, 2_000, 1e-3, 0.99)
    large = mg.detectable_factors(pilot, null, 20_000, 1e-3, 0.99)
    assert 1 < large[0] < small[0] and small[1] < large[1] < 1
    assert mg.mean_kl(pilot, large[0]) < mg.mean_kl(pilot, small[0])
