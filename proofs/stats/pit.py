"""The per-position test on long samples: the randomized probability-integral transform of every
sampled token under the reference's exact law at its position (docs/design.md section 7, "The
per-position test").

For a token x drawn at position t, with p the reference's law there (the plan's SamplingParams on
refdec's logits given the sample's own prefix), rank the vocabulary by descending p (ties: the lower
id first), let F(x-) be the mass ranked strictly before x, and draw v ~ U(0, 1) from a stream of
its own (`uniforms`: never the decoder's):

    U = F(x-) + v p(x)

If the decoder samples p, U is U(0, 1) given the whole past (x falls in the interval [F(x-),
F(x-) + p(x)) of length p(x) with probability p(x), and v spreads it uniformly inside), so the U of
every position of every sample are independent uniforms (the Rosenblatt transform), whatever the
prefix and the vocabulary. Strata (`position_bands` between boundaries, each split at an entropy
threshold into a low and a high half) are functions of the past, so the U of one stratum are
still independent uniforms. Each stratum's U are counted into B equal bins and tested against
uniform with `chisquare_gof`; Holm across the strata; power from `detectable_tv` over B equal
bins at the Holm level, as the sampling check states its own.

Blind spots, by construction: a swap between tokens of equal reference probability moves no U
(the transform sees the law only through the ranks' masses); mass moved inside one bin of one
stratum; deviations of opposite sign that cancel inside a stratum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from proofs.stats.chisquare import chisquare_gof, detectable_tv, holm, required_samples
from refdec.config import ModelConfig
from refdec.errors import LoopcertError

PIT_STREAM = 0x504954  # "PIT": the uniforms' seed sequence is (PIT_STREAM, seed), apart from any decoder's
ROW_CHUNK = 1 << 22  # elements of one (rows, V) slab while ranking (64 rows at V = 65,536)
HALVES = ("low", "high")  # entropy <= the band's threshold, and above it


def uniforms(seed: int, n: int) -> np.ndarray:
    """(n,) float64 U(0, 1): the transform's v for the n positions of the sample of `seed`. numpy's
    PCG64 seeded by (PIT_STREAM, seed): independent of the decoder, which draws from its own
    generator (torch.Generator(seed) for fastdec), and the same on every machine."""
    return np.random.default_rng([PIT_STREAM, int(seed)]).random(int(n))


def randomized_pit(laws: np.ndarray, tokens: Sequence[int], v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(U, p(token)) at each of n positions: laws (n, V) float64, tokens (n,), v (n,) in [0, 1).

    The mass ranked strictly before token x: tokens of larger probability, and tokens of equal
    probability with a lower id. U is clipped below 1 (a sum of V terms may round past it)."""
    laws = np.asarray(laws, dtype=np.float64)
    tokens = np.asarray(tokens, dtype=np.int64)
    n, V = laws.shape
    if tokens.shape != (n,) or np.shape(v) != (n,):
        raise LoopcertError(f"randomized_pit: laws {laws.shape}, tokens {tokens.shape}, v {np.shape(v)}")
    if n and (tokens.min() < 0 or tokens.max() >= V):
        bad = f"{tokens.min()}..{tokens.max()}"
        raise LoopcertError(f"randomized_pit: token ids must be in [0, {V}), got {bad}")
    p = laws[np.arange(n), tokens]  # (n,)
    before = np.empty(n)
    ids = np.arange(V)
    step = max(1, ROW_CHUNK // max(1, V))
    for i in range(0, n, step):
        rows, px, x = laws[i : i + step], p[i : i + step, None], tokens[i : i + step, None]
        ranked = (rows > px) | ((rows == px) & (ids[None, :] < x))  # (rows, V)
        before[i : i + step] = np.where(ranked, rows, 0.0).sum(axis=1)
    u = before + np.asarray(v, dtype=np.float64) * p
    return np.minimum(u, np.nextafter(1.0, 0.0)), p


def entropies(laws: np.ndarray) -> np.ndarray:
    """(n,) Shannon entropy in nats of each row of (n, V) laws (0 log 0 = 0)."""
    laws = np.asarray(laws, dtype=np.float64)
    logs = np.log(np.where(laws > 0, laws, 1.0))
    return -(laws * logs).sum(axis=1)


def pit_bin_law(p: np.ndarray, q: np.ndarray, bins: int) -> np.ndarray:
    """(bins,) the law of U's bin when the token is drawn from q while the transform ranks by p (one
    position, p and q (V,) laws): uniform (1/bins each) when q = p. Each token x spreads q(x) evenly
    over its interval [F(x-), F(x-) + p(x)); a token with q(x) > 0 = p(x) has no interval (it is an
    impossible sample) and is refused. What a wrong law shifts, as the test bins it."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if np.any((q > 0) & (p <= 0)):
        raise LoopcertError("pit_bin_law: q puts mass where p has none (impossible samples)")
    order = np.lexsort((np.arange(p.size), -p))  # descending p, ties by the lower id
    ps, qs = p[order], q[order]
    live = ps > 0
    ps, qs = ps[live], qs[live]
    starts = np.concatenate([[0.0], np.cumsum(ps)[:-1]])
    edges = np.linspace(0.0, 1.0, bins + 1)
    # G(e) = P(U < e) = sum_x q(x) clip((e - start_x) / p_x, 0, 1)
    g = (qs[None, :] * np.clip((edges[:, None] - starts[None, :]) / ps[None, :], 0.0, 1.0)).sum(axis=1)
    g[-1] = qs.sum()
    return np.diff(g)


# -- the strata -----------------------------------------------------------------------------------


def default_boundaries(cfg: ModelConfig, horizon: int) -> list[int]:
    """The boundaries this test bands positions by when the run hands it none: a ladder of powers
    of two up to `horizon`, and every window and length of the model's config (LoopCoder's
    `loop_window_size`, RoPE scaling's original length, max_seq_len) within it. Sorted, distinct.
    (proofs/boundaries.py collects the run's boundaries from the config, the decoder and
    the server; the check takes whichever list it is given: this one is the fallback.)"""
    out = {2**k for k in range(0, max(1, int(horizon)).bit_length()) if 2**k <= horizon}
    if cfg.loop_window_size:
        out.add(cfg.loop_window_size)
        out.add(2 * cfg.loop_window_size)  # the wrap after the wrap
    if cfg.rope_scaling is not None:
        out.add(cfg.rope_scaling.original_max_position_embeddings)
    out.add(cfg.max_seq_len)
    return sorted(b for b in out if 1 <= b <= horizon)


def position_bands(
    boundaries: Sequence[int], start: int, end: int, min_width: int
) -> tuple[list[tuple[int, int]], list[int]]:
    """The position bands [lo, hi) that cover [start, end) (a token's position: its 0-based index in
    prompt + continuation, the tokens the decoder held when it drew it), cut at the boundaries
    strictly inside, and the boundaries inside that are not band edges.

    A band narrower than `min_width` positions cannot hold enough tokens for the test's power, so a
    boundary is a cut only when the band it closes and the rest after it are both at least
    min_width wide; the earliest boundaries are kept first (a ladder's small rungs give way)."""
    if not 0 <= start < end:
        raise LoopcertError(f"position_bands: need 0 <= start < end, got {start}, {end}")
    inside = sorted({int(b) for b in boundaries if start < int(b) < end})
    cuts, left_out, last = [], [], start
    for b in inside:
        if b - last >= min_width and end - b >= min_width:
            cuts.append(b)
            last = b
        else:
            left_out.append(b)
    edges = [start, *cuts, end]
    return list(zip(edges[:-1], edges[1:], strict=True)), left_out


def band_index(positions: np.ndarray, bands: Sequence[tuple[int, int]]) -> np.ndarray:
    """(n,) the band of each position (-1: outside every band)."""
    out = np.full(len(positions), -1, dtype=np.int64)
    for i, (lo, hi) in enumerate(bands):
        out[(positions >= lo) & (positions < hi)] = i
    return out


def entropy_thresholds(
    positions: np.ndarray, entropy: np.ndarray, bands: Sequence[tuple[int, int]]
) -> list[float]:
    """Per band, the median entropy of the pilot sample's laws in it (its positions and their
    laws' entropies): the low half of a band is entropy <= it. The pilot is a sample of its own, not
    tested, so the thresholds are independent of the tested samples and every stratum keeps its
    level; splitting at its median keeps the halves about equal. A band the pilot did not reach:
    threshold inf (every token low)."""
    idx = band_index(np.asarray(positions), bands)
    return [float(np.median(entropy[idx == i])) if np.any(idx == i) else math.inf for i in range(len(bands))]


def stratum_index(
    positions: np.ndarray, entropy: np.ndarray, bands: Sequence[tuple[int, int]], thresholds: Sequence[float]
) -> np.ndarray:
    """(n,) stratum 2 * band + half of each position (half 0 low, 1 high; -1: outside every band)."""
    b = band_index(np.asarray(positions), bands)
    high = np.asarray(entropy) > np.asarray(list(thresholds) + [math.inf])[b]
    return np.where(b >= 0, 2 * b + high, -1)


# -- the test -------------------------------------------------------------------------------------


def uniform_bins(bins: int) -> list[float]:
    return [1.0 / bins] * bins


def bin_counts(u: np.ndarray, bins: int) -> np.ndarray:
    """(bins,) counts of U in the equal bins [k / bins, (k + 1) / bins)."""
    k = np.minimum((np.asarray(u) * bins).astype(np.int64), bins - 1)
    return np.bincount(k, minlength=bins)


def needed_per_stratum(tv: float, bins: int, alpha_test: float, power: float) -> int:
    """Tokens one stratum needs to detect a binned TV >= tv of U with probability >= power at level
    alpha_test (required_samples over `bins` equal bins), and at least 5 per bin (chisquare_gof
    pools a bin expected fewer times)."""
    return max(required_samples(tv, uniform_bins(bins), alpha_test, power), 5 * bins)


@dataclass(frozen=True)
class StratumTest:
    """One stratum's chi-square against uniform; Holm has not judged it (see `judge`)."""

    n: int
    counts: tuple[int, ...]
    stat: float | None  # None: fewer than 5 per bin expected, no test
    p_value: float
    detectable_tv: float  # at the Holm level and power (inf: no test)
    empirical_tv: float | None  # binned TV of the counts from uniform


def stratum_test(counts: np.ndarray, alpha_test: float, power: float | None) -> StratumTest:
    """The chi-square of one stratum's bin counts against uniform (none below 5 per bin expected);
    power None: its detectable TV is not computed (inf; simulations that need only p-values)."""
    counts = np.asarray(counts, dtype=np.int64)
    bins, n = counts.size, int(counts.sum())
    if n < 5 * bins:
        return StratumTest(n, tuple(counts.tolist()), None, 1.0, math.inf, None)
    g = chisquare_gof(counts, uniform_bins(bins))
    tv = math.inf if power is None else detectable_tv(n, uniform_bins(bins), alpha_test, power)
    emp = 0.5 * float(np.abs(counts / n - 1.0 / bins).sum())
    return StratumTest(n, tuple(counts.tolist()), g["stat"], g["p_value"], tv, emp)


def judge(tests: Sequence[StratumTest], alpha: float) -> list[bool]:
    """Holm across the strata at family-wise level alpha: which are rejected."""
    return holm([t.p_value for t in tests], alpha) if tests else []


# how far above its nominal level the test's real level must be shown to lie before a run fails on
# it: a binomial tail against the level itself fails a sound test in about 1 run in 200 at some
# stratum sizes (the multinomial's discreteness: vLLM's plain server failed so, 133 of 2,000 at 0.05,
# tail 7e-4, where 200 seeds of the same sizes give 97.6 on average), so the tail is taken against
# LEVEL_MARGIN x the level: a run fails when its real level is, with confidence 1 - 1e-3, above 1.5x
LEVEL_MARGIN = 1.5


def simulate_false_alarms(
    sizes: Sequence[int], bins: int, alpha: float, replicates: int, seed: int, second_level: float = 0.05
) -> dict:
    """The test's real level at these stratum sizes, by simulation: `replicates` lossless runs,
    each stratum's bin counts drawn as a lossless decoder gives them (its U independent uniforms:
    the module docstring; binned, a multinomial over equal bins), through the same chi-square (no
    test below 5 per bin) and Holm (it rejects some stratum iff the smallest p-value is <= level /
    strata). Returns the rejections at alpha and at second_level, and each count's binomial tail
    P(at least that many | a real level of LEVEL_MARGIN x the level): the chi-square is asymptotic,
    so its level is measured, and a small tail shows it well above the nominal."""
    rng = np.random.default_rng([PIT_STREAM, int(seed), int(replicates)])
    m = max(1, len(sizes))
    smallest = np.ones(replicates)
    for n in sizes:
        if n < 5 * bins:
            continue
        c = rng.multinomial(n, uniform_bins(bins), size=replicates)  # (replicates, bins)
        e = n / bins
        stat = ((c - e) ** 2 / e).sum(axis=1)
        smallest = np.minimum(smallest, stats.chi2.sf(stat, bins - 1))
    out = {"replicates": int(replicates), "strata": m}
    for key, level in (("", alpha), ("_second_level", second_level)):
        rej = int((smallest <= level / m).sum())
        out[f"level{key}"] = float(level)
        out[f"rejections{key}"] = rej
        out[f"tail_p{key}"] = float(stats.binom.sf(rej - 1, replicates, min(1.0, LEVEL_MARGIN * level)))
    return out
