"""The per-position test on long samples (docs/design.md section 7, "The per-position test" and
"Martingale evidence"; docs/certify.md#the-per-position-test).

The candidate samples long continuations of one prompt (its generate_batch when it has one,
proofs/decoders/draw.py) under one sampling law. One teacher-forced float64 pass of refdec per
sample (refdec.score.continuation_laws) gives the exact law at every position given the sample's own
prefix. Two families of tests read every token, each at half the check's level, Holm within each:

- martingale evidence (proofs/stats/martingale.py): the log-probability score and the first two
  moments of the randomized PIT, each summed per stratum as an e-process, valid at any stopping
  time. Sampling stops as soon as one rejects (a lossy decoder fails early); otherwise it goes on to
  the planned N. Strata: each position band (cut at the run's boundaries), each band's entropy
  halves, the whole horizon, and the tail (below).
- the binned randomized PIT (proofs/stats/pit.py), the omnibus test: per band and entropy half,
  chi-square against uniform at the planned N.

Sample 0 (seed base) is the pilot, never tested: its laws set the entropy thresholds (the median
entropy of its laws in each band). N is planned once, after the first call, from the laws of up to
PLANNING_SAMPLES of its samples (then frozen): the larger of what the binned test needs for every
band to detect a binned TV >= plan.tv, and what the martingale tests need for the tail (the
positions from plan.drift_from tokens after the prompt to the horizon, a stratum of its own) to
detect a temperature off by 1 +- plan.drift with probability plan.power (martingale.tokens_needed):
a drift that starts anywhere up to the tail's start is then caught. Only laws enter the plan, never
a test's outcome. The power the run reached is stated for the tail, the whole horizon and each
band, as temperature factors and per-token KL. A run its time budget (following the measured rate,
up to RUNAWAY x) stops before N with nothing rejected is incomplete (neither passed nor failed); a
plan whose N exceeds plan.max_samples has no power and fails; a law the engine refuses outright is
skipped here (the sampling check judges the refusal).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist

import numpy as np

from proofs.boundaries import collect as collect_boundaries
from proofs.decoder_attributes import prepare_decoder
from proofs.decoders.draw import RUNAWAY, RateDeadline, draw, too_many_failures
from proofs.decoders.protocol import Decoder
from proofs.details import (
    DriftPower,
    MartingaleTest,
    PositionAlarms,
    PositionsDetails,
    PositionStratum,
    RaisedRequests,
)
from proofs.result import CheckResult
from proofs.stats import martingale as mg
from proofs.stats import pit
from proofs.stats.chisquare import holm
from refdec.errors import LoopcertError
from refdec.model import LoopedLM
from refdec.progress import Progress
from refdec.sampling import SamplingParams
from refdec.score import continuation_laws
from refdec.validate import check_int, check_number

PLAUSIBILITY = 1e-3  # the simulated false-alarm count fails the check when its binomial tail is below
# N and the stated power are planned once, after the first call, from the laws of at most this many of
# its samples (the pilot first): one sample's laws misjudged a tiny model's varentropy by 2x. Only the
# laws enter the plan, never a test's outcome; the e-processes are valid at any N, however chosen
PLANNING_SAMPLES = 4
# what the mixture over the grid and Bennett's charge cost over the normal approximation's tokens:
# tokens_needed / that approximation, measured 1.2 on the default model and 1.5 on tiny-ouro (T=1,
# the quick plan's 10% drift; docs/measurements.md): --predict's estimate only
MIXTURE_COST = 1.4
EDGE = 1 + 1e-6


@dataclass(frozen=True)
class PositionsPlan:
    """How hard the per-position check works (a CertifyPlan's `positions`)."""

    sampling: SamplingParams  # the law every position is judged under (the run's sampler convention)
    tokens: int  # new tokens per sample (cut to the model's max_seq_len)
    tv: float  # every band must detect a binned TV >= this of U with probability >= power
    bins: int = 10
    min_band: int = 64  # a boundary is a band edge only when the bands on both sides are this wide
    budget_s: float = 60.0  # the check stops sampling past this (short of N, nothing rejected: incomplete)
    all_settings: bool = False  # fastdec's grid: every setting, or only its last (the most speculative)
    rows: int = 8  # seeds per generate_batch call
    false_alarm_replicates: int = 2000
    alpha: float = 1e-3  # family-wise: half to the binned tests, half to the martingale tests
    power: float = 0.99
    # the tail (drift_from) must detect a sampler at (1 + drift) x and (1 - drift) x the temperature
    # with probability `power` (None: N from the binned test alone; the martingale tests still run)
    drift: float | None = None
    # the plan's sampling cases are also sampled at depth (proofs/run/run.py positions_cases), each
    # with N planned to detect a temperature off by case_drift (None: N from the binned test alone)
    cases: bool = False
    case_drift: float | None = None
    max_samples: int = 400  # a case whose N exceeds this has no power (its law too concentrated)
    # the drift must be caught when it starts at most this many tokens after the prompt: the tail
    # from there to the horizon (at most its second half) is a stratum of its own, and N is planned
    # for it alone
    drift_from: int = 48

    def __post_init__(self):
        check_int("PositionsPlan.tokens", self.tokens, 1)
        check_int("PositionsPlan.bins", self.bins, 2)
        check_int("PositionsPlan.min_band", self.min_band, 1)
        check_int("PositionsPlan.rows", self.rows, 1)
        check_int("PositionsPlan.false_alarm_replicates", self.false_alarm_replicates, 0)
        check_int("PositionsPlan.max_samples", self.max_samples, 2)
        check_int("PositionsPlan.drift_from", self.drift_from, 0)
        check_number("PositionsPlan.budget_s", self.budget_s, 0, low_open=True)
        for name in ("tv", "alpha", "power"):
            check_number(f"PositionsPlan.{name}", getattr(self, name), 0, 1, low_open=True, high_open=True)
        for name in ("drift", "case_drift"):
            if getattr(self, name) is not None:
                check_number(
                    f"PositionsPlan.{name}", getattr(self, name), 0, 1, low_open=True, high_open=True
                )
        if self.sampling.greedy:
            raise LoopcertError(
                "PositionsPlan.sampling must sample (temperature > 0): greedy has no law to test"
            )


@dataclass(frozen=True)
class Layout:
    """What the plan fixes before any sample: the horizon, bands, levels and the binned test's N."""

    start: int  # the prompt's length: the first generated token's position
    n: int  # new tokens per sample
    bands: list[tuple[int, int]]
    left_out: list[int]
    alpha_test: float  # the binned tests' strictest Holm level
    need: int  # transforms per band (the binned test)
    samples: int  # planned by the binned test, the pilot included
    tail: int  # the first position of the tail stratum (= start: none)

    @property
    def martingale_tests(self) -> int:
        """Statistics x (each band, its two halves; the whole horizon when there are several bands;
        the tail when it is not the whole)."""
        per = 3 * len(self.bands) + (len(self.bands) > 1) + (self.tail > self.start)
        return len(mg.STATISTICS) * per

    @property
    def target_span(self) -> tuple[int, int]:
        """The positions the plan's drift target is planned on: the tail, or the whole horizon."""
        return (self.tail, self.start + self.n)


def layout(plan: PositionsPlan, prompt_len: int, max_seq_len: int, boundaries: Sequence[int]) -> Layout:
    n = min(plan.tokens, max_seq_len - prompt_len)
    if n < 1:
        raise LoopcertError(f"a prompt of {prompt_len} tokens leaves no room below max_seq_len={max_seq_len}")
    start, end = prompt_len, prompt_len + n
    bands, left_out = pit.position_bands(boundaries, start, end, min(plan.min_band, n))
    alpha_test = plan.alpha / 2 / (3 * len(bands))  # half the level; per band: all, low, high
    need = pit.needed_per_stratum(plan.tv, plan.bins, alpha_test, plan.power)
    narrowest = min(hi - lo for lo, hi in bands)
    tail = start + min(plan.drift_from, n // 2)
    return Layout(start, n, bands, left_out, alpha_test, need, 1 + math.ceil(need / narrowest), tail)


def ladder_samples(plan: PositionsPlan, prompt_len: int) -> int:
    """The samples the binned test of `plan` needs after a prompt of prompt_len tokens when its bands
    are cut at the powers of two alone (what an estimate knows before the run's boundaries are
    collected; the martingale tests' N is known only from the pilot's laws)."""
    horizon = prompt_len + plan.tokens
    ladder = [2**k for k in range(horizon.bit_length()) if 2**k <= horizon]
    return layout(plan, prompt_len, horizon, ladder).samples


def estimated_samples(
    plan: PositionsPlan, prompt_len: int, varentropy: float | None, max_seq_len: int | None = None
) -> int:
    """The samples `plan` would plan after a prompt of prompt_len tokens on a law of this mean
    varentropy (nats^2): the binned test's at the powers-of-two bands, or the martingale tests' for
    the tail (a normal approximation of the score's sum: tokens ~ ((sqrt(2 log(2J m / alpha)) +
    z_power) / (drift sqrt(varentropy)))^2, times MIXTURE_COST), at most max_samples; the samples
    cut to max_seq_len. What --predict scales a probe by (proofs/cost/predict.py): the run itself
    plans from its first call's laws."""
    if max_seq_len is not None:
        plan = replace(plan, tokens=max(1, min(plan.tokens, max_seq_len - prompt_len)))
    binned = ladder_samples(plan, prompt_len)
    if plan.drift is None or not varentropy or varentropy <= 0:
        return min(binned, plan.max_samples)
    horizon = prompt_len + plan.tokens
    lay = layout(plan, prompt_len, horizon, [2**k for k in range(horizon.bit_length()) if 2**k <= horizon])
    alpha = plan.alpha / 2 / lay.martingale_tests
    z = math.sqrt(2 * math.log(2 * len(mg.ETA) / alpha)) + NormalDist().inv_cdf(plan.power)
    tokens = MIXTURE_COST * (z / (plan.drift * math.sqrt(varentropy))) ** 2
    width = lay.target_span[1] - lay.target_span[0]
    return min(max(binned, 1 + math.ceil(tokens / width)), plan.max_samples)


@dataclass
class Transforms:
    """The samples scored so far, position by position (index 0: the pilot)."""

    u: list[np.ndarray]
    entropy: list[np.ndarray]
    steps: list[mg.Increments] = field(default_factory=list)
    pilot_laws: np.ndarray | None = None  # (k n, V) float64: the planning samples' laws (PLANNING_SAMPLES)
    planning: list[mg.Increments] = field(default_factory=list)  # their null increments
    planned: bool = False  # N is planned: the planning laws are frozen (the power is stated on them)
    impossible: int = 0
    first_impossible: str | None = None
    malformed: int = 0
    reference_seconds: float = 0.0


def score(
    reference: LoopedLM, prompt: list[int], tokens, n: int, sampling: SamplingParams, seed: int, t: Transforms
) -> bool:
    """Append one sample's transforms and increments to `t`; False (counted, not scored) for a
    malformed sample or one holding an impossible token."""
    toks = list(tokens)
    V = reference.cfg.vocab_size
    if len(toks) != n or any(not isinstance(x, int) or not 0 <= x < V for x in toks):
        t.malformed += 1
        return False
    t0 = time.perf_counter()
    laws = continuation_laws(reference, prompt, toks, sampling).detach().cpu().numpy()  # (n, V) float64
    t.reference_seconds += time.perf_counter() - t0
    u, p = pit.randomized_pit(laws, toks, pit.uniforms(seed, n))
    zero = np.flatnonzero(p <= 0)
    if zero.size:
        t.impossible += int(zero.size)
        if t.first_impossible is None:
            i = int(zero[0])
            t.first_impossible = f"seed {seed} position {len(prompt) + i} token {toks[i]}"
        return False
    if not t.planned and len(t.planning) < PLANNING_SAMPLES:  # the laws N and the power come from
        t.pilot_laws = laws if t.pilot_laws is None else np.concatenate([t.pilot_laws, laws])
        t.planning.append(mg.increments(laws, toks, u))
    t.u.append(u)
    t.entropy.append(pit.entropies(laws))
    t.steps.append(mg.increments(laws, toks, u))
    return True


class Martingales:
    """Every martingale test of one check, fed sample by sample (the pilot excluded)."""

    def __init__(self, lay: Layout, thresholds: Sequence[float]):
        self.lay, self.thresholds = lay, list(thresholds)
        self.positions = lay.start + np.arange(lay.n)
        band = pit.band_index(self.positions, lay.bands)
        self.specs: list[tuple[str, tuple[int, int], str]] = []
        self.masks: list[np.ndarray | None] = []  # None: decided by the entropy of each sample
        for name in mg.STATISTICS:
            for b, bnd in enumerate(lay.bands):
                for half in ("all", "low", "high"):
                    self.specs.append((name, bnd, half))
                    self.masks.append(band == b if half == "all" else None)
            if len(lay.bands) > 1:
                self.specs.append((name, (lay.start, lay.start + lay.n), "whole"))
                self.masks.append(band >= 0)
            if lay.tail > lay.start:
                self.specs.append((name, lay.target_span, "tail"))
                self.masks.append(self.positions >= lay.tail)
        self.tests = [mg.EProcess(name) for name, _, _ in self.specs]

    def feed(self, step: mg.Increments, entropy: np.ndarray) -> None:
        stratum = pit.stratum_index(self.positions, entropy, self.lay.bands, self.thresholds)
        for i, ((name, bnd, half), mask) in enumerate(zip(self.specs, self.masks, strict=True)):
            if mask is None:
                b = self.lay.bands.index(bnd)
                mask = stratum == 2 * b + (half == "high")
            s = mg.STATISTICS.index(name)
            self.tests[i].feed(step.d[s][mask], step.v[s][mask], step.hi[s][mask], step.lo[s][mask])

    def rejected(self, alpha: float) -> list[bool]:
        return holm([e.p_value for e in self.tests], alpha)

    def rows(self, alpha: float) -> list[MartingaleTest]:
        return [
            MartingaleTest(name, bnd, half, e.n, e.z, e.peak, e.p_value, bool(r))
            for (name, bnd, half), e, r in zip(self.specs, self.tests, self.rejected(alpha), strict=True)
        ]


def martingale_label(row: MartingaleTest) -> str:
    where = f"[{row.band[0]}, {row.band[1]})" + ("" if row.half == "whole" else f" {row.half}")
    return f"{row.statistic} {where}"


def planned_samples(
    plan: PositionsPlan, lay: Layout, drift: float | None, t: Transforms
) -> tuple[int, str, str | None]:
    """(N with the pilot, what set it, why there is no power: None when there is): the binned test's
    N, or the martingale tests' when `drift` asks more of the target span (from the pilot's laws
    there), at most max_samples."""
    samples, by = lay.samples, "binned"
    if drift is not None and t.pilot_laws is not None:
        lo, hi = lay.target_span
        laws, null = planning_view(t, lay, lo, hi)
        alpha = plan.alpha / 2 / lay.martingale_tests
        width = hi - lo
        cap = plan.max_samples * width
        need = mg.tokens_needed(laws, null, alpha, plan.power, (1 + drift, 1 - drift), cap)
        if need > cap:
            why = (
                f"a temperature off by {drift:.0%} over [{lo}, {hi}) needs more than max_samples="
                f"{plan.max_samples} samples on this law (pilot varentropy "
                f"{float(null.v[0].mean()):.3g} nats^2)"
            )
            return plan.max_samples, "martingale", why
        if 1 + math.ceil(need / width) > samples:
            samples, by = 1 + math.ceil(need / width), "martingale"
    return min(samples, plan.max_samples), by, None


def planning_view(t: Transforms, lay: Layout, lo: int, hi: int) -> tuple[np.ndarray, mg.Increments]:
    """The planning samples' laws and null increments at positions [lo, hi), every sample's."""
    sel = slice(lo - lay.start, hi - lay.start)
    k = len(t.planning)
    laws = t.pilot_laws.reshape(k, lay.n, -1)[:, sel].reshape(-1, t.pilot_laws.shape[1])
    parts = [(inc.d[:, sel], inc.v[:, sel], inc.hi[:, sel], inc.lo[:, sel]) for inc in t.planning]
    return laws, mg.Increments(*(np.concatenate([p[i] for p in parts], axis=1) for i in range(4)))


def drift_power(
    plan: PositionsPlan, lay: Layout, t: Transforms, tested: Sequence[MartingaleTest]
) -> list[DriftPower]:
    """The detectable temperature factors of the tail (the plan's target), the whole horizon and each
    band, at the tokens each stratum's score test holds (the pilot's laws as their model)."""
    if t.pilot_laws is None:
        return []
    alpha = plan.alpha / 2 / lay.martingale_tests
    positions = lay.start + np.arange(lay.n)
    out = []
    for row in tested:
        if row.statistic != "score" or row.half not in ("all", "whole", "tail"):
            continue
        if row.half == "all":  # a band: its positions
            inside = (positions >= row.band[0]) & (positions < row.band[1])
            lo, hi = int(positions[inside][0]), int(positions[inside][-1]) + 1
        else:
            lo, hi = row.band
        laws, sub = planning_view(t, lay, lo, hi)
        hot, cold = (math.inf, 0.0)
        if row.tokens:
            hot, cold = mg.detectable_factors(laws, sub, row.tokens, alpha, plan.power)
        half = "whole" if row.half == "all" and len(lay.bands) == 1 else row.half  # the one band is the whole
        out.append(
            DriftPower(row.band, half, row.tokens, hot, cold, mg.mean_kl(laws, hot), mg.mean_kl(laws, cold))
        )
    order = {"tail": 0, "whole": 1, "all": 2}
    return sorted(out, key=lambda r: (order[r.half], r.band))


def stratum_rows(
    t: Transforms, lay: Layout, plan: PositionsPlan, seed: int
) -> tuple[list[PositionStratum], PositionAlarms | None]:
    """Every binned stratum's test (Holm-judged at half the level) and the simulated level at their
    sizes. t.u[0] is the pilot's: its entropies set the thresholds, its transforms are not tested."""
    positions = lay.start + np.arange(lay.n)
    thresholds = thresholds_of(t, lay)
    tested = range(1, len(t.u))
    u = np.concatenate([t.u[i] for i in tested]) if len(t.u) > 1 else np.zeros(0)
    h = np.concatenate([t.entropy[i] for i in tested]) if len(t.u) > 1 else np.zeros(0)
    pos = np.tile(positions, len(t.u) - 1) if len(t.u) > 1 else np.zeros(0, dtype=np.int64)
    band = pit.band_index(pos, lay.bands)
    stratum = pit.stratum_index(pos, h, lay.bands, thresholds)
    specs, tests = [], []
    for b, (lo, hi) in enumerate(lay.bands):
        for half, sel, thr in (
            ("all", band == b, None),
            ("low", stratum == 2 * b, thresholds[b]),
            ("high", stratum == 2 * b + 1, thresholds[b]),
        ):
            specs.append(((lo, hi), half, thr))
            tests.append(pit.stratum_test(pit.bin_counts(u[sel], plan.bins), lay.alpha_test, plan.power))
    rejected = pit.judge(tests, plan.alpha / 2)
    rows = [
        PositionStratum(
            band=bnd,
            half=half,
            entropy_threshold=None if thr is None or math.isinf(thr) else thr,
            tokens=s.n,
            counts=s.counts,
            stat=s.stat,
            p_value=s.p_value,
            detectable_tv=s.detectable_tv,
            empirical_tv=s.empirical_tv,
            has_power=(s.detectable_tv <= plan.tv) if half == "all" else None,
            holm_rejected=bool(r),
        )
        for (bnd, half, thr), s, r in zip(specs, tests, rejected, strict=True)
    ]
    alarms = None
    if plan.false_alarm_replicates:
        sim = pit.simulate_false_alarms(
            [s.n for s in tests], plan.bins, plan.alpha / 2, plan.false_alarm_replicates, seed
        )
        alarms = PositionAlarms(
            replicates=sim["replicates"],
            level=sim["level"],
            rejections=sim["rejections"],
            tail_p=sim["tail_p"],
            level_second_level=sim["level_second_level"],
            rejections_second_level=sim["rejections_second_level"],
            tail_p_second_level=sim["tail_p_second_level"],
            plausibility=PLAUSIBILITY,
        )
    return rows, alarms


def thresholds_of(t: Transforms, lay: Layout) -> list[float]:
    positions = lay.start + np.arange(lay.n)
    return pit.entropy_thresholds(positions, t.entropy[0], lay.bands) if t.u else [math.inf] * len(lay.bands)


def label(row: PositionStratum) -> str:
    return f"[{row.band[0]}, {row.band[1]}) {row.half}"


def factor_text(f: float) -> str:
    if math.isinf(f):
        return "none up to 4x"
    if f <= 0:
        return "none down to 0.25x"
    return f"{f:.3g}x"


def check_positions(
    name: str,
    decoder: Decoder,
    reference: LoopedLM,
    prompt: Sequence[int],
    plan: PositionsPlan,
    boundaries: Sequence[int],
    base_seed: int,
    model: str = "",
    setting: str = "",
    max_rows: int | None = None,
    progress: Progress | None = None,
    case: str = "",
) -> CheckResult:
    """Sample `decoder` (seeds base_seed, base_seed + 1, ...; the first is the pilot) for at most
    plan.budget_s, score every sample against `reference` (float64: the exact laws) and test.
    `case` names the sampling case plan.sampling is (shown in the report).

    measured = the smallest p-value, bound = the strictest Holm level; passes iff neither family
    rejects, no token was impossible or malformed, the decoder never failed, every band reached the
    target TV and the whole horizon the target drift, and the simulated false alarms at these sizes
    are plausible. Stopped by the budget before N with none of that against it: incomplete."""
    prompt = [int(x) for x in prompt]
    sampling = plan.sampling
    drift = plan.drift
    lay = layout(plan, len(prompt), reference.cfg.max_seq_len, boundaries)
    t0 = time.perf_counter()
    deadline = t0 + plan.budget_s
    t = Transforms([], [])
    drawn, decode_s, error, stopped, early = 0, 0.0, None, False, False
    # requests that raised: skipped, not replaced (draw), so `tried` seeds gave `drawn` samples
    tried, failed, first_failed = 0, 0, None
    rows = plan.rows if max_rows is None else max(1, min(plan.rows, max_rows))
    planned, planned_by, cannot = lay.samples, None, None
    mart: Martingales | None = None
    alpha_m = plan.alpha / 2
    while tried < planned:
        if tried:  # the budget follows the measured rate (a busy machine takes longer, up to a cap)
            rate = RateDeadline(t0, plan.budget_s, planned, RUNAWAY * plan.budget_s)
            deadline = rate(tried, time.perf_counter() - t0)
        if time.perf_counter() >= deadline:
            stopped = True
            break
        k = min(rows, planned - tried)
        d = draw(decoder, prompt, lay.n, sampling, base_seed + tried, k, deadline, rows)
        decode_s += d.seconds
        if d.refused and not t.u:  # the engine refused the law's parameters outright
            # the sampling check judges a refusal (a core parameter fails there, and
            # assert_lossless's allow_refused excuses it there): this check has no samples to judge
            return CheckResult(
                name,
                math.nan,
                math.nan,
                True,
                kind="positions",
                skipped=f"the decoder refused this law's parameters ({d.refused}); the sampling check "
                "judges the refusal",
            )
        if d.refused:
            error = f"refused: {d.refused}"
            break
        for seed, sample in zip(d.seeds or [], d.samples, strict=True):
            if not score(reference, prompt, sample, lay.n, sampling, seed, t):
                continue
            if mart is None:  # the pilot: its laws set the entropy cuts; its tokens are not tested
                mart = Martingales(lay, thresholds_of(t, lay))
            else:
                mart.feed(t.steps[-1], t.entropy[-1])
        if planned_by is None and t.planning:  # N, once, from the first call's laws
            planned, planned_by, cannot = planned_samples(plan, lay, drift, t)
            t.planned = True
        drawn += len(d.samples)
        if d.failed and first_failed is None:
            first_failed = (d.first_failed_seed, d.first_failure)
        failed += d.failed
        tried += d.requests
        if progress:
            progress(f"  {name}: {drawn}/{planned} samples of {lay.n} tokens ({decode_s:.1f}s decoding)")
        if d.error:
            error = d.error
            break
        if too_many_failures(failed, tried):  # draw's cap, over this check's calls together
            error = (
                f"{failed} of {tried} requests raised (first seed {first_failed[0]}: {first_failed[1]}): "
                "sampling stopped there, past the cap of half the requests"
            )
            break
        if t.impossible or t.malformed:
            break  # no further sample can change the verdict
        if not failed and mart is not None and any(mart.rejected(alpha_m)):
            # valid at any stopping time (Ville): a lossy decoder fails here. Not where requests
            # raised: the kept samples' law may then differ by the selection alone, so the check
            # goes on to N for the binned test, whose TV is weighed against the bias bound
            early = drawn < planned
            break
        if d.stopped_by_deadline:
            stopped = True
            break
    strata, alarms = stratum_rows(t, lay, plan, base_seed)
    mrows = mart.rows(alpha_m) if mart is not None else []
    power_rows = drift_power(plan, lay, t, mrows)
    bands = [s for s in strata if s.half == "all"]
    no_power = [label(s) for s in bands if not s.has_power]
    target = power_rows[0] if power_rows else None  # the tail's, or the whole horizon's
    if (
        drift is not None
        and not early
        # (a relative 1e-6: detectable_factors' bisection lands within it of the edge it is planned at)
        and (target is None or target.hotter > (1 + drift) * EDGE or target.colder < (1 - drift) / EDGE)
    ):
        no_power.append(f"[{lay.target_span[0]}, {lay.target_span[1]}): temperature +-{drift:.0%}")
    raised = None
    if failed and not error:  # past the cap, the error says it all
        raised = raised_requests(failed, tried, first_failed, strata, mrows, t, lay)
    if t.impossible or t.malformed or error or early or raised:
        no_power = []  # the evidence is decisive: what N it planned no longer matters
    rejected = tuple(label(s) for s in strata if beyond_bias(s, raised, lay))
    # the e-processes weigh no TV: under a selection of the requests, their rejection is not
    # decisive (raised.law says "within the bias bound"; the rows keep holm_rejected)
    m_rejected = () if raised else tuple(martingale_label(r) for r in mrows if r.holm_rejected)
    worst = max((s.detectable_tv for s in bands), default=math.inf)
    implausible = alarms is not None and min(alarms.tail_p, alarms.tail_p_second_level) < PLAUSIBILITY
    pilot_ve = float(np.mean([inc.v[0].mean() for inc in t.planning])) if t.planning else None
    details = PositionsDetails(
        model=model,
        setting=setting,
        temperature=sampling.temperature,
        top_k=sampling.top_k,
        top_p=sampling.top_p,
        order=sampling.order,
        prompt=tuple(prompt),
        tokens=lay.n,
        boundaries=tuple(sorted({int(b) for b in boundaries})),
        bands=tuple(lay.bands),
        left_out=tuple(lay.left_out),
        bins=plan.bins,
        alpha=plan.alpha / 2,
        alpha_test=lay.alpha_test,
        target_tv=plan.tv,
        power_level=plan.power,
        needed_per_band=lay.need,
        planned_samples=planned,
        samples=drawn,
        seeds=(base_seed, base_seed + tried - 1) if tried else None,
        uniforms=f"numpy default_rng([{pit.PIT_STREAM:#x}, seed]) per sample",
        strata=tuple(strata),
        detectable_tv=worst,
        no_power=tuple(no_power),
        rejected=rejected,
        impossible=t.impossible,
        first_impossible=t.first_impossible,
        malformed=t.malformed,
        decoder_error=error,
        stopped_by_deadline=stopped,
        decode_seconds=decode_s,
        reference_seconds=t.reference_seconds,
        false_alarm=alarms,
        case=case,
        drift_target=drift,
        martingale_alpha=alpha_m,
        martingale=tuple(mrows),
        drift_power=tuple(power_rows),
        planned_by=planned_by or "binned",
        pilot_varentropy=pilot_ve,
        stopped_early=early,
        martingale_rejected=m_rejected,
        raised=raised,
    )
    # a request that raised is a finding: the check fails on it, whatever the completed samples say
    against = bool(rejected or m_rejected or t.impossible or t.malformed or error or implausible or raised)
    short = stopped and not against  # the budget ran out first: no verdict on the law
    failed = against or (bool(no_power) and not short) or cannot is not None
    passed = not failed and not short
    measured = min([s.p_value for s in strata] + [r.p_value for r in mrows], default=1.0)
    if t.impossible or t.malformed or error:
        measured = 0.0
    bound = min(lay.alpha_test, alpha_m / max(1, len(mrows)))
    power = power_text(plan, lay, drift, power_rows, worst)
    if cannot:
        power += f"; no power: {cannot}"
    incomplete = None
    if short and not failed:
        incomplete = (
            f"stopped by its time budget ({plan.budget_s:g}s, stretched to the measured rate up to "
            f"{RUNAWAY:g}x) after {drawn} of {planned} samples with "
            f"nothing rejected; reached: {reached_text(target, worst)}"
        )
    elif short:
        passed = False
    return CheckResult(name, measured, bound, passed, details, power, incomplete=incomplete)


def stratum_bias_bound(row: PositionStratum, raised: RaisedRequests, lay: Layout) -> float:
    """The TV by which dropping the failed requests can move a stratum's transforms' law (see
    proofs.details.RaisedRequests): each failed sample would have added at most the band's width of
    tokens, so failed w / (tokens + failed w); the failed fraction for a band's "all" stratum."""
    positions = lay.start + np.arange(lay.n)
    w = int(((positions >= row.band[0]) & (positions < row.band[1])).sum())
    return raised.failed * w / (row.tokens + raised.failed * w)


def beyond_bias(row: PositionStratum, raised: RaisedRequests | None, lay: Layout) -> bool:
    """Holm rejected the stratum by more than the selection of completed requests can explain."""
    if not row.holm_rejected or raised is None:
        return row.holm_rejected
    return row.empirical_tv is None or row.empirical_tv > stratum_bias_bound(row, raised, lay)


def raised_requests(
    failed: int,
    tried: int,
    first: tuple[int, str],
    strata: Sequence[PositionStratum],
    mrows: Sequence[MartingaleTest],
    t: Transforms,
    lay: Layout,
) -> RaisedRequests:
    """The requests that raised and what the completed samples show: "rejected" on impossible or
    malformed tokens, or a stratum past its bias bound; "within the bias bound" when a test rejected
    by no more (the martingale tests weigh no TV: their rejection alone is never past it)."""
    bound = RaisedRequests(failed, tried, first[0], first[1], failed / tried, "")
    if t.impossible or t.malformed or any(beyond_bias(s, bound, lay) for s in strata):
        law = "rejected"
    elif any(s.holm_rejected for s in strata) or any(r.holm_rejected for r in mrows):
        law = "within the bias bound"
    else:
        law = "not rejected"
    return replace(bound, law=law)


def reached_text(target: DriftPower | None, worst: float) -> str:
    tv = f"binned TV {worst:.3g} (worst band)"
    if target is None:
        return tv
    span = f"[{target.band[0]}, {target.band[1]})"
    return f"temperature {factor_text(target.hotter)} / {factor_text(target.colder)} over {span}, {tv}"


def power_text(plan: PositionsPlan, lay: Layout, drift, rows: Sequence[DriftPower], worst: float) -> str:
    """The power statement in the user's terms: temperature factors and per-token KL (martingale
    tests), binned TV (the omnibus test)."""
    parts = []
    for r in rows:
        kl = f"per-token KL {r.kl_hotter:.2g} / {r.kl_colder:.2g} nats"
        off = f"{factor_text(r.hotter)} / {factor_text(r.colder)}"
        if r.half == "tail":
            target = f", target +-{drift:.0%}" if drift is not None else ""
            parts.append(
                f"with probability {plan.power:g} it detects a temperature off by {off} from any position "
                f"<= {r.band[0]} to {r.band[1]} ({kl}{target})"
            )
        elif r.half == "whole":
            parts.append(f"on every token of [{r.band[0]}, {r.band[1]}): {off} ({kl})")
    bands = [r for r in rows if r.half == "all"]
    if bands:
        each = ", ".join(
            f"[{b.band[0]}, {b.band[1]}) {factor_text(b.hotter)} / {factor_text(b.colder)}" for b in bands
        )
        parts.append(f"over one band: {each}")
    parts.append(
        f"every band a binned TV >= {plan.tv:g} of the transform's law ({plan.bins} bins, alpha "
        f"{lay.alpha_test:.3g}); reached: {worst:.3g} (worst band)"
    )
    return "; ".join(parts)


def crossed_boundaries(reference: LoopedLM, decoder, horizon: int, raw_config: dict | None) -> list[int]:
    """The positions the bands are cut at: the boundaries greedy_depth crosses (proofs/boundaries.py:
    the model's config and folder's config.json `raw_config`, the decoder's declaration and
    speculation widths, the ladder of powers of two) up to the horizon."""
    found = collect_boundaries(reference.cfg, decoder, horizon, raw_config=raw_config)
    return sorted({b.position for b in found if b.position <= horizon})


def check_positions_of(
    name: str,
    decoder: Decoder,
    reference: LoopedLM,
    prompt: Sequence[int],
    plan: PositionsPlan,
    order: str,
    raw_config: dict | None,
    base_seed: int,
    model: str = "",
    setting: str = "",
    max_rows: int | None = None,
    progress: Progress | None = None,
    case: tuple[str, SamplingParams, float | None] | None = None,
) -> CheckResult:
    """check_positions of a decoder as certify runs it: under the run's sampler convention `order`,
    the decoder prepared (compiled) before its budget starts, the bands cut at crossed_boundaries.
    `case`: (name, law, drift) of one of the plan's sampling cases, sampled at depth instead of
    plan.sampling at plan.drift."""
    name_of_case = ""
    if case is not None:
        name_of_case, sampling, drift = case
        plan = replace(plan, sampling=sampling, drift=drift)
    plan = replace(plan, sampling=plan.sampling.with_order(order))
    horizon = min(len(prompt) + plan.tokens, reference.cfg.max_seq_len)
    prepared = prepare_decoder(decoder, horizon)  # compiles (fastdec --compile): not its budget's
    if prepared >= 1.0 and progress:
        progress(f"  positions: the decoder prepared (compiled) in {prepared:.1f}s, outside the budget")
    boundaries = crossed_boundaries(reference, decoder, horizon, raw_config)
    return check_positions(
        name,
        decoder,
        reference,
        prompt,
        plan,
        boundaries,
        base_seed,
        model,
        setting,
        max_rows,
        progress,
        name_of_case,
    )
