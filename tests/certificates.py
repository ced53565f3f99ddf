"""Typed certificates for tests (tests/reports/test_render.py, tests/proofs/test_certificate.py,
tests/proofs/run/test_skips.py): one small constructor per kind of check's details, each with
plausible defaults that a test overrides by field (dataclasses.replace), a stamp, and `result` /
`certificate` to wrap them. The real ones come from proofs.run.certify.certify."""

from __future__ import annotations

import math
from dataclasses import replace

from proofs.certificate import Certificate, Seeds, Stamp
from proofs.details import (
    AlarmRate,
    BitwiseDetails,
    BitwiseRun,
    ControlAlarms,
    ConventionCase,
    ConventionDetails,
    ConventionView,
    CoverageDetails,
    CoverageRow,
    DepthDetails,
    DepthDivergence,
    DepthPairCost,
    DepthRun,
    Divergence,
    FalseAlarmDetails,
    GreedyDetails,
    GreedyRun,
    MutantRow,
    MutationDetails,
    PositionAlarms,
    PositionsDetails,
    PositionStratum,
    RelativeCase,
    RelativeDetails,
    RelativeView,
    ReproducedRun,
    ReproducibilityDetails,
    SamplingCase,
    SamplingDetails,
    SamplingView,
    SeedDifference,
    SeedInvarianceDetails,
    SpeedDetails,
    SpeedRow,
    Theorem1Details,
    Theorem1Example,
    Theorem1Pair,
    Theorem2PublishedDetails,
    Theorem2TracesDetails,
)
from proofs.result import CheckResult
from proofs.run.certify import verdict_of


def stamp(**changes) -> Stamp:
    s = Stamp(
        commit="abc123",
        date="2026-01-01T00:00:00+00:00",
        python="3.11",
        torch="2.13",
        numpy="2.0",
        cuda="none",
        platform="Linux",
        device="cpu",
        device_name="x86_64",
        threads=1,
        cpu_count=2,
        dtype="float32",
        model="tiny-raven",
        seeds=Seeds("0 + i for sample i of each case", "0 + i for sample i of each mutant case", 0, 0),
        mode="quick",
        decoder="fastdec",
        seed=0,
        R=6,
        vocab_size=13,
        settings=("pipelined",),
        default_depths=(1, 2),
        alpha=1e-3,
        target_tv=0.05,
        power=0.99,
        sampling_budget_s=270.0,
        work_units=12,
        seconds=12.0,
        command="loopcert certify tiny-raven --quick",
    )
    return replace(s, **changes)


def result(details, name: str, measured: float = 0.0, bound: float = 0.0, passed: bool = True, **fields):
    """A CheckResult of `details` (a record, or a kind when the check measured nothing)."""
    if isinstance(details, str):
        return CheckResult(name, measured, bound, passed, kind=details, **fields)
    return CheckResult(name, measured, bound, passed, details, **fields)


def not_applicable(kind: str, name: str, why: str, bound: float = math.nan) -> CheckResult:
    """A check that does not apply to the model, as proofs/run/run.py returns one (the trace checks
    on R = 2): nothing measured, passed, the reason."""
    return CheckResult(name, math.nan, bound, True, kind=kind, not_applicable=why)


def certificate(*checks: CheckResult, **stamp_changes) -> Certificate:
    failed = tuple(c.name for c in checks if c.failed)
    incomplete = tuple(c.name for c in checks if c.incomplete is not None)
    skipped = {c.name: c.skipped for c in checks if c.skipped}
    return Certificate(
        verdict_of(failed, incomplete), failed, skipped, stamp(**stamp_changes), checks, incomplete
    )


def divergence(**changes) -> Divergence:
    d = Divergence(
        model="tiny-raven",
        setting="pipelined d1=1 d2=2",
        prompt=(0, 5),
        dtype="float32",
        position=4,
        reference=3,
        candidate=7,
        top2_margin=2e-5,
        candidate_gap=2e-5,
        classified="numerical tie",
    )
    return replace(d, **changes)


def greedy(**changes) -> GreedyDetails:
    d = GreedyDetails(
        runs=(GreedyRun("tiny-raven", "pipelined d1=1 d2=2", "float32", prompts=2, tokens=12, agree=2),),
        divergences=(),
        real_bugs=0,
        numerical_ties=0,
        tie_tolerance={"float64": 1e-9, "float32": 1e-3},
        tokens_per_prompt=12,
    )
    return replace(d, **changes)


def depth(**changes) -> DepthDetails:
    d = DepthDetails(
        model="tiny-loopcoder",
        horizon=20,
        placements=(
            "prompt 7 + 4 tokens: prefill ends before 8, generation crosses it (loop_window_size 8 wraps)",
        ),
        runs=(DepthRun("pipelined d1=1 d2=2", "float32", placements=1, agree=0, tokens=4),),
        divergences=(
            DepthDivergence(
                "pipelined d1=1 d2=2",
                "float32",
                7,
                4,
                9,
                3,
                5,
                0.4,
                "real bug",
                "loop_window_size 8 wraps (position 8) + 1",
            ),
        ),
        real_bugs=1,
        numerical_ties=0,
        crossings=((7, 4),),
    )
    return replace(d, **changes)


def coverage(**changes) -> CoverageDetails:
    d = CoverageDetails(
        model="tiny-loopcoder",
        horizon=20,
        rows=(
            CoverageRow(8, "model", "loop_window_size 8 wraps", 1, 2, 100, "covered"),
            CoverageRow(
                126, "model", "max_seq_len 128: the last positions reached", 0, 0, 0, "beyond the horizon"
            ),
        ),
        uncovered=0,
    )
    return replace(d, **changes)


def bitwise(**changes) -> BitwiseDetails:
    d = BitwiseDetails(
        width=8,
        dtype="float32",
        tokens_per_prompt=16,
        runs=(BitwiseRun("pipelined d1=1 d2=2", prompts=2, equal=2),),
        mismatches=(),
    )
    return replace(d, **changes)


def view(**changes) -> SamplingView:
    v = SamplingView(
        case="T=0.7 top-k=4",
        view="token 1",
        law="law of token 1 over 13 tokens",
        counted=4000,
        needed_n=3800,
        target_tv=0.05,
        bin_labels=("token 3", "ranks 2..13"),
        bin_probs=(0.5, 0.5),
        counts=(2000, 2000),
        bins=2,
        stat=0.1,
        p_value=0.4,
        detectable_tv=0.048,
        empirical_tv=0.01,
        has_power=True,
        holm_rejected=False,
    )
    return replace(v, **changes)


def case(**changes) -> SamplingCase:
    c = SamplingCase(
        case="T=0.7 top-k=4",
        temperature=0.7,
        top_k=4,
        top_p=None,
        prompt=(0, 5),
        tokens=3,
        planned=4000,
        samples=4000,
        seconds=10.0,
        samples_per_s=400.0,
        batched=True,
        impossible=0,
        error=None,
        seeds=(0, 3999),
        stopped_by_deadline=False,
        detectable_tv=0.048,
        needed_n=3800,
        has_power=True,
        not_tested=("token 2 | 3: the prefix has probability 0.1 < 0.2",),
        chosen="the first of 2; passed over T=0.3 top-k=4: no power",
        views=(view(),),
    )
    return replace(c, **changes)


def sampling(**changes) -> SamplingDetails:
    d = SamplingDetails(
        alpha=1e-3,
        alpha_test=5e-4,
        target_tv=0.05,
        power_level=0.99,
        detectable_tv=0.048,
        no_power=(),
        rejected=(),
        failed_samples=(),
        samples=4000,
        sampling_seconds=10.0,
        samples_per_s=400.0,
        cases=(case(),),
        model="tiny-raven",
        why_this_model="the certified model, at its own vocabulary (V=13)",
        budget_s=60.0,
    )
    return replace(d, **changes)


def relative_view(**changes) -> RelativeView:
    v = RelativeView(
        case="T=0.7 top-k=4",
        view="token 1",
        counted=(8000, 8000),
        needed_n=7600,
        bin_labels=("token 3", "ranks 2..13 + outside the law"),
        bin_probs=(0.5, 0.5),
        counts=((4010, 3990), (3980, 4020)),
        dof=1,
        stat=0.2,
        p_value=0.65,
        detectable_tv=0.048,
        empirical_tv=0.004,
        has_power=True,
        holm_rejected=False,
    )
    return replace(v, **changes)


def relative(**changes) -> RelativeDetails:
    c = RelativeCase(
        case="T=0.7 top-k=4",
        temperature=0.7,
        top_k=4,
        top_p=None,
        prompt=(0, 5),
        tokens=3,
        order="filters-first",
        planned=8000,
        samples=(8000, 8000),
        seconds=(20.0, 12.0),
        seeds=((0, 7999), (8000, 15999)),
        errors=(None, None),
        malformed=(0, 0),
        stopped_by_deadline=False,
        detectable_tv=0.048,
        needed_n=7600,
        has_power=True,
        views=(relative_view(),),
    )
    d = RelativeDetails(
        candidate="mlx-lm speculative",
        reference="mlx-lm plain",
        alpha=1e-3,
        alpha_test=5e-4,
        target_tv=0.05,
        power_level=0.99,
        detectable_tv=0.048,
        no_power=(),
        rejected=(),
        failed_samples=(),
        samples=16000,
        sampling_seconds=32.0,
        cases=(c,),
        model="tiny-raven",
        why_this_model="the certified model, at its own vocabulary (V=13)",
        budget_s=60.0,
    )
    return replace(d, **changes)


def convention(**changes) -> ConventionDetails:
    d = ConventionDetails(
        claimed="filters-first",
        other="temperature-first",
        cases=(
            ConventionCase(
                model="tiny-raven",
                case="T=1.5 top-p=0.9",
                temperature=1.5,
                top_k=None,
                top_p=0.9,
                order_matters=True,
                binned_tv=0.061,
                views=(
                    ConventionView("T=1.5 top-p=0.9", "token 1", 0.064, 0.061),
                    ConventionView("T=1.5 top-p=0.9", "3 tokens", None, 0.02),
                ),
            ),
        ),
        how="the decoder declares filters-first: every sampling case is judged against that law",
    )
    return replace(d, **changes)


def reproducibility(**changes) -> ReproducibilityDetails:
    d = ReproducibilityDetails(
        prompt=(0, 5),
        tokens=6,
        temperature=1.0,
        seeds=(0, 1, 2),
        runs=(ReproducedRun("pipelined d1=1 d2=2", seeds=3, equal=3),),
        differences=(),
        seed_sensitive=True,
    )
    return replace(d, **changes)


def seed_invariance(**changes) -> SeedInvarianceDetails:
    d = SeedInvarianceDetails(
        prompt=(0, 5),
        tokens=6,
        temperature=1.0,
        seeds=(0, 1, 2),
        runs=(ReproducedRun("pipelined d1=1 d2=2", seeds=9, equal=9),),
        differences=(),
        seed_sensitive=True,
        neighbours=4,
        no_batch=(),
    )
    return replace(d, **changes)


def seed_difference(**changes) -> SeedDifference:
    return replace(SeedDifference("pipelined d1=1 d2=2", 1, (3, 4, 5), (3, 4, 6)), **changes)


def mutant(**changes) -> MutantRow:
    r = MutantRow(
        id="always-accept",
        bug="u = 0",
        control=False,
        model="tiny-ouro",
        settings="specref d1=1",
        cases=("top-p=0.5",),
        rejected_by=("sampling",),
        rejected=True,
        ok=True,
        promised=True,
        power_margin=4.8,
        greedy_real_bugs=0,
        greedy_divergences=0,
        p_value=0.0,
        alpha_case=1e-3,
        tv=0.58,
        binned_tv=0.58,
        empirical_binned_tv=0.59,
        detectable_tv=0.12,
        n_samples=1000,
        seconds=0.5,
    )
    return replace(r, **changes)


def control(**changes) -> MutantRow:
    c = mutant(
        id="control-gate-inverted",
        bug="x",
        control=True,
        settings="specref",
        cases=("T=0.5",),
        rejected_by=(),
        rejected=False,
        promised=None,
        power_margin=None,
        p_value=0.8,
        tv=1.6e-16,
        binned_tv=1.6e-16,
        empirical_binned_tv=0.05,
        detectable_tv=0.13,
    )
    return replace(c, **changes)


def mutation(**changes) -> MutationDetails:
    d = MutationDetails(
        model="tiny-ouro",
        why_this_model="R=4, vocab 13: every law is enumerated exactly",
        rows=(mutant(), control()),
        survivors=0,
        below_power=(),
        controls_flagged=0,
        target_tv=0.05,
        power_level=0.99,
        require_all=False,
        n_samples=1000,
        alpha=1e-3,
        seeds="0 + i for sample i of each case",
        greedy_prompts=((1, 2, 3),),
        greedy_tokens=12,
        cases=(),
        laws={},
        wrong=(),
    )
    return replace(d, **changes)


def false_alarm(**changes) -> FalseAlarmDetails:
    d = FalseAlarmDetails(
        model="tiny-ouro",
        decoder="control-gate-inverted",
        case="T=0.5",
        replicates=200,
        per_control=(ControlAlarms("control-gate-inverted", 200, 0, 9),),
        n_samples=(1200,),
        target_tv=0.05,
        alpha=1e-3,
        at_alpha=AlarmRate(1e-3, 0, 0.0, (0.0, 0.018), 1.0),
        second_level=AlarmRate(0.05, 9, 0.045, (0.021, 0.084), 0.68),
        plausibility=1e-3,
        how="counts drawn from each control's exact law (multinomial)",
        seeds="numpy default_rng([0, 200])",
        p_value_deciles=tuple(i / 10 for i in range(11)),
    )
    return replace(d, **changes)


def theorem1_pair(**changes) -> Theorem1Pair:
    p = Theorem1Pair(
        eps1=0.2,
        eps2=0.1,
        p_both_rejected_ungated=0.05,
        p_both_rejected_gated=0.1,
        ratio_ungated=0.5,
        ratio_gated=1.0,
        lemma_tv=0.3,
        lemma_bound=0.5,
        lemma_ratio=0.6,
        passed_ungated=True,
        passed_gated=True,
        passed_lemma=True,
    )
    return replace(p, **changes)


def theorem1(**changes) -> Theorem1Details:
    d = Theorem1Details(
        source="random",
        cases=1000,
        cases_with_ratio=900,
        max_ratio_ungated=1.0,
        max_lemma_ratio=0.97,
        bounds={"ratio_gated": 2.0, "ratio_ungated": 1.0, "lemma_ratio": 1.0},
        ratio_min_eps2=1e-6,
        slack=1e-12,
        worst={"ratio_gated": Theorem1Example(theorem1_pair(), case=3)},
        failures=(),
        n_failures=0,
        seed=0,
        vocab=8,
    )
    return replace(d, **changes)


def theorem2_traces(**changes) -> Theorem2TracesDetails:
    d = Theorem2TracesDetails(
        model="tiny-raven",
        R=4,
        positions=18,
        temperature=1.0,
        mean_tv=(0.4, 0.2, 0.1, 0.0),
        alpha=1.1,
        beta=0.45,
        fitted_depths=(1, 2, 3),
        tv_floor=1e-9,
        envelope=(0.45, 0.2, 0.13, 0.1),
        envelope_covers_every_depth=True,
        d1_star=1.2,
        d2_star=2.6,
        bound_best_integer=(1, 2),
        measured_best=(1, 2),
        measured_best_cost=2.4,
        rounded_star=(1, 3),
        rounded_star_cost=2.6,
        autoregressive_cost=4,
        how_measured="exact E[C]",
        grid=(DepthPairCost(1, 2, p_x1_rejected=0.4, p_both_rejected=0.1, cost=2.2, bound=3.0),),
        worst_pair=(1, 2),
    )
    return replace(d, **changes)


def theorem2_published(**changes) -> Theorem2PublishedDetails:
    d = Theorem2PublishedDetails(
        alpha=1.03,
        beta=0.175,
        R=32,
        d1=1.26,
        d2=8.85,
        measured_best=(2, 8),
        d1_closed_form=1.2583,
        d2_closed_form=8.8451,
        cost_closed_form=5.0,
        best_integer_depths=(1, 8),
    )
    return replace(d, **changes)


def speed_row(setting: str, speedup: float, **changes) -> SpeedRow:
    r = SpeedRow(
        setting,
        decode=True,
        tokens_per_s=20.0 * speedup,
        wall_tokens_per_s=20.0 * speedup,
        speedup=speedup,
        speedup_wall=speedup,
        speedup_cpu=speedup,
    )
    return replace(r, **changes)


def speed(**changes) -> SpeedDetails:
    d = SpeedDetails(
        rows=(
            speed_row("autoregressive (baseline)", 1.0),
            speed_row("pipelined", 1.4, acceptance_rate=0.6, gamma=1.7),
        ),
        errors=(),
        prompts=1,
        tokens_per_prompt=16,
        repeats=2,
        workload={"prompts": 1, "prompt_len": 48, "tokens": 16, "repeats": 2, "seed": 0},
        clock="cpu",
        device="cpu",
        dtype="float32",
        baseline="autoregressive",
    )
    return replace(d, **changes)


# -- the per-position test on long samples (proofs/checks/positions.py) ---------------------------


def position_stratum(**changes) -> PositionStratum:
    s = PositionStratum(
        band=(32, 128),
        half="all",
        entropy_threshold=None,
        tokens=672,
        counts=(70, 66, 64, 68, 71, 63, 69, 65, 67, 69),
        stat=0.9,
        p_value=0.9,
        detectable_tv=0.145,
        empirical_tv=0.02,
        has_power=True,
        holm_rejected=False,
    )
    return replace(s, **changes)


def positions(**changes) -> PositionsDetails:
    d = PositionsDetails(
        model="default",
        setting="pipelined d1=2 d2=8",
        temperature=1.0,
        top_k=None,
        top_p=None,
        order="temperature-first",
        prompt=(100, 101, 32),
        tokens=320,
        boundaries=(1, 2, 4, 8, 16, 32, 64, 128, 256),
        bands=((32, 128),),
        left_out=(64,),
        bins=10,
        alpha=1e-3,
        alpha_test=1e-3 / 3,
        target_tv=0.15,
        power_level=0.99,
        needed_per_band=626,
        planned_samples=8,
        samples=8,
        seeds=(0, 7),
        uniforms="numpy default_rng([0x504954, seed]) per sample",
        strata=(
            position_stratum(),
            position_stratum(
                half="low", entropy_threshold=1.2, tokens=300, has_power=None, detectable_tv=0.2
            ),
            position_stratum(half="high", entropy_threshold=1.2, tokens=372, has_power=None, stat=None),
        ),
        detectable_tv=0.145,
        no_power=(),
        rejected=(),
        impossible=0,
        first_impossible=None,
        malformed=0,
        decoder_error=None,
        stopped_by_deadline=False,
        decode_seconds=18.0,
        reference_seconds=4.0,
        false_alarm=PositionAlarms(
            replicates=2000,
            level=1e-3,
            rejections=1,
            tail_p=0.86,
            level_second_level=0.05,
            rejections_second_level=93,
            tail_p_second_level=0.78,
            plausibility=1e-3,
        ),
    )
    return replace(d, **changes)


def one_of_each_kind() -> tuple[CheckResult, ...]:
    """A passing check of every kind, and one of each way a check can measure nothing."""
    return (
        result(greedy(divergences=(divergence(),), numerical_ties=1), "greedy_float64"),
        result(bitwise(), "bitwise_fixed_width"),
        result(sampling(), "sampling[tiny-raven: pipelined]", 0.4, 5e-4, power="TV >= 0.05"),
        result(relative(), "relative_sampling[tiny-raven: pipelined]", 0.65, 5e-4, power="TV >= 0.05"),
        result(positions(), "positions[tiny-raven: pipelined]", 0.9, 1e-3 / 3, power="TV >= 0.15"),
        result(convention(), "sampler_convention", 0.061, math.nan),
        result(reproducibility(), "reproducibility"),
        result(seed_invariance(), "seed_invariance"),
        result(mutation(), "mutation"),
        result(false_alarm(), "false_alarm", 0.0, 1e-3),
        result(theorem1(), "theorem1_random", 1.99, 2.0),
        result(theorem2_traces(), "theorem2_traces", 0.6, 1.0),
        result(theorem2_published(), "theorem2_published", 0.005, 0.01),
        result(speed(), "speed", 1.4, 1.0, seconds=3.5),
        result(depth(real_bugs=0, divergences=()), "greedy_depth"),
        result(coverage(), "coverage"),
        result("bitwise", "bitwise_skipped", skipped="no fixed-width mode"),
        result("theorem1", "theorem1_search", math.nan, 2.0, False, error="ImportError: hypothesis"),
    )
