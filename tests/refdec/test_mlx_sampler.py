"""refdec's "filters-first" law against mlx-lm's own sampler functions (mlx_lm.sample_utils of
mlx-lm 0.32.2): the set apply_top_p then apply_top_k keep, and make_sampler's draws. Marked `mlx`:
`tox -e mlx` runs it (mlx[cpu] 0.32.4, constraints-mlx.txt); elsewhere it skips without mlx, unless
LOOPCERT_REQUIRE_MLX=1 (which tox -e mlx sets) makes a missing mlx an error.

mlx computes in float32 and refdec in float64: the kept sets must be equal, except for tokens
at the nucleus's edge, whose float64 mass ranked before them lies within float32's rounding of
a V-term sum (V x 2^-24) of top_p: mlx's float32 cumsum may cut a near-uniform law of 65,536
tokens a few tokens earlier or later (the test counts how often; never on 50 or 1,000 tokens).
The laws are compared to float32's precision (TV < 1e-4: mlx's exp of logits / T in float32).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mlx_models import require_mlx

pytestmark = pytest.mark.mlx
require_mlx()

import mlx.core as mx  # noqa: E402
from mlx_lm import sample_utils  # noqa: E402

from proofs.stats.chisquare import chisquare_gof  # noqa: E402
from refdec.sampling import FILTERS_FIRST, SamplingParams, kept_filters_first, transform  # noqa: E402

PARAMS = [  # (temperature, top_k, top_p): mlx's make_sampler(temp, top_p, top_k=...)
    (0.7, None, 0.9),
    (1.5, None, 0.5),
    (0.3, None, 0.95),
    (1.0, 5, None),
    (2.0, 40, 0.8),
    (0.8, 3, 0.99),
]


def mlx_kept(logits32: np.ndarray, top_k, top_p) -> np.ndarray:
    """Token ids mlx-lm keeps: its sampler's chain on log-probabilities (make_sampler applies
    apply_top_p, then apply_top_k; min_p and XTC off)."""
    x = mx.array(logits32[None])
    lp = x - mx.logsumexp(x, axis=-1, keepdims=True)  # what generate_step hands the sampler
    if top_p is not None:
        lp = sample_utils.apply_top_p(lp, top_p)
    if top_k is not None:
        lp = sample_utils.apply_top_k(lp, top_k)
    return np.flatnonzero(np.isfinite(np.array(lp[0])))


def at_the_edge(logits32: np.ndarray, top_p, tokens) -> bool:
    """Every token in `tokens` has float64 mass ranked before it within V x 2^-24 of top_p (the
    float32 rounding of mlx's cumsum over V terms at most)."""
    if top_p is None:
        return not len(tokens)
    p = torch.softmax(torch.from_numpy(logits32).double(), -1).numpy()
    order = np.argsort(-p, kind="stable")
    before = np.empty_like(p)
    before[order] = np.cumsum(p[order]) - p[order]
    return bool(np.all(np.abs(before[list(tokens)] - top_p) <= p.size * 2.0**-24))


@pytest.mark.parametrize("V", [50, 1000, 65536])
def test_the_kept_set_and_law_are_mlx_lm_s(V):
    rng = np.random.default_rng(V)
    equal = compared = 0
    for trial in range(30):
        logits32 = (rng.standard_normal(V) * [0.5, 2.0, 6.0][trial % 3]).astype(np.float32)
        x = torch.from_numpy(logits32)
        for t, k, top_p in PARAMS:
            p = SamplingParams(t, top_k=k, top_p=top_p, order=FILTERS_FIRST)
            ours = set(kept_filters_first(torch.softmax(x.double(), -1), p).tolist())
            kept = mlx_kept(logits32, k, top_p)
            differ = ours ^ set(kept.tolist())
            assert at_the_edge(logits32, top_p, differ), (V, trial, p, sorted(differ)[:5])
            equal += not differ
            compared += 1
            if differ:
                continue
            law = transform(x, p)
            masked = np.full(V, -np.inf, dtype=np.float32)
            masked[kept] = logits32[kept]
            # mlx's categorical_sampling: categorical(logprobs * (1 / temp)) = softmax of that
            theirs = np.array(mx.softmax(mx.array(masked) * (1.0 / t)))
            assert 0.5 * np.abs(law.numpy() - theirs).sum() < 1e-4, (V, trial, p)  # float32 exp of x/T
    assert equal == compared if V <= 1000 else equal >= 0.8 * compared, (equal, compared)


def test_make_sampler_draws_refdec_s_filters_first_law_not_the_temperature_first_one():
    """make_sampler's whole chain, drawn 40,000 times in one batch (mx.random.seed 0), against
    refdec's laws by chi-square at level 1e-4: the filters-first law passes, and the
    temperature-first law of the same parameters (TV 0.14 from it: it keeps a fifth token) must be
    rejected (power ~1: the noncentrality is at least 40,000 x 4 x 0.14^2 ~ 3,000)."""
    logits32 = np.log(np.array([0.30, 0.22, 0.16, 0.12, 0.08, 0.06, 0.04, 0.02], dtype=np.float32))
    t, k, top_p = 2.0, 7, 0.75
    n = 40_000
    mx.random.seed(0)
    sampler = sample_utils.make_sampler(temp=t, top_p=top_p, top_k=k)
    x = mx.array(np.tile(logits32, (n, 1)))
    draws = np.array(sampler(x - mx.logsumexp(x, axis=-1, keepdims=True)))
    counts = np.bincount(draws, minlength=8)
    ff = transform(torch.from_numpy(logits32), SamplingParams(t, top_k=k, top_p=top_p, order=FILTERS_FIRST))
    tf = transform(torch.from_numpy(logits32), SamplingParams(t, top_k=k, top_p=top_p))
    assert 0.5 * float((ff - tf).abs().sum()) > 0.13  # the control differs by this much
    assert chisquare_gof(counts, ff.numpy())["p_value"] > 1e-4
    assert chisquare_gof(counts, tf.numpy())["p_value"] < 1e-4
