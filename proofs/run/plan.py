"""The certify plans: what a run checks and how hard (docs/design.md section 8).

Two plans: QUICK, the CI gate (minutes on two CPU cores), and FULL, the nightly run (more
models, cases, samples, and the false-alarm rate). A plan is frozen data: a shard's identity
carries its hash (proofs/run/shards.py plan_hash), and `loopcert certify --predict` cuts one
down with dataclasses.replace (proofs/cost/predict.py probe_plan).
"""

from __future__ import annotations

from dataclasses import dataclass

from proofs.checks.distribution import Target
from proofs.checks.positions import PositionsPlan
from refdec.config import TINY_LOOPCODER, TINY_NANBEIGE, TINY_PRESETS, get_preset
from refdec.sampling import SamplingParams
from speed.report import PLANS as BENCH_PLANS
from speed.timing import Workload

# (name, params, n tokens), or (name, params, n tokens, picks): proofs/run/cases.py resolve_case
CaseSpec = tuple
REPRO_SEEDS, REPRO_TOKENS = 3, 6  # reproducibility: seeds x tokens, each decoded twice
SEED_NEIGHBOURS = 4  # seed invariance: the other prompts a target is decoded beside (the same seeds, tokens)


@dataclass(frozen=True)
class Pick:
    """A token a case names, taken from the sampled model's own law (token ids are the model's):
    the `rank`-th most likely token (0: the first) of the T=1 law after the chosen prompt gets
    `field`: "logit_bias" (bias `value`) or "stop_token_ids" (proofs/run/cases.py resolve_case)."""

    field: str
    rank: int = 0
    value: float = 0.0


@dataclass(frozen=True)
class CertifyPlan:
    mode: str
    greedy_presets: tuple[str, ...]  # tiny presets checked besides the certified model
    greedy_prompts: int
    greedy_tokens: int
    bitwise_prompts: int
    bitwise_tokens: int
    # each entry a case (name, params, n tokens) or a path's options, a tuple of cases in order of
    # preference: the sampled model's own law picks one (proofs/run/cases.py choose_case)
    sampling_cases: tuple[CaseSpec | tuple[CaseSpec, ...], ...]
    tv: float  # every sampling view must detect a binned TV >= this (N per case follows)
    sampling_budget_s: float  # sampling time of the whole run (--time-budget overrides)
    sampling_presets: bool  # also sample the tiny preset of the certified model's family
    blackbox_mutant_samples: int  # fastdec's adaptive-verify: slower per sample, far off the law
    false_alarm: int | None  # replicates of each lossless control, or None
    theorem1_random_cases: int
    theorem1_search_examples: int  # hypothesis-guided search (proofs/checks/theorem1.py)
    trace_prompts: int
    trace_positions: int  # at most this many positions (evenly spaced) of the trace prompts
    speed: Workload  # the speed check's prompts, tokens and rounds (`loopcert bench`'s)
    alpha: float = 1e-3  # family-wise level of each sampling check (Holm across its views)
    power: float = 0.99  # probability of detecting a binned TV >= tv
    mutant_ids: tuple[str, ...] | None = None  # a subset of proofs.checks.mutation.LIBRARY (None: all)
    case_cap: int | None = None  # a path's options: the first whose N is at most this (choose_case)
    # N of a sampling case at most this: a case whose target TV needs more is judged at the TV it
    # reaches here (proofs.checks.distribution.capped), its per-position test at depth beside it
    case_samples_cap: int | None = None
    # -- greedy at depth and boundary coverage (proofs/checks/depth.py) --
    depth_context: int = 256  # the greedy-at-depth horizon: at least this many context tokens ...
    depth_cap: int = 1024  # ... and two of the largest window, at most this many
    positions: PositionsPlan | None = None  # the per-position test on long samples (None: not run)
    # exact-law cases at boundaries: the plan's first case again, after a prompt
    # that ends just before each of this many of the run's boundaries (proofs/run/cases.py
    # boundary_positions: windows first, then the declared ones past the plain prompts)
    boundary_cases: int = 0

    @property
    def target(self) -> Target:
        return Target(self.tv, self.power, self.alpha)


# -- the engines' other parameters: the quick plan's case where each one binds -------------------
# One case of 3 tokens (the third's penalties count the second, accepted in the same block): N ~9,100
# on the default model (the two cases above ~4,900 and ~5,500), so the quick plan samples about
# 1.85x what it did. On a flat law (T=1.5) min-p, top-k and top-p all cut; the repetition penalty
# counts the prompt's tokens, frequency and presence the tokens generated before; a bias
# lifts the second most likely token; the most likely one is a stop from the second position on.
# On the default model the stop ends ~1% of the samples at token 2 (its penalties push it down):
# the stop-inside-a-block path is certified strongly by the mutation check's case and fastdec's
# tests (tests/fastdec/test_sampling_params.py), here only touched (docs/certify.md#sampling-parameters).
ENGINE_CASES = (
    (
        "T=1.5 min-p top-k top-p penalties bias stop",
        SamplingParams(
            1.5,
            top_k=8,
            top_p=0.9,
            min_p=0.05,
            repetition_penalty=1.3,
            frequency_penalty=0.4,
            presence_penalty=0.3,
            min_tokens=1,
        ),
        3,
        (Pick("logit_bias", 1, 1.5), Pick("stop_token_ids", 0)),
    ),
)
QUICK_CASES = (  # one concentrated case (low T, small top-k) beside one spread case
    ("T=0.7 top-k=4", SamplingParams(temperature=0.7, top_k=4), 3),
    ("T=1.5 top-p=0.9", SamplingParams(temperature=1.5, top_p=0.9), 3),
    *ENGINE_CASES,
)
# The full plan's cases. TV 0.01 needs N ~ lambda* / (kappa tv^2) per case: a view of balanced
# bins (kappa = 4) needs many times what a view with one bin holding most of the mass does
# (kappa = 1/(P(A)(1-P(A)))), so within the full plan's hour on two cores N buys only concentrated
# cases: one per path of the sampling transform, each the cheap twin of the mutant library's case
# for that path (the mutation check shows the same test at the same TV killing every bug of the
# path, proofs/checks/mutation.py). How concentrated a temperature makes a law depends on the
# model (its vocabulary, its training), so each path lists options and the sampled model's own
# law picks one (proofs/run/cases.py choose_case): the first with power past the first token
# within FULL_CASE_CAP samples. The first option of each path fits the default model; the later
# ones are what other vocabularies were found to need. tests/proofs/run/test_certify.py checks each
# chosen case against TV 0.01 on the default model and tiny-raven, test_certify_vocab.py the
# choice at other vocabularies; the N each needed is in docs/measurements.md. The spread cases
# (high temperature, a wide nucleus, more tokens) are left to the quick plan at TV 0.05, a GPU or
# shards: their bug classes are the ones these cases see, at a flatter law.
FULL_CASE_CAP = 45_000  # x 3 cases x 8 settings: what the full plan's hour on two cores samples
FULL_CASES = (
    # temperature, no filter: the whole support, a tail of small tokens; a temperature on one side
    # only, an unnormalised residual, an int8 draft, a rejected lane kept (mutants of case T=0.5)
    tuple((f"T={t}", SamplingParams(temperature=t), 3) for t in (0.2, 0.3, 0.15, 0.1, 0.4)),
    # the top-k path: a filter missing on the target side, a q reported before the filter, stale
    # KV after a rejection, a draft scored at another depth (mutants of case top-k=2)
    tuple(
        (f"T={t} top-k={k}", SamplingParams(temperature=t, top_k=k), 3)
        for t, k in ((0.2, 3), (0.3, 2), (0.15, 3), (0.1, 3), (0.3, 3))
    ),
    # the top-p path: the nucleus cut on either side, always-accept, resampling from the target
    # (mutants of case top-p=0.5)
    tuple(
        (f"T={t} top-p={p}", SamplingParams(temperature=t, top_p=p), 3)
        for t, p in ((0.3, 0.95), (0.4, 0.95), (0.2, 0.99), (0.2, 0.95), (0.1, 0.99))
    ),
)
# The two plans side by side, field: (QUICK, FULL). QUICK must fit CI's minutes; FULL samples
# more settings and models at TV 0.01 and measures the false-alarm rate.
SIDE_BY_SIDE = {
    "greedy_presets": (("tiny-ouro", "tiny-raven"), TINY_PRESETS),
    "greedy_prompts": (2, 6),
    "greedy_tokens": (12, 24),
    "bitwise_prompts": (2, 4),
    "bitwise_tokens": (16, 32),
    "sampling_cases": (QUICK_CASES, FULL_CASES),
    "case_cap": (None, FULL_CASE_CAP),
    # quick: at most 3,000 samples a case. The default model's cases need 4,900-9,100 at TV 0.05
    # and the tiny presets' engine case ~17,000 (their vocabularies' bins): they are judged at the
    # TV 3,000 samples reach (0.065-0.09 on the default model, ~0.12 on the tiny presets; each view's
    # row states it), each case's per-position test at depth beside them. Uncapped, first-token
    # sampling was half the quick plan's CPU on the default model and 90% of an engine row's
    # (mlx-lm plain: 40,700 samples, 1,050 CPU-s). FULL: every case at its target
    "case_samples_cap": (3000, None),
    "tv": (0.05, 0.01),
    "sampling_budget_s": (270.0, 2400.0),
    "sampling_presets": (False, True),
    "blackbox_mutant_samples": (200, 1000),
    "false_alarm": (None, 200),
    "theorem1_random_cases": (1000, 20000),
    "theorem1_search_examples": (200, 3000),
    "trace_prompts": (4, 8),
    "trace_positions": (48, 256),
    "speed": (BENCH_PLANS["quick"].grid, BENCH_PLANS["full"].grid),
    # greedy at depth: quick >= 256 context and two of the largest window (within reason for CI);
    # full: the model's maximum length, or 4,096
    "depth_context": (256, 4096),
    "depth_cap": (1024, 4096),
    # the first case again after a prompt ending before one of the boundaries (quick). The full
    # plan has no room for one: on the default model the case at 64 needs N 51,487 at TV 0.01 (the
    # three plain cases 85,308 together, the hour's budget), and its per-position test reads every
    # position to 1,024 tokens in every setting
    "boundary_cases": (1, 0),
}
# -- the per-position test on long samples (proofs/checks/positions.py) ----------------------------
# Every token of long samples judged under its exact law: martingale evidence (score, PIT moments)
# and the binned PIT (docs/certify.md#the-per-position-test). T=1 without a filter is the plan's own
# law: every token in play, laws spread enough that a drift shows. N is planned from the first
# call's laws so that the tail (from 48 tokens after the prompt to the horizon) detects a
# temperature off by `drift` with probability 0.99: a drift that starts anywhere in the first 48
# tokens, or earlier, is caught. Each of the plan's sampling cases is also sampled at depth
# (`cases`; N for a drift of case_drift, or the binned test's): a filter or a penalty that goes
# wrong past some position shows there, as impossible tokens (a filter) or as a drift of the score.
# QUICK: 320 tokens after the 32-token prompt, through the grid's last setting (the most
# speculative); the tail detects a 10% drift (on the default model 16 samples, on the tiny presets
# 37-160; docs/measurements.md); each sampling case at depth draws the binned test's N (8 samples
# on the default model: a filter or penalty gone wrong shows as impossible tokens in the first
# call), its temperature power stated, not planned (at 25% the engines' case needed 21 samples on
# the default model and 238 on tiny-ouro: minutes of the quick plan and of every engine row in
# CI); every band a binned TV 0.15. FULL: 1,024 tokens, every setting, a 3% drift, each
# case 10%.
POSITIONS_QUICK = PositionsPlan(
    SamplingParams(temperature=1.0),
    tokens=320,
    tv=0.15,
    min_band=64,
    budget_s=120.0,
    drift=0.1,
    cases=True,
)
POSITIONS_FULL = PositionsPlan(
    SamplingParams(temperature=1.0),
    tokens=1024,
    tv=0.1,
    min_band=128,
    budget_s=900.0,
    all_settings=True,
    false_alarm_replicates=20000,
    drift=0.03,
    cases=True,
    case_drift=0.1,
    max_samples=2000,
)
SIDE_BY_SIDE["positions"] = (POSITIONS_QUICK, POSITIONS_FULL)
# -- end of the per-position block ------------------------------------------------------------------
QUICK, FULL = (
    CertifyPlan(mode, **{field: pair[i] for field, pair in SIDE_BY_SIDE.items()})
    for i, mode in enumerate(("quick", "full"))
)

# A decoder author's own test (loopcert.testing.assert_lossless's default, `loopcert certify
# --smoke`, docs/decoders.md "Certify from Python and from your tests"): every check, cut down to
# seconds on a tiny preset. Each core field sampled at least once (two cases of 3 tokens at TV 0.2:
# temperature with top-k, temperature with top-p); long samples at depth under the plan's own law
# (the tail from 48 tokens after the prompt detects a 30% temperature drift) and under each case
# (N from the binned test: a filter that fails past a position gives impossible tokens), so a
# decoder that turns lossy past a position fails here in seconds; greedy at depth past 64
# positions; greedy and bitwise on a few short prompts; two mutants (one the test must kill, one
# lossless control it must pass); a one-prompt speed figure. A subtler bias needs QUICK
# (docs/measurements.md, "The smoke plan"). Not a certificate to publish: its stamp says "smoke".
POSITIONS_SMOKE = PositionsPlan(
    SamplingParams(temperature=1.0),
    tokens=126,
    tv=0.3,
    min_band=64,
    budget_s=30.0,
    rows=16,
    false_alarm_replicates=500,
    drift=0.3,
    cases=True,
    max_samples=120,
)
SMOKE = CertifyPlan(
    "smoke",
    greedy_presets=(),
    greedy_prompts=2,
    greedy_tokens=8,
    bitwise_prompts=1,
    bitwise_tokens=6,
    sampling_cases=(
        ("T=1 top-k=4", SamplingParams(temperature=1.0, top_k=4), 3),
        ("T=0.8 top-p=0.9", SamplingParams(temperature=0.8, top_p=0.9), 3),
    ),
    tv=0.2,
    sampling_budget_s=60.0,
    sampling_presets=False,
    blackbox_mutant_samples=40,
    false_alarm=None,
    theorem1_random_cases=50,
    theorem1_search_examples=20,
    trace_prompts=2,
    trace_positions=16,
    speed=Workload(prompts=1, prompt_len=48, tokens=4, repeats=1),
    mutant_ids=("always-accept", "control-gate-inverted"),
    depth_context=72,
    depth_cap=96,
    positions=POSITIONS_SMOKE,
)
PLANS = {
    "quick": QUICK,
    "full": FULL,
    "smoke": SMOKE,
}  # tests swap a reduced plan in with monkeypatch.setitem


def case_options(entry: CaseSpec | tuple[CaseSpec, ...]) -> tuple[CaseSpec, ...]:
    """One entry of CertifyPlan.sampling_cases -> its cases in order of preference."""
    return (entry,) if isinstance(entry[0], str) else tuple(entry)


def sampling_preset(plan: CertifyPlan, model_name: str, family: str) -> str | None:
    """The tiny preset a plan also samples beside the certified model (the FULL plan: its family's,
    as extra evidence), or None (the QUICK plan, or a tiny preset certified)."""
    tinies = TINY_PRESETS + (TINY_LOOPCODER, TINY_NANBEIGE)  # every family's: those two stand apart there
    if not plan.sampling_presets or model_name in tinies:
        return None
    return next(t for t in tinies if get_preset(t).family == family)
