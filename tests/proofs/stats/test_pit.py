"""The per-position test's statistics (proofs/stats/pit.py, docs/design.md section 7): the randomized
probability-integral transform, its strata, its level (false alarms by simulation of lossless
draws) and its stated power (by simulation of the least visible deviation)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from proofs.stats import pit
from proofs.stats.chisquare import holm
from refdec.config import get_preset
from refdec.errors import LoopcertError

V = 13
BINS = 10

# -- the transform --------------------------------------------------------------------------------


def test_transform_ranks_by_descending_probability_ties_by_lower_id():
    p = np.array([[0.1, 0.3, 0.3, 0.0, 0.3]])
    # ranked: 1 (0.3), 2 (0.3), 4 (0.3), 0 (0.1); token 3 has no mass
    for tok, before in ((1, 0.0), (2, 0.3), (4, 0.6), (0, 0.9)):
        u, px = pit.randomized_pit(p, [tok], np.array([0.5]))
        assert u[0] == pytest.approx(before + 0.5 * p[0, tok])
        assert px[0] == p[0, tok]
    u, px = pit.randomized_pit(p, [3], np.array([0.5]))
    assert px[0] == 0.0  # an impossible sample: the check fails on it


def test_transform_stays_below_one_and_refuses_bad_ids():
    p = np.full((1, 3), 1 / 3)
    u, _ = pit.randomized_pit(p, [2], np.array([1.0 - 1e-17]))
    assert 0 <= u[0] < 1
    with pytest.raises(LoopcertError, match=r"token ids must be in \[0, 3\)"):
        pit.randomized_pit(p, [3], np.array([0.5]))


def test_uniforms_are_seeded_and_apart_from_each_other():
    a, b = pit.uniforms(7, 100), pit.uniforms(7, 100)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, pit.uniforms(8, 100))


def test_bin_law_is_uniform_at_the_reference_and_moves_with_a_wrong_law():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(V))
    assert pit.pit_bin_law(p, p, BINS) == pytest.approx(np.full(BINS, 0.1))
    hot = p**0.5 / (p**0.5).sum()  # a higher temperature: fewer top tokens, so fewer small U
    law = pit.pit_bin_law(p, hot, BINS)
    assert law.sum() == pytest.approx(1.0)
    assert law[0] < 0.1 < law[-1]
    with pytest.raises(LoopcertError, match="impossible"):
        pit.pit_bin_law(np.array([1.0, 0.0]), np.array([0.5, 0.5]), BINS)


# -- lossless draws: a chain whose law depends on the prefix --------------------------------------


def chain_laws(seed: int) -> np.ndarray:
    """(2, V, V) next-token laws by (regime, previous token): ties and zeros included, so the
    transform's tie rule and the support both matter."""
    rng = np.random.default_rng(seed)
    laws = rng.dirichlet(np.full(V, 0.5), size=(2, V))
    laws[:, :, 3] = laws[:, :, 4]  # a tie between tokens 3 and 4 at every prefix
    laws[:, :, 7] = 0.0  # token 7 is never drawn
    return laws / laws.sum(axis=-1, keepdims=True)


def draw_chains(laws: np.ndarray, runs: int, n: int, rng, regime_from: int = 10**9, hot: float = 1.0):
    """(runs, n) tokens and (runs, n, V) the reference laws they were judged under: position t draws
    from laws[t >= n // 2, previous token]; from `regime_from` on the draws are made at temperature
    `hot` (the reference law stays): a decoder lossy past a position."""
    tokens, refs = np.zeros((runs, n), dtype=np.int64), np.zeros((runs, n, V))
    prev = np.zeros(runs, dtype=np.int64)
    for t in range(n):
        ref = laws[int(t >= n // 2)][prev]  # (runs, V)
        law = ref
        if t >= regime_from:
            law = ref**hot
            law = law / law.sum(axis=1, keepdims=True)
        x = (rng.random(runs)[:, None] > np.cumsum(law, axis=1)).sum(axis=1)
        x = np.minimum(x, V - 1)
        tokens[:, t], refs[:, t] = x, ref
        prev = x
    return tokens, refs


def pipeline_rejections(runs: int, n: int, seed: int, level: float, **drift) -> tuple[int, list[float]]:
    """How many of `runs` lossless (or drifted) runs the whole test rejects at `level`: the transform
    of every token, bands at 64 and 128 (min width 32), entropy halves from a pilot run, chi-square
    per stratum, Holm; also every transform of the first run (for a KS check)."""
    rng = np.random.default_rng(seed)
    laws = chain_laws(seed)
    tokens, refs = draw_chains(laws, runs + 1, n, rng, **drift)  # run 0: the pilot
    positions = 40 + np.arange(n)
    bands, _ = pit.position_bands([64, 128], 40, 40 + n, 32)
    thresholds = pit.entropy_thresholds(positions, pit.entropies(refs[0]), bands)
    rejected, first = 0, []
    for r in range(1, runs + 1):
        u, p = pit.randomized_pit(refs[r], tokens[r], rng.random(n))
        assert np.all(p > 0)
        if r == 1:
            first = list(u)
        band = pit.band_index(positions, bands)
        stratum = pit.stratum_index(positions, pit.entropies(refs[r]), bands, thresholds)
        tests = []
        for b in range(len(bands)):
            for sel in (band == b, stratum == 2 * b, stratum == 2 * b + 1):
                tests.append(pit.stratum_test(pit.bin_counts(u[sel], BINS), level, None).p_value)
        rejected += any(holm(tests, level))
    return rejected, first


def test_lossless_transforms_are_uniform():
    _, u = pipeline_rejections(1, 4000, seed=1, level=0.05)
    assert sps.kstest(u, "uniform").pvalue > 0.01


def test_false_alarm_rate_of_the_whole_test_on_lossless_draws():
    """Lossless draws through the whole test (transform, bands, pilot's entropy halves, chi-square,
    Holm): 400 runs of 200 tokens each, at level 0.05. The count must be plausible for
    Binomial(400, <= 0.05): P(at least that many) >= 1e-3, i.e. at most 33 (rate <= 0.083)."""
    runs = 400
    rejected, _ = pipeline_rejections(runs, 200, seed=2, level=0.05)
    assert sps.binom.sf(rejected - 1, runs, 0.05) >= 1e-3, rejected
    assert rejected >= 1  # a test that never rejects at 0.05 over 400 runs has lost its level the other way


def test_a_drift_past_a_position_is_rejected():
    """The same test on runs of 2,000 tokens drawn hotter (T x 1.5) from token 1,000 on: rejected in
    most runs (a lossless run of that length is rejected with probability about 1e-3)."""
    rejected, _ = pipeline_rejections(20, 2000, seed=3, level=1e-3, regime_from=1000, hot=1 / 1.5)
    assert rejected >= 18, rejected


def test_simulated_false_alarms_are_plausible_and_count_holm_over_all_strata():
    sim = pit.simulate_false_alarms([600, 300, 300, 900, 40], BINS, 1e-3, 4000, seed=0)
    assert sim["strata"] == 5 and sim["replicates"] == 4000
    assert sim["tail_p"] >= 1e-3 and sim["tail_p_second_level"] >= 1e-3
    assert 100 < sim["rejections_second_level"] < 300  # about 0.05 x 4000


def test_stated_power_holds_by_simulation():
    """At the N `needed_per_stratum` plans, the least visible deviation of TV 0.15 (mass moved from
    half the bins to the other half in proportion: kappa = 4) is rejected with probability >= 0.99
    (the non-central chi-square model; measured on 400 draws: at least 392 rejections)."""
    tv, alpha = 0.15, 1e-3 / 9
    n = pit.needed_per_stratum(tv, BINS, alpha, 0.99)
    law = np.full(BINS, 0.1)
    law[: BINS // 2] += 2 * tv / BINS
    law[BINS // 2 :] -= 2 * tv / BINS
    assert 0.5 * np.abs(law - 0.1).sum() == pytest.approx(tv)
    rng = np.random.default_rng(4)
    hits = sum(pit.stratum_test(rng.multinomial(n, law), alpha, None).p_value <= alpha for _ in range(400))
    assert hits >= 392, (n, hits)


# -- strata ---------------------------------------------------------------------------------------


def test_bands_keep_boundaries_that_leave_wide_bands():
    bands, left = pit.position_bands([1, 2, 4, 8, 16, 32, 64, 128, 256, 4096], 32, 352, 64)
    assert bands == [(32, 128), (128, 256), (256, 352)]
    assert left == [64]  # [32, 64) would be 32 wide
    assert pit.position_bands([], 5, 9, 64) == ([(5, 9)], [])
    with pytest.raises(LoopcertError):
        pit.position_bands([], 9, 9, 1)


def test_default_boundaries_are_the_ladder_and_the_configs_windows():
    cfg = get_preset("tiny-loopcoder")
    got = pit.default_boundaries(cfg, 100)
    assert {1, 2, 4, 8, 16, 32, 64} <= set(got)
    assert cfg.loop_window_size in got and 2 * cfg.loop_window_size in got
    assert all(b <= 100 for b in got) and got == sorted(set(got))


def test_strata_split_each_band_at_its_threshold():
    positions = np.array([0, 1, 2, 3, 10, 11])
    entropy = np.array([0.1, 0.5, 0.2, 0.9, 0.3, 0.4])
    bands = [(0, 4), (4, 12)]
    thresholds = pit.entropy_thresholds(positions, entropy, bands)
    assert thresholds == [pytest.approx(0.35), pytest.approx(0.35)]
    at, h = np.array([0, 1, 10, 11, 20]), np.array([0.1, 0.5, 0.3, 0.4, 0.0])
    s = pit.stratum_index(at, h, bands, thresholds)
    assert s.tolist() == [0, 1, 2, 3, -1]


def test_a_run_fails_on_its_simulated_level_only_when_it_lies_well_above_the_nominal():
    """The sizes of vLLM's plain server (672, 356, 316 at seed 0) gave 133 of 2,000 at 0.05 by
    chance (200 seeds average about 98): no failure. A chi-square 1.3x too large (a test that
    counted some tokens twice: its real level about 4x the nominal at three strata) fails it: the
    rule has power."""
    from scipy import stats

    sim = pit.simulate_false_alarms([672, 356, 316], BINS, 1e-3, 2000, seed=0)
    assert sim["rejections_second_level"] == 133 and sim["tail_p_second_level"] >= 1e-3
    assert stats.binom.sf(133 - 1, 2000, 0.05) < 1e-3  # the rule without the margin failed it
    inflated = min(1.0, 3 * stats.chi2.sf(stats.chi2.isf(0.05 / 3, BINS - 1) / 1.3, BINS - 1))
    assert inflated > 3 * 0.05
    tail = stats.binom.sf(round(inflated * 2000) - 1, 2000, pit.LEVEL_MARGIN * 0.05)
    assert tail < 1e-3
