"""Martingale evidence: every token of a long sample, judged under its exact reference law, summed
over positions into tests that are valid at any stopping time (docs/design.md, "Martingale
evidence"; docs/certify.md#martingale-evidence).

For a token x_t drawn at position t with the reference's exact law p_t there (the plan's
SamplingParams on refdec's float64 logits given the sample's own prefix) a statistic f_t has an
exact conditional mean mu_t = E_p[f_t] and variance v_t = Var_p[f_t]. If the decoder samples p,
the centred increments d_t = f_t(x_t) - mu_t form a martingale difference sequence, whatever the
prefixes and however they depend on each other. Three statistics:

- "score": f = log p(x), clipped below at log max p - CLIP nats. It is the score of the
  temperature family q ~ p^beta at beta = 1 (the locally most powerful test against a wrong
  temperature): a hotter sampler draws tokens of lower p, a colder one of higher p. The clip
  bounds the increment (Bennett needs a bound) and moves at most the mass of tokens e^CLIP times
  rarer than the mode.
- "pit_mean": U - 1/2, U the randomized PIT of x (proofs/stats/pit.py): exactly U(0, 1) given the
  past, so mean 0 and variance 1/12. A shift of mass toward less likely tokens moves it up.
- "pit_spread": (U - 1/2)^2 - 1/12, variance 1/180: mass moved toward both ends (the mode and the
  tail) against the middle, a spread in rank.

Each statistic is summed per stratum (a position band, and each band's entropy halves; the whole
horizon) in sample order, then position order: membership is a function of the position and of
its law, known before the token is drawn, so every stratum's sum is a martingale too.

Validity at any time (no asymptotics): for an increment d <= c with mean 0 and variance v,
Bennett's lemma gives E exp(lam d) <= exp(psi_c(lam) v), psi_c(lam) = (e^{lam c} - 1 - lam c) / c^2,
for every lam >= 0. So for each lam of a fixed grid and each sign, exp(lam S_n - sum_t psi_{c_t}(lam)
v_t) is a nonnegative supermartingale starting at 1, with c_t the increment's own bound at t (a
function of p_t alone). Their average over the grid and both signs, E_n, is one too, and Ville's
inequality gives P(sup_n E_n >= 1/a) <= a under a lossless decoder: p = 1 / sup E is a p-value
valid whenever sampling stops, so sampling may stop as soon as a test rejects (a lossy decoder fails
early) and the stratum tests combine by Holm.

What they cannot see:
- "score": a swap between tokens of equal p (no statistic of p_t(x) can); a deviation that keeps
  E log p, e.g. mass moved up at one entropy and down at another inside one stratum (the entropy
  halves split that case); mass moved among tokens rarer than e^-CLIP of the mode.
- "pit_mean" / "pit_spread": a swap between tokens of equal p; a change of the law's shape that
  keeps the first two moments of U (the binned PIT, the omnibus test, sees those).
- all three: deviations of opposite sign that cancel within a stratum over the same positions.

Power (`power_against_temperature`): under a decoder sampling q = p^beta (renormalised on p's
support) every increment has an exact mean and variance too, computed from the pilot sample's laws;
the stratum's sum is then approximately normal and rejects once it passes the smallest threshold
over the grid, so the probability of detection at a given number of tokens, and the smallest
temperature factor detected with probability `power`, follow. The plan picks the number of
samples from that (proofs/checks/positions.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from refdec.errors import LoopcertError

STATISTICS = ("score", "pit_mean", "pit_spread")
CLIP = 12.0  # nats below the mode where the score stops falling (e^-12 ~ 6e-6 of the mode's mass)
# the mixture's grid of lam, in units of 1 / the statistic's scale (SCALE): a drift of a few
# hundredths of a standard deviation per token up to one of two
ETA = tuple(2.0**k for k in range(-7, 2))
SCALE = {"score": 1.0, "pit_mean": math.sqrt(1 / 12), "pit_spread": math.sqrt(1 / 180)}
PIT_MEAN_VAR, PIT_SPREAD_VAR = 1 / 12, 1 / 180


@dataclass(frozen=True)
class Increments:
    """Per position and statistic (STATISTICS order): the centred value, its exact variance under
    the reference law, and the bounds of the centred value over the law's support (d <= hi and
    -d <= lo), all known before the token is drawn except `d`."""

    d: np.ndarray  # (3, n)
    v: np.ndarray  # (3, n)
    hi: np.ndarray  # (3, n) >= 0
    lo: np.ndarray  # (3, n) >= 0


def clipped_logs(laws: np.ndarray) -> np.ndarray:
    """(n, V) the score's f: log p clipped below at log max p - CLIP, 0 where p = 0 (never drawn)."""
    laws = np.asarray(laws, dtype=np.float64)
    logs = np.log(np.where(laws > 0, laws, 1.0))
    floor = np.log(laws.max(axis=1, keepdims=True)) - CLIP
    return np.where(laws > 0, np.maximum(logs, floor), 0.0)


def increments(laws: np.ndarray, tokens: Sequence[int], u: np.ndarray) -> Increments:
    """The three statistics' increments at each of n positions: laws (n, V) float64, the sampled
    tokens (n,) (each with p > 0: an impossible token is the caller's to count), U (n,) their
    randomized PITs."""
    laws = np.asarray(laws, dtype=np.float64)
    tokens = np.asarray(tokens, dtype=np.int64)
    n = laws.shape[0]
    if tokens.shape != (n,) or np.shape(u) != (n,):
        raise LoopcertError(f"increments: laws {laws.shape}, tokens {tokens.shape}, u {np.shape(u)}")
    f = clipped_logs(laws)  # (n, V)
    mu = (laws * f).sum(axis=1)
    var = np.maximum((laws * f * f).sum(axis=1) - mu * mu, 0.0)
    live = laws > 0
    f_max = np.where(live, f, -np.inf).max(axis=1)
    f_min = np.where(live, f, np.inf).min(axis=1)
    score = f[np.arange(n), tokens] - mu
    u = np.asarray(u, dtype=np.float64)
    d = np.stack([score, u - 0.5, (u - 0.5) ** 2 - PIT_MEAN_VAR])
    v = np.stack([var, np.full(n, PIT_MEAN_VAR), np.full(n, PIT_SPREAD_VAR)])
    hi = np.stack([np.maximum(f_max - mu, 0.0), np.full(n, 0.5), np.full(n, 0.25 - PIT_MEAN_VAR)])
    lo = np.stack([np.maximum(mu - f_min, 0.0), np.full(n, 0.5), np.full(n, PIT_MEAN_VAR)])
    return Increments(d, v, hi, lo)


def psi(lam: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Bennett's psi_c(lam) = (e^{lam c} - 1 - lam c) / c^2, lam^2 / 2 where c = 0 (its limit)."""
    lam, c = np.broadcast_arrays(np.asarray(lam, dtype=np.float64), np.asarray(c, dtype=np.float64))
    x = lam * c
    safe = np.where(c > 1e-12, c, 1.0)
    return np.where(c > 1e-12, (np.expm1(x) - x) / (safe * safe), 0.5 * lam * lam)


def grid(statistic: str) -> np.ndarray:
    return np.asarray(ETA) / SCALE[statistic]


class EProcess:
    """One statistic's e-process over one stratum: the average over the lam grid and both signs of
    exp(lam * sign * S - sum psi_{c_t}(lam) v_t), fed increments in the order they were drawn.
    `peak` is log sup E over every prefix fed so far (Ville: a p-value at any stopping time)."""

    def __init__(self, statistic: str):
        self.statistic = statistic
        self.lam = grid(statistic)  # (J,)
        self.log_m = np.zeros((2, self.lam.size))  # log of each supermartingale, (sign, lam)
        self.peak = 0.0  # log sup_n E_n (E_0 = 1)
        self.n = 0
        self.sum = 0.0  # S: the centred sum
        self.var = 0.0  # V: the predictable variance

    def feed(self, d: np.ndarray, v: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> None:
        d, v = np.asarray(d, dtype=np.float64), np.asarray(v, dtype=np.float64)
        if d.size == 0:
            return
        lam = self.lam[:, None]  # (J, 1)
        up = np.cumsum(lam * d[None, :] - psi(lam, np.asarray(hi)[None, :]) * v[None, :], axis=1)
        down = np.cumsum(-lam * d[None, :] - psi(lam, np.asarray(lo)[None, :]) * v[None, :], axis=1)
        path = np.stack([self.log_m[0][:, None] + up, self.log_m[1][:, None] + down])  # (2, J, k)
        log_e = _logmeanexp(path.reshape(-1, d.size), axis=0)  # (k,)
        self.peak = max(self.peak, float(log_e.max()))
        self.log_m = path[:, :, -1]
        self.n += int(d.size)
        self.sum += float(d.sum())
        self.var += float(v.sum())

    @property
    def p_value(self) -> float:
        """min(1, 1 / sup E): valid at any stopping time (Ville's inequality)."""
        return float(min(1.0, math.exp(-self.peak)))

    @property
    def z(self) -> float | None:
        """S / sqrt(V), the standardized sum (reported; the test is the e-process)."""
        return self.sum / math.sqrt(self.var) if self.var > 0 else None


def _logmeanexp(a: np.ndarray, axis: int) -> np.ndarray:
    m = a.max(axis=axis, keepdims=True)
    return (m + np.log(np.exp(a - m).mean(axis=axis, keepdims=True))).squeeze(axis)


# -- power against a wrong temperature --------------------------------------------------------------


def tempered(laws: np.ndarray, beta: float) -> np.ndarray:
    """(n, V) q ~ p^beta renormalised on p's support: a sampler whose temperature is 1/beta times
    the asked one (exactly so for a law without filters; with filters, on the filtered support)."""
    laws = np.asarray(laws, dtype=np.float64)
    logs = np.where(laws > 0, beta * np.log(np.where(laws > 0, laws, 1.0)), -np.inf)
    logs -= logs.max(axis=1, keepdims=True)
    q = np.exp(logs)
    return q / q.sum(axis=1, keepdims=True)


def _pit_moments(laws: np.ndarray, q: np.ndarray) -> np.ndarray:
    """(4, n): E_q[(U - 1/2)^k] for k = 1..4 when the token is drawn from q and U ranks it by p."""
    n, V = laws.shape
    order = np.lexsort((np.tile(np.arange(V), (n, 1)), -laws), axis=1)  # descending p, ties by id
    ps = np.take_along_axis(laws, order, axis=1)
    qs = np.take_along_axis(q, order, axis=1)
    a = np.cumsum(ps, axis=1) - ps - 0.5  # F(x-) - 1/2
    b = a + ps  # F(x) - 1/2
    safe = np.where(ps > 0, ps, 1.0)
    out = []
    for k in range(1, 5):
        # E[(F + V p - 1/2)^k | x] = (b^{k+1} - a^{k+1}) / ((k + 1) p)
        m = np.where(ps > 0, (b ** (k + 1) - a ** (k + 1)) / ((k + 1) * safe), 0.0)
        out.append((qs * m).sum(axis=1))
    return np.stack(out)


@dataclass(frozen=True)
class PilotMoments:
    """Per position of the pilot and statistic: the increments' mean and variance under a sampler at
    temperature factor `factor` (mean 0 and the null variance at factor 1), and the null's v, hi, lo
    (what the e-process charges)."""

    factor: float
    mean: np.ndarray  # (3, n)
    var: np.ndarray  # (3, n)


def drift_moments(laws: np.ndarray, factor: float) -> PilotMoments:
    """The increments' law at each position when the decoder samples at `factor` times the
    temperature (q = p^(1/factor) on p's support) while the test centres them under p."""
    laws = np.asarray(laws, dtype=np.float64)
    q = tempered(laws, 1.0 / factor)
    f = clipped_logs(laws)
    mu = (laws * f).sum(axis=1)
    e1 = (q * f).sum(axis=1)
    e2 = (q * f * f).sum(axis=1)
    m = _pit_moments(laws, q)  # E_q (U - 1/2)^k
    mean = np.stack([e1 - mu, m[0], m[1] - PIT_MEAN_VAR])
    var = np.stack([np.maximum(e2 - e1 * e1, 0.0), m[1] - m[0] ** 2, np.maximum(m[3] - m[1] ** 2, 0.0)])
    return PilotMoments(factor, mean, var)


def charge(null: Increments, s: int, sign: int) -> np.ndarray:
    """(J,) the mean over the pilot's positions of psi_{c_t}(lam) v_t for each lam of statistic s's
    grid: what the (lam, sign) supermartingale is charged per token of the null."""
    lam = grid(STATISTICS[s])[:, None]
    c = (null.hi if sign > 0 else null.lo)[s][None, :]
    return (psi(lam, c) * null.v[s][None, :]).mean(axis=1)


def threshold(null: Increments, s: int, sign: int, tokens: float, alpha: float) -> float:
    """The smallest |S| that makes the mixture reach 1/alpha through one (lam, sign) term over a
    stratum of `tokens` tokens like the pilot's: min over the grid of (log(2J / alpha) + tokens x
    charge) / lam. (The mixture rejects no later than that.)"""
    lam = grid(STATISTICS[s])
    cost = math.log(2 * lam.size / alpha) + tokens * charge(null, s, sign)
    return float((cost / lam).min())


def detection_probability(
    laws: np.ndarray, null: Increments, tokens: float, alpha: float, factor: float
) -> float:
    """P(some statistic's e-process over a stratum of `tokens` tokens like the pilot's positions
    reaches 1/alpha by its end) when the decoder samples at `factor` x the temperature: a normal
    approximation of each sum under that sampler, the best statistic's (a lower bound on the
    mixture's: it also has the other statistics, and every time before the end)."""
    mom = drift_moments(laws, factor)
    best = 0.0
    for s in range(len(STATISTICS)):
        mean, var = float(mom.mean[s].mean()) * tokens, float(mom.var[s].mean()) * tokens
        if var <= 0:
            continue
        sign = 1 if mean >= 0 else -1
        thr = threshold(null, s, sign, tokens, alpha)
        best = max(best, float(stats.norm.sf((thr - abs(mean)) / math.sqrt(var))))
    return best


def tokens_needed(
    laws, null: Increments, alpha: float, power: float, factors: Sequence[float], cap: int
) -> int:
    """The fewest tokens (a power of two's multiple of 64, at most `cap`; cap + 1 when not even cap
    suffices) at which every sampler at one of `factors` x the temperature is detected with
    probability >= power."""

    def ok(k: int) -> bool:
        return all(detection_probability(laws, null, k, alpha, f) >= power for f in factors)

    lo, hi = 0, 64
    while not ok(hi):
        lo, hi = hi, hi * 2
        if hi > cap:
            return cap if ok(cap) else cap + 1
    while hi - lo > max(16, hi // 64):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def detectable_factors(
    laws, null: Increments, tokens: int, alpha: float, power: float
) -> tuple[float, float]:
    """(hotter, colder): the smallest temperature factors > 1 and the largest < 1 detected with
    probability >= power over `tokens` tokens like the pilot's (inf / 0 when none up to 4x / 1/4x)."""

    def edge(toward: float) -> float:
        a, b = 1.0, toward
        if detection_probability(laws, null, tokens, alpha, b) < power:
            return math.inf if toward > 1 else 0.0
        for _ in range(24):
            mid = math.sqrt(a * b)
            a, b = (a, mid) if detection_probability(laws, null, tokens, alpha, mid) >= power else (mid, b)
        return b

    return edge(4.0), edge(0.25)


def mean_kl(laws: np.ndarray, factor: float) -> float:
    """Mean per-token KL(q || p) in nats of a sampler at `factor` x the temperature: the drift's size
    in a unit that does not depend on the family."""
    if not math.isfinite(factor) or factor <= 0:
        return math.inf
    laws = np.asarray(laws, dtype=np.float64)
    q = tempered(laws, 1.0 / factor)
    live = q > 0
    ratio = np.where(live, q / np.where(laws > 0, laws, 1.0), 1.0)
    return float((q * np.log(ratio)).sum(axis=1).mean())
