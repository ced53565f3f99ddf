"""What each kind of check found: one typed record per kind, the schema of a check result's
`details` in certificate.json (docs/design.md sections 6 and 9).

All kinds live here, not beside their checks, so that the certificate's layout reads in one
place and a reader of a certificate (reports/, `loopcert merge`) needs this module only, not the
checks' torch, scipy and hypothesis code (and the checks, which import proofs.result, are not
imported back by it). Each check builds its own record (proofs/checks/<check>.py); what every
check has (wall time, an error, a skip) are fields of `proofs.result.CheckResult`, not of these.

Kinds: greedy, bitwise, sampling, relative_sampling, sampler_convention, reproducibility,
mutation, false_alarm, theorem1, theorem2_traces, theorem2_published, speed, positions (KINDS).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from proofs.record import Record


@dataclass(frozen=True)
class Details(Record):
    kind: ClassVar[str]
    informational: ClassVar[bool] = False  # reports what it measured, never fails on it


# -- greedy exactness (proofs/checks/greedy.py) ---------------------------------------------------


@dataclass(frozen=True)
class GreedyRun(Record):
    model: str
    setting: str
    dtype: str  # the dtype the decoder computes in (it sets the tie tolerance)
    prompts: int
    tokens: int
    agree: int  # prompts whose tokens equal refdec's
    error: str | None = None  # "the decoder factory failed on MODEL: ...": no decoder, the run failed


@dataclass(frozen=True)
class Divergence(Record):
    """A position where a run's token is not refdec's argmax given the run's own prefix (one
    teacher-forced pass, proofs/checks/greedy.py), classified by refdec's logits there: every
    numerical tie, and the first real bug."""

    model: str
    setting: str
    prompt: tuple[int, ...]
    dtype: str
    position: int
    reference: int | None  # refdec's token there (None: not judged, the decoder raised)
    candidate: int | None  # the candidate's (None: it returned too few tokens, or raised)
    top2_margin: float | None  # refdec's max logit minus its runner-up; None: not judged by logits
    candidate_gap: float | None  # refdec's max logit minus the candidate token's
    classified: str  # "numerical tie" (gap below the dtype's tolerance) or "real bug"
    why: str | None = None  # a real bug not judged by logits: what was wrong


@dataclass(frozen=True)
class GreedyDetails(Details):
    kind: ClassVar[str] = "greedy"
    runs: tuple[GreedyRun, ...]  # models x settings
    divergences: tuple[Divergence, ...]  # every one, ties included
    real_bugs: int
    numerical_ties: int
    tie_tolerance: dict[str, float]  # dtype name -> logit gap below which a divergence is a tie
    tokens_per_prompt: int
    not_applicable: tuple[str, ...] = ()  # "<setting> on <model>: why" for runs the factory declined


# -- greedy at depth and boundary coverage (proofs/checks/depth.py) -------------------------------


@dataclass(frozen=True)
class DepthRun(Record):
    setting: str
    dtype: str
    placements: int
    agree: int  # placements whose every token is the reference's argmax on its own prefix
    tokens: int  # greedy tokens judged
    error: str | None = None  # the factory failed: no decoder


@dataclass(frozen=True)
class DepthDivergence(Record):
    """A token of a placed run that is not refdec's argmax given the run's own prefix."""

    setting: str
    dtype: str
    prompt_len: int
    tokens: int  # the run's generated tokens
    position: int  # absolute: prompt_len + index in the continuation
    reference: int | None
    candidate: int | None
    candidate_gap: float | None
    classified: str  # "numerical tie" | "real bug"
    near: str  # the position relative to the nearest boundary below it (proofs/boundaries.py near)
    why: str | None = None


@dataclass(frozen=True)
class CoverageRow(Record):
    position: int
    source: str
    what: str
    greedy_runs: int  # greedy runs that crossed it (generation, prefill or an exact prompt)
    greedy_tokens: int  # greedy tokens generated at positions past it by those runs
    samples: int  # sampled sequences that crossed it
    status: str  # "covered" | "NO COVERAGE" | "beyond the horizon" | "not crossed (ladder)"


@dataclass(frozen=True)
class DepthDetails(Details):
    kind: ClassVar[str] = "greedy_depth"
    model: str
    horizon: int  # context tokens the plan reaches
    placements: tuple[str, ...]  # "prompt P + n tokens: why"
    runs: tuple[DepthRun, ...]
    divergences: tuple[DepthDivergence, ...]
    real_bugs: int
    numerical_ties: int
    crossings: tuple[tuple[int, int], ...]  # (prompt_len, n tokens) of every placed run decoded
    # (position, source, what) of every boundary of the run (proofs/boundaries.py): the coverage
    # check reads them here, so a merge of shards assembles it without building a decoder
    boundaries: tuple[tuple[int, str, str], ...] = ()


@dataclass(frozen=True)
class CoverageDetails(Details):
    kind: ClassVar[str] = "coverage"
    model: str
    horizon: int
    rows: tuple[CoverageRow, ...]
    uncovered: int  # declared boundaries within the horizon no check crossed


# -- bitwise agreement (proofs/checks/bitwise.py) -------------------------------------------------


@dataclass(frozen=True)
class BitwiseRun(Record):
    setting: str
    prompts: int
    equal: int  # prompts whose tokens equal the baseline's bit for bit


@dataclass(frozen=True)
class Mismatch(Record):
    setting: str
    prompt: tuple[int, ...]
    first_difference: int | None  # None: the candidate raised
    baseline: tuple[int, ...]
    candidate: tuple[int, ...] | None
    error: str | None


@dataclass(frozen=True)
class BitwiseDetails(Details):
    kind: ClassVar[str] = "bitwise"
    width: int  # the fixed engine width W of every call
    dtype: str
    tokens_per_prompt: int
    runs: tuple[BitwiseRun, ...]
    mismatches: tuple[Mismatch, ...]


# -- distributional equality under sampling (proofs/checks/distribution.py) -----------------------


@dataclass(frozen=True)
class CaseSpec(Record):
    """A sampling case: prompt, sampling parameters and the number of tokens drawn."""

    case: str
    temperature: float
    top_k: int | None
    top_p: float | None
    prompt: tuple[int, ...]
    tokens: int


@dataclass(frozen=True)
class SamplingView(Record):
    """One view of a case: its bins (fixed from the exact law), counts and chi-square result."""

    case: str
    view: str
    law: str  # what was enumerated, in words
    counted: int  # samples this view saw (a conditional view: those on its prefix)
    needed_n: int | None  # samples of the case it needs to reach the target TV; None: < 2 bins
    target_tv: float
    bin_labels: tuple[str, ...]
    bin_probs: tuple[float, ...]
    counts: tuple[int, ...]
    bins: int  # after chisquare_gof pooled the sparse ones
    stat: float | None
    p_value: float  # 0 when the case failed on its samples (an impossible one, a decoder error)
    detectable_tv: float  # TV it detects with the target power at its Holm level (inf: none)
    empirical_tv: float | None
    has_power: bool  # detectable_tv <= target_tv
    holm_rejected: bool
    # requests of its case raised: the TV by which dropping them can move this view's law of the
    # completed samples (RaisedRequests); Holm's rejection counts only past it. None: none raised
    bias_bound: float | None = None


@dataclass(frozen=True)
class RaisedRequests(Record):
    """Requests of a case (or a per-position run) that raised: skipped, not replaced
    (proofs/decoders/draw.py), with what the completed samples show about the law.

    Why `bias_bound` is the failed fraction f = failed / requests: let p be the (empirical) law of
    the outputs the M requests' seeds would have given and A the event that a request completed.
    The kept samples follow p(.|A), and p = (1 - f) p(.|A) + f p(.|not A), so for every set B
    p(B|A) - p(B) = f (p(B|A) - p(B|not A)), whose size is at most f: TV(p(.|A), p) <= f, reached
    when the failing requests' outputs lie where the completed ones never do. (f / (1 - f) bounds
    the ratio p(B|A) / p(B) - 1, a looser statement than the TV.) A view that counts only the
    samples on a prefix conditions further: all the failed requests may have been on it, so its
    bound is failed / (counted + failed). A deviation of the kept samples within the bound can be
    the selection alone, so the law is judged "rejected" only past it (or on impossible tokens)."""

    failed: int  # requests that raised
    requests: int  # requests made: the samples kept and the ones that raised
    first_seed: int
    first_message: str  # "<exception type>: <message>"
    bias_bound: float  # failed / requests: the TV by which the selection can move the kept law
    # what the completed samples show: "rejected" (past the bound, or impossible tokens), "not
    # rejected" (the usual power statement holds for them), or "within the bias bound" (rejected,
    # but by no more than dropping the failed requests could explain: not judged beyond it)
    law: str


@dataclass(frozen=True)
class SamplingCase(CaseSpec):
    planned: int  # N from the target TV
    samples: int  # N drawn (fewer when a time budget stopped it)
    seconds: float
    samples_per_s: float | None
    batched: bool  # drawn through generate_batch
    impossible: int  # samples of probability 0 under the reference law
    error: str | None  # the decoder failed
    seeds: tuple[int, int] | None  # first and last seed (None: counts drawn from an exact law)
    stopped_by_deadline: bool
    detectable_tv: float  # the worst of its views
    needed_n: int | None
    has_power: bool  # every view has power
    not_tested: tuple[str, ...]  # views the rules left out, and why (proofs/stats/views.py)
    chosen: str  # how the plan chose this case among a path's options ("" for a fixed case)
    views: tuple[SamplingView, ...]
    order: str = "temperature-first"  # the sampler convention of its law (refdec.sampling)
    params: dict | None = None  # its SamplingParams as SamplingParams.describe() (None: written before)
    refused: str | None = None  # the engine refused its parameters (protocol.Refused): not sampled
    raised: RaisedRequests | None = None  # some requests raised (skipped): the case failed on them


def nothing_sampled(model: str, why_this_model: str, budget_s: float) -> dict:
    """The fields that SamplingDetails and RelativeDetails share, for a check that sampled nothing
    (not applicable, or a work unit failed): no level, no power, no case."""
    return dict(
        alpha=math.nan,
        alpha_test=math.nan,
        target_tv=math.nan,
        power_level=math.nan,
        detectable_tv=math.inf,
        no_power=(),
        rejected=(),
        failed_samples=(),
        samples=0,
        sampling_seconds=0.0,
        cases=(),
        model=model,
        why_this_model=why_this_model,
        budget_s=budget_s,
    )


@dataclass(frozen=True)
class SamplingDetails(Details):
    kind: ClassVar[str] = "sampling"
    alpha: float  # family-wise level (Holm across every view of every case)
    alpha_test: float  # the strictest Holm level, alpha / views
    target_tv: float
    power_level: float
    detectable_tv: float  # the worst case's
    no_power: tuple[str, ...]  # cases that could have passed unseen
    rejected: tuple[str, ...]  # cases a view of which Holm rejected
    failed_samples: tuple[str, ...]  # cases with an impossible sample or a decoder error
    samples: int
    sampling_seconds: float
    samples_per_s: float | None
    cases: tuple[SamplingCase, ...]  # empty: nothing was sampled (the result says why)
    # which model certify sampled, and why (proofs/run/sampling_units.py); None for a bare check
    model: str | None = None
    why_this_model: str | None = None
    budget_s: float | None = None
    units: tuple[str, ...] = ()  # its work units' ids
    prompt_text: str | None = None  # the prompt as text, byte-level models only
    # cases the time budget cut short of N with nothing rejected: the check is incomplete, not failed
    incomplete: tuple[str, ...] = ()
    # cases whose engine refused their core parameters, "<parameters> (<case>)": the check failed
    refused_core: tuple[str, ...] = ()
    # cases some requests of which raised (SamplingCase.raised): the check failed on the exceptions
    raised: tuple[str, ...] = ()

    @classmethod
    def unsampled(cls, model: str, why_this_model: str, budget_s: float) -> SamplingDetails:
        """A check that sampled nothing (not applicable, or a work unit failed)."""
        return cls(**nothing_sampled(model, why_this_model, budget_s), samples_per_s=None)


# -- the engine-relative check (proofs/checks/relative.py) ----------------------------------------


@dataclass(frozen=True)
class RelativeView(Record):
    """One view of a case, both decoders' samples over the same bins: a homogeneity chi-square."""

    case: str
    view: str
    counted: tuple[int, int]  # samples of (candidate, reference) this view saw
    needed_n: int | None  # samples per decoder it needs to reach the target TV; None: < 2 bins
    bin_labels: tuple[str, ...]  # the test's bins (the last also holds tokens outside the law)
    bin_probs: tuple[float, ...]  # refdec's (claimed) law over them: the power is stated at it
    counts: tuple[tuple[int, ...], tuple[int, ...]]  # per bin: candidate's, reference's
    dof: int
    stat: float | None
    p_value: float  # 0 when the case failed on its samples (a decoder error, a malformed sample)
    detectable_tv: float  # binned TV between the two laws it detects with the target power
    empirical_tv: float | None  # between the two samples' binned frequencies
    has_power: bool
    holm_rejected: bool


@dataclass(frozen=True)
class RelativeCase(CaseSpec):
    order: str  # the sampler convention both decoders were asked for
    planned: int  # N per decoder
    samples: tuple[int, int]  # drawn: candidate, reference
    seconds: tuple[float, float]
    seeds: tuple[tuple[int, int], tuple[int, int]]  # first and last seed of each
    errors: tuple[str | None, str | None]  # a decoder failed
    malformed: tuple[int, int]  # samples of a wrong length or an id outside the vocabulary
    stopped_by_deadline: bool
    detectable_tv: float  # the worst of its views
    needed_n: int | None
    has_power: bool
    views: tuple[RelativeView, ...]


@dataclass(frozen=True)
class RelativeDetails(Details):
    kind: ClassVar[str] = "relative_sampling"
    candidate: str  # the decoder certified (--decoder)
    reference: str  # the same engine's plain decoder (--relative-to)
    alpha: float
    alpha_test: float
    target_tv: float
    power_level: float
    detectable_tv: float  # the worst case's
    no_power: tuple[str, ...]
    rejected: tuple[str, ...]
    failed_samples: tuple[str, ...]  # cases with a decoder error or a malformed sample
    samples: int  # drawn, both decoders
    sampling_seconds: float
    cases: tuple[RelativeCase, ...]  # empty: nothing was sampled (the result says why)
    model: str | None = None
    why_this_model: str | None = None
    budget_s: float | None = None
    units: tuple[str, ...] = ()
    incomplete: tuple[str, ...] = ()  # as SamplingDetails.incomplete


# -- the sampler conventions' difference (proofs/checks/convention.py) -----------------------------


@dataclass(frozen=True)
class ConventionView(Record):
    case: str
    view: str
    token_tv: float | None  # exact TV of the two next-token laws at the view's prefix (None: joint)
    binned_tv: float  # TV of the two laws as the view's bins see them


@dataclass(frozen=True)
class ConventionCase(Record):
    model: str
    case: str
    temperature: float
    top_k: int | None
    top_p: float | None
    order_matters: bool  # top-p set: the conventions may differ (else the same law)
    binned_tv: float  # the largest of its views'
    views: tuple[ConventionView, ...]


@dataclass(frozen=True)
class ConventionDetails(Details):
    kind: ClassVar[str] = "sampler_convention"
    informational: ClassVar[bool] = True
    claimed: str  # the convention the decoder declares: the certificate's laws
    other: str  # the convention it is compared with
    cases: tuple[ConventionCase, ...]
    how: str


# -- reproducibility (proofs/checks/reproducibility.py) -------------------------------------------


@dataclass(frozen=True)
class ReproducedRun(Record):
    setting: str
    seeds: int
    equal: int  # seeds whose two runs gave the same tokens


@dataclass(frozen=True)
class SeedDifference(Record):
    setting: str
    seed: int
    first: tuple[int, ...]
    second: tuple[int, ...]


@dataclass(frozen=True)
class ReproducibilityDetails(Details):
    kind: ClassVar[str] = "reproducibility"
    prompt: tuple[int, ...]
    tokens: int
    temperature: float
    seeds: tuple[int, ...]
    runs: tuple[ReproducedRun, ...]
    differences: tuple[SeedDifference, ...]
    seed_sensitive: bool  # two seeds gave different tokens: the check has power


@dataclass(frozen=True)
class SeedInvarianceDetails(ReproducibilityDetails):
    """proofs/checks/seed_invariance.py: each run's `equal` counts the decodes beside other prompts
    that gave the tokens decoded alone; a difference's `first` is the alone tokens, `second` the
    tokens beside others."""

    kind: ClassVar[str] = "seed_invariance"
    neighbours: int = 0  # other prompts decoded beside the target
    no_batch: tuple[str, ...] = ()  # settings without generate_batch: nothing decoded beside them


# -- mutation power (proofs/checks/mutation.py) ---------------------------------------------------


@dataclass(frozen=True)
class MutantRow(Record):
    id: str  # proofs.checks.mutation.LIBRARY's id
    bug: str  # what is wrong (a control: what is unusual)
    control: bool  # lossless: must not be rejected
    model: str
    settings: str
    cases: tuple[str, ...]  # sampling cases it ran on (none: greedy only)
    rejected_by: tuple[str, ...]  # "greedy", "sampling"
    rejected: bool
    ok: bool  # the outcome the plan requires
    promised: bool | None  # some view's binned shift reaches its detectable TV (None: a control)
    power_margin: float | None  # largest view shift / that view's detectable TV
    greedy_real_bugs: int
    greedy_divergences: int
    p_value: float | None
    alpha_case: float | None
    tv: float | None  # exact TV of the whole sequences (None: not enumerable)
    binned_tv: float | None  # the largest shift a view sees
    empirical_binned_tv: float | None
    detectable_tv: float | None
    n_samples: int
    seconds: float


@dataclass(frozen=True)
class MutationDetails(Details):
    kind: ClassVar[str] = "mutation"
    model: str
    why_this_model: str
    rows: tuple[MutantRow, ...]  # library order
    survivors: int
    below_power: tuple[str, ...]  # mutant ids not rejected and not promised
    controls_flagged: int
    target_tv: float
    power_level: float
    require_all: bool  # every mutant must die (the full plan)
    n_samples: int
    alpha: float
    seeds: str
    greedy_prompts: tuple[tuple[int, ...], ...]
    greedy_tokens: int
    cases: tuple[CaseSpec, ...]
    laws: dict[str, str]  # "<case> on <model>" -> its views' exact laws, in words
    wrong: tuple[str, ...]  # ids of the rows that are not ok


# -- false-alarm rate (proofs/checks/false_alarm.py) ----------------------------------------------


@dataclass(frozen=True)
class ControlAlarms(Record):
    control: str
    replicates: int
    rejections: int  # at alpha
    rejections_second_level: int  # at proofs.checks.false_alarm.SECOND_LEVEL


@dataclass(frozen=True)
class AlarmRate(Record):
    level: float
    rejections: int
    rate: float
    rate_ci95: tuple[float, float]  # Clopper-Pearson
    binomial_tail_p: float  # P(at least that many rejections | the level)


@dataclass(frozen=True)
class FalseAlarmDetails(Details):
    kind: ClassVar[str] = "false_alarm"
    model: str
    decoder: str  # the controls, comma-separated
    case: str  # the cases, comma-separated
    replicates: int  # sampling checks in all (per control x controls)
    per_control: tuple[ControlAlarms, ...]
    n_samples: tuple[int, ...]  # N per case (the plan's)
    target_tv: float
    alpha: float
    at_alpha: AlarmRate
    second_level: AlarmRate
    plausibility: float  # the check fails when a binomial tail is below this
    how: str
    seeds: str
    p_value_deciles: tuple[float, ...]  # of each replicate's smallest p-value


# -- Theorem 1 (proofs/checks/theorem1.py) --------------------------------------------------------


@dataclass(frozen=True)
class Theorem1Pair(Record):
    """Theorem 1 and the Lemma on one (p_R, p_d1, p_d2): see check_theorem1_pair."""

    eps1: float
    eps2: float
    p_both_rejected_ungated: float
    p_both_rejected_gated: float
    ratio_ungated: float
    ratio_gated: float
    lemma_tv: float
    lemma_bound: float
    lemma_ratio: float
    passed_ungated: bool
    passed_gated: bool
    passed_lemma: bool


@dataclass(frozen=True)
class Theorem1Example(Record):
    pair: Theorem1Pair
    case: int | None = None  # index of the triple (random and trace triples)
    laws: tuple[tuple[float, ...], ...] | None = None  # (p_R, p_d1, p_d2) when kept


@dataclass(frozen=True)
class Theorem1Details(Details):
    kind: ClassVar[str] = "theorem1"
    source: str  # where the (p_R, p_d1, p_d2) came from: "random", "search", "traces" or "given"
    cases: int  # triples checked
    cases_with_ratio: int  # triples with a reportable ratio (eps2 >= ratio_min_eps2)
    max_ratio_ungated: float
    max_lemma_ratio: float
    bounds: dict[str, float]  # ratio -> its bound
    ratio_min_eps2: float  # ratios are reported only where eps2 >= this
    slack: float  # absolute slack of every inequality
    worst: dict[str, Theorem1Example]  # ratio -> the triple that came nearest its bound
    failures: tuple[Theorem1Example, ...]  # the first few
    n_failures: int
    seed: int | None = None  # random and search
    vocab: int | None = None  # random and search
    examples: int | None = None  # search: hypothesis's max_examples
    search: str | None = None  # search: how hypothesis was steered
    model: str | None = None  # traces
    positions: int | None = None  # traces
    depth_pairs: int | None = None  # traces


# -- Theorem 2 (proofs/checks/theorem2.py) --------------------------------------------------------


@dataclass(frozen=True)
class DepthPairCost(Record):
    d1: int
    d2: int
    p_x1_rejected: float
    p_both_rejected: float
    cost: float  # exact expected recurrent steps per token
    bound: float  # the envelope bound


@dataclass(frozen=True)
class Theorem2TracesDetails(Details):
    kind: ClassVar[str] = "theorem2_traces"
    model: str
    R: int
    positions: int
    temperature: float
    mean_tv: tuple[float, ...]  # (R,) mean TV(p_r, p_R) over positions
    alpha: float  # envelope phi(r) = beta r^-alpha
    beta: float
    fitted_depths: tuple[int, ...]
    tv_floor: float
    envelope: tuple[float, ...]  # (R,) phi(r)
    envelope_covers_every_depth: bool
    d1_star: float
    d2_star: float
    bound_best_integer: tuple[int, int] | None
    measured_best: tuple[int, int]
    measured_best_cost: float
    rounded_star: tuple[int, int]
    rounded_star_cost: float | None
    autoregressive_cost: int
    how_measured: str
    grid: tuple[DepthPairCost, ...]
    worst_pair: tuple[int, int]  # the pair nearest its bound (the check's measured ratio)


@dataclass(frozen=True)
class Theorem2PublishedDetails(Details):
    kind: ClassVar[str] = "theorem2_published"
    alpha: float  # analysis.cost_model.PUBLISHED
    beta: float
    R: int
    d1: float
    d2: float
    measured_best: tuple[int, int]  # the paper's measured best pair
    d1_closed_form: float
    d2_closed_form: float
    cost_closed_form: float
    best_integer_depths: tuple[int, int]  # the cost model's own integer optimum


# -- speed (proofs/checks/speed.py) ----------------------------------------------------------------


@dataclass(frozen=True)
class SpeedRow(Record):
    setting: str
    decode: bool  # decode-only times (fastdec Stats on both sides) or whole generate() calls
    tokens_per_s: float
    wall_tokens_per_s: float
    speedup: float  # median over rounds of the baseline's time over this setting's
    speedup_wall: float
    speedup_cpu: float
    acceptance_rate: float | None = None  # fastdec telemetry
    gamma: float | None = None
    mean_live_lanes: float | None = None


@dataclass(frozen=True)
class SpeedError(Record):
    setting: str
    error: str


@dataclass(frozen=True)
class SpeedDetails(Details):
    kind: ClassVar[str] = "speed"
    informational: ClassVar[bool] = True
    rows: tuple[SpeedRow, ...]  # the baseline first
    errors: tuple[SpeedError, ...]  # settings that could not be built or run
    prompts: int
    tokens_per_prompt: int
    repeats: int
    workload: dict[str, int]  # speed.timing.Workload's fields
    clock: str
    device: str
    dtype: str
    baseline: str


# -- the bench regression gates (proofs/gates/baseline.py) ---------------------------------------------
# Not a certificate kind (not in KINDS): the gate's results go to gate.json, never to a certificate.


@dataclass(frozen=True)
class GateDetails(Details):
    kind: ClassVar[str] = "bench_gate"
    figure: str  # "<mode> / <setting> / <figure>", or "comparable"
    what: str  # "exact" (any change fails), "speed" (a drop beyond the tolerance fails), "comparable"
    baseline: object  # the baseline's value (exact: a count, a hash, calls per width; speed: a ratio)
    measured: object  # this run's value (None: not measured)
    tolerance: float | None  # speed: the relative drop allowed; None: exact, any change fails
    message: str  # names the figure, the baseline, the measured value and the tolerance
    rounds: tuple[float, ...] = ()  # speed: this run's per-round ratios (their median is `measured`)


# -- the per-position test on long samples (proofs/checks/positions.py) ----------------------------


@dataclass(frozen=True)
class PositionStratum(Record):
    """One test of the per-position check: the randomized PIT of the tokens of one position band
    (all of them, or the half whose law's entropy is at most / above the band's threshold), counted
    into equal bins and tested against uniform."""

    band: tuple[int, int]  # positions [lo, hi) in prompt + continuation
    half: str  # "all", "low" (entropy <= threshold) or "high"
    entropy_threshold: float | None  # nats; None for "all"
    tokens: int  # transforms counted
    counts: tuple[int, ...]  # per equal bin of U
    stat: float | None  # None: fewer than 5 per bin expected, not tested
    p_value: float
    detectable_tv: float  # binned TV of U it detects with the target power at its Holm level
    empirical_tv: float | None  # binned TV of the counts from uniform
    has_power: bool | None  # "all": detectable_tv <= target (required); a half: None (reported)
    holm_rejected: bool


@dataclass(frozen=True)
class PositionAlarms(Record):
    """The test's level at this run's stratum sizes, by simulation of lossless runs
    (proofs.stats.pit.simulate_false_alarms)."""

    replicates: int
    level: float
    rejections: int
    tail_p: float  # P(at least that many rejections | the level)
    level_second_level: float
    rejections_second_level: int
    tail_p_second_level: float
    plausibility: float  # the check fails when a tail is below this


@dataclass(frozen=True)
class MartingaleTest(Record):
    """One martingale test of the per-position check (proofs/stats/martingale.py): one statistic
    summed over one stratum's tokens, in the order they were drawn, as an e-process."""

    statistic: str  # "score", "pit_mean" or "pit_spread"
    band: tuple[int, int]  # positions [lo, hi); the whole horizon for half "whole"
    half: str  # "all", "low", "high" (a band's entropy halves) or "whole" (every band)
    tokens: int
    z: float | None  # S / sqrt(V): the standardized sum (sign: which way the tokens lean)
    log_e: float  # log of sup E over the run (the e-process's peak)
    p_value: float  # min(1, 1 / sup E): valid at any stopping time
    holm_rejected: bool


@dataclass(frozen=True)
class DriftPower(Record):
    """What one stratum of the martingale tests detects, in the user's terms: a sampler whose
    temperature is off by a factor over every token of the stratum, caught with probability
    `power` (martingale.detectable_factors, from the pilot's laws at the tokens tested)."""

    band: tuple[int, int]
    half: str  # "all" (a band) or "whole"
    tokens: int
    hotter: float  # the smallest factor > 1 detected (inf: none up to 4)
    colder: float  # the largest factor < 1 detected (0: none down to 1/4)
    kl_hotter: float  # the mean per-token KL(q || p) of that sampler, nats
    kl_colder: float


@dataclass(frozen=True)
class PositionsDetails(Details):
    kind: ClassVar[str] = "positions"
    model: str
    setting: str
    temperature: float
    top_k: int | None
    top_p: float | None
    order: str
    prompt: tuple[int, ...]
    tokens: int  # new tokens per sample
    boundaries: tuple[int, ...]  # the positions the bands are cut at, when wide enough
    bands: tuple[tuple[int, int], ...]
    left_out: tuple[int, ...]  # boundaries inside the horizon that are no band edge (a band too narrow)
    bins: int
    alpha: float  # family-wise (Holm across every stratum)
    alpha_test: float  # the strictest Holm level, alpha / strata
    target_tv: float
    power_level: float
    needed_per_band: int  # transforms each band needs to reach the target TV
    planned_samples: int  # the pilot included
    samples: int  # drawn
    seeds: tuple[int, int] | None  # first and last; the first is the pilot (entropy thresholds only)
    uniforms: str  # where the transform's v come from
    strata: tuple[PositionStratum, ...]
    detectable_tv: float  # the worst band's ("all")
    no_power: tuple[str, ...]  # bands short of the target TV
    rejected: tuple[str, ...]  # strata Holm rejected
    impossible: int  # tokens of probability 0 under the reference law
    first_impossible: str | None  # "seed S position P token X"
    malformed: int  # samples of a wrong length or an id outside the vocabulary
    decoder_error: str | None  # the decoder failed past draw's cap (sampling stopped there)
    stopped_by_deadline: bool
    decode_seconds: float
    reference_seconds: float  # the teacher-forced float64 passes
    false_alarm: PositionAlarms | None
    # -- martingale evidence (proofs/stats/martingale.py) --
    case: str = ""  # the sampling case the samples were drawn under ("" : the plan's own law)
    drift_target: float | None = None  # the whole horizon must detect a temperature off by 1 +- this
    martingale_alpha: float = 0.0  # family-wise level of the martingale tests (Holm); the binned: alpha
    martingale: tuple[MartingaleTest, ...] = ()
    drift_power: tuple[DriftPower, ...] = ()  # the whole horizon's, then each band's
    planned_by: str = "binned"  # what set N: "binned" (every band's TV) or "martingale" (the drift)
    pilot_varentropy: float | None = None  # mean Var_p(log p) over the planning samples (first call), nats^2
    stopped_early: bool = False  # a test rejected before N: sampling stopped there (valid: e-values)
    martingale_rejected: tuple[str, ...] = ()
    raised: RaisedRequests | None = None  # requests that raised (skipped): the check failed on them


KINDS: dict[str, type[Details]] = {
    d.kind: d
    for d in (
        GreedyDetails,
        DepthDetails,
        CoverageDetails,
        BitwiseDetails,
        SamplingDetails,
        RelativeDetails,
        ConventionDetails,
        ReproducibilityDetails,
        SeedInvarianceDetails,
        MutationDetails,
        FalseAlarmDetails,
        Theorem1Details,
        Theorem2TracesDetails,
        Theorem2PublishedDetails,
        SpeedDetails,
        PositionsDetails,  # the per-position test
    )
}
