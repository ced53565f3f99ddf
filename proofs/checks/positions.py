"""The per-position test on long samples (docs/design.md section 7, "The per-position test";
docs/certify.md#the-per-position-test).

The candidate samples long continuations of one prompt (its generate_batch when it has one,
proofs/decoders/draw.py). One teacher-forced float64 pass of refdec per sample
(refdec.score.continuation_laws) gives the exact law of the plan's SamplingParams at every position
given the sample's own prefix; each token becomes its randomized probability-integral transform
(proofs/stats/pit.py), independent uniforms if the decoder is lossless, whatever the position. The
transforms are tested per position band (cut at the run's boundaries) and per entropy half of each
band, Holm across them all: a decoder that turns lossy past a position, a window's wrap, a cache
page's edge, shows in the bands past it, and deviations of opposite sign at different positions
or entropies cannot cancel.

Sample 0 (seed base) is the pilot: only the entropy thresholds come from it (the median entropy of
its laws in each band), so they are independent of the samples tested. Power is planned per band
(all its tokens), as the sampling check's: each band must detect a binned TV >= the target of U's
law with probability `power` at its Holm level; N follows from the narrowest band. A band that
ends short of it (a deadline, a decoder error) fails as "no power". The halves are tested and their
power stated, not required: how the tokens split by entropy depends on the samples.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from proofs.boundaries import collect as collect_boundaries
from proofs.decoder_attributes import prepare_decoder
from proofs.decoders.draw import draw
from proofs.decoders.protocol import Decoder
from proofs.details import PositionAlarms, PositionsDetails, PositionStratum
from proofs.result import CheckResult
from proofs.stats import pit
from refdec.errors import LoopcertError
from refdec.model import LoopedLM
from refdec.progress import Progress
from refdec.sampling import SamplingParams
from refdec.score import continuation_laws
from refdec.validate import check_int, check_number

PLAUSIBILITY = 1e-3  # the simulated false-alarm count fails the check when its binomial tail is below


@dataclass(frozen=True)
class PositionsPlan:
    """How hard the per-position check works (a CertifyPlan's `positions`)."""

    sampling: SamplingParams  # the law every position is judged under (the run's sampler convention)
    tokens: int  # new tokens per sample (cut to the model's max_seq_len)
    tv: float  # every band must detect a binned TV >= this of U with probability >= power
    bins: int = 10
    min_band: int = 64  # a boundary is a band edge only when the bands on both sides are this wide
    budget_s: float = 60.0  # the check stops sampling past this (a band short of N: no power)
    all_settings: bool = False  # fastdec's grid: every setting, or only its last (the most speculative)
    rows: int = 8  # seeds per generate_batch call
    false_alarm_replicates: int = 2000
    alpha: float = 1e-3
    power: float = 0.99

    def __post_init__(self):
        check_int("PositionsPlan.tokens", self.tokens, 1)
        check_int("PositionsPlan.bins", self.bins, 2)
        check_int("PositionsPlan.min_band", self.min_band, 1)
        check_int("PositionsPlan.rows", self.rows, 1)
        check_int("PositionsPlan.false_alarm_replicates", self.false_alarm_replicates, 0)
        check_number("PositionsPlan.budget_s", self.budget_s, 0, low_open=True)
        for name in ("tv", "alpha", "power"):
            check_number(f"PositionsPlan.{name}", getattr(self, name), 0, 1, low_open=True, high_open=True)
        if self.sampling.greedy:
            raise LoopcertError(
                "PositionsPlan.sampling must sample (temperature > 0): greedy has no law to test"
            )


@dataclass(frozen=True)
class Layout:
    """What the plan fixes before any sample: the horizon, bands, levels and N."""

    start: int  # the prompt's length: the first generated token's position
    n: int  # new tokens per sample
    bands: list[tuple[int, int]]
    left_out: list[int]
    alpha_test: float
    need: int  # transforms per band
    samples: int  # planned, the pilot included


def layout(plan: PositionsPlan, prompt_len: int, max_seq_len: int, boundaries: Sequence[int]) -> Layout:
    n = min(plan.tokens, max_seq_len - prompt_len)
    if n < 1:
        raise LoopcertError(f"a prompt of {prompt_len} tokens leaves no room below max_seq_len={max_seq_len}")
    start, end = prompt_len, prompt_len + n
    bands, left_out = pit.position_bands(boundaries, start, end, min(plan.min_band, n))
    alpha_test = plan.alpha / (3 * len(bands))  # per band: all, low, high
    need = pit.needed_per_stratum(plan.tv, plan.bins, alpha_test, plan.power)
    narrowest = min(hi - lo for lo, hi in bands)
    return Layout(start, n, bands, left_out, alpha_test, need, 1 + math.ceil(need / narrowest))


def ladder_samples(plan: PositionsPlan, prompt_len: int) -> int:
    """The samples `plan` needs after a prompt of prompt_len tokens when its bands are cut at the
    powers of two alone (what an estimate knows before the run's boundaries are collected)."""
    horizon = prompt_len + plan.tokens
    ladder = [2**k for k in range(horizon.bit_length()) if 2**k <= horizon]
    return layout(plan, prompt_len, horizon, ladder).samples


@dataclass
class Transforms:
    """The transforms of the samples scored so far, position by position."""

    u: list[np.ndarray]
    entropy: list[np.ndarray]
    impossible: int = 0
    first_impossible: str | None = None
    malformed: int = 0
    reference_seconds: float = 0.0


def score(
    reference: LoopedLM, prompt: list[int], tokens, n: int, sampling: SamplingParams, seed: int, t: Transforms
) -> None:
    """Append one sample's transforms to `t` (a malformed or impossible sample is counted, not scored)."""
    toks = list(tokens)
    V = reference.cfg.vocab_size
    if len(toks) != n or any(not isinstance(x, int) or not 0 <= x < V for x in toks):
        t.malformed += 1
        return
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
    t.u.append(u)
    t.entropy.append(pit.entropies(laws))


def stratum_rows(
    t: Transforms, lay: Layout, plan: PositionsPlan, seed: int
) -> tuple[list[PositionStratum], PositionAlarms | None]:
    """Every stratum's test (Holm-judged) and the simulated level at their sizes. t.u[0] is the
    pilot's: its entropies set the thresholds, its transforms are not tested."""
    positions = lay.start + np.arange(lay.n)
    thresholds = (
        pit.entropy_thresholds(positions, t.entropy[0], lay.bands) if t.u else [math.inf] * len(lay.bands)
    )
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
    rejected = pit.judge(tests, plan.alpha)
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
            [s.n for s in tests], plan.bins, plan.alpha, plan.false_alarm_replicates, seed
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


def label(row: PositionStratum) -> str:
    return f"[{row.band[0]}, {row.band[1]}) {row.half}"


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
) -> CheckResult:
    """Sample `decoder` (seeds base_seed, base_seed + 1, ...; the first is the pilot) for at most
    plan.budget_s, score every sample against `reference` (float64: the exact laws) and test.

    measured = the smallest p-value, bound = the strictest Holm level alpha / strata; passes iff Holm
    rejects no stratum, no token was impossible or malformed, the decoder never failed, every band
    reached the target TV, and the simulated false alarms at these sizes are plausible."""
    prompt = [int(x) for x in prompt]
    sampling = plan.sampling
    lay = layout(plan, len(prompt), reference.cfg.max_seq_len, boundaries)
    deadline = time.perf_counter() + plan.budget_s
    t = Transforms([], [])
    drawn, decode_s, error, stopped = 0, 0.0, None, False
    rows = plan.rows if max_rows is None else max(1, min(plan.rows, max_rows))
    while drawn < lay.samples:
        if time.perf_counter() >= deadline:
            stopped = True
            break
        k = min(rows, lay.samples - drawn)
        d = draw(decoder, prompt, lay.n, sampling, base_seed + drawn, k, deadline, rows)
        decode_s += d.seconds
        for i, sample in enumerate(d.samples):
            score(reference, prompt, sample, lay.n, sampling, base_seed + drawn + i, t)
        drawn += len(d.samples)
        if progress:
            progress(f"  {name}: {drawn}/{lay.samples} samples of {lay.n} tokens ({decode_s:.1f}s decoding)")
        if d.error:
            error = d.error
            break
        if d.stopped_by_deadline:
            stopped = True
            break
    strata, alarms = stratum_rows(t, lay, plan, base_seed)
    bands = [s for s in strata if s.half == "all"]
    no_power = tuple(label(s) for s in bands if not s.has_power)
    rejected = tuple(label(s) for s in strata if s.holm_rejected)
    worst = max((s.detectable_tv for s in bands), default=math.inf)
    implausible = alarms is not None and min(alarms.tail_p, alarms.tail_p_second_level) < PLAUSIBILITY
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
        alpha=plan.alpha,
        alpha_test=lay.alpha_test,
        target_tv=plan.tv,
        power_level=plan.power,
        needed_per_band=lay.need,
        planned_samples=lay.samples,
        samples=drawn,
        seeds=(base_seed, base_seed + drawn - 1) if drawn else None,
        uniforms=f"numpy default_rng([{pit.PIT_STREAM:#x}, seed]) per sample",
        strata=tuple(strata),
        detectable_tv=worst,
        no_power=no_power,
        rejected=rejected,
        impossible=t.impossible,
        first_impossible=t.first_impossible,
        malformed=t.malformed,
        decoder_error=error,
        stopped_by_deadline=stopped,
        decode_seconds=decode_s,
        reference_seconds=t.reference_seconds,
        false_alarm=alarms,
    )
    passed = not (rejected or no_power or t.impossible or t.malformed or error or implausible)
    measured = min((s.p_value for s in strata), default=1.0)
    if t.impossible or t.malformed or error:
        measured = 0.0
    power = (
        f"every position band must detect a binned TV >= {plan.tv:g} of the transform's law "
        f"({plan.bins} equal bins) with probability >= {plan.power:g} at alpha {lay.alpha_test:.3g} "
        f"(= {plan.alpha:g}/{len(strata)} Holm); reached: {worst:.3g} (worst band); non-central chi-square"
    )
    return CheckResult(name, measured, lay.alpha_test, passed, details, power)


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
) -> CheckResult:
    """check_positions of a decoder as certify runs it: under the run's sampler convention `order`,
    the decoder prepared (compiled) before its budget starts, the bands cut at crossed_boundaries."""
    plan = replace(plan, sampling=plan.sampling.with_order(order))
    horizon = min(len(prompt) + plan.tokens, reference.cfg.max_seq_len)
    prepared = prepare_decoder(decoder, horizon)  # compiles (fastdec --compile): not its budget's
    if prepared >= 1.0 and progress:
        progress(f"  positions: the decoder prepared (compiled) in {prepared:.1f}s, outside the budget")
    boundaries = crossed_boundaries(reference, decoder, horizon, raw_config)
    return check_positions(
        name, decoder, reference, prompt, plan, boundaries, base_seed, model, setting, max_rows, progress
    )
