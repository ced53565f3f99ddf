"""The certificate's sections on the checks' own power: the mutant table (kind mutation) and the
false-alarm rate of the sampling check on lossless controls (kind false_alarm)."""

from __future__ import annotations

from proofs.details import FalseAlarmDetails, MutationDetails
from proofs.result import CheckResult
from reports.markdown import DASH, fmt, heading, section, table

MUTANT_HEADERS = [
    "decoder",
    "bug / change",
    "settings",
    "cases",
    "N",
    "rejected by",
    "p-value",
    "exact TV",
    "binned TV",
    "detects TV >=",
    "margin",
    "promised",
    "verdict",
]


@section(MutationDetails, "## Mutation power")
def mutation_section(c: CheckResult, d: MutationDetails, title: str) -> str:
    rule = (
        "every mutant must be rejected"
        if d.require_all
        else "every mutant whose binned TV shift reaches its view's detectable TV must be rejected; the "
        "others "
        "are reported as below this plan's power"
    )
    controls = sum(r.control for r in d.rows)
    out = [
        heading(c, title),
        f"{len(d.rows) - controls} wrong decoders and {controls} lossless controls, on {d.model} "
        + (f"({d.why_this_model}) " if d.why_this_model else "")
        + f"(greedy: {len(d.greedy_prompts)} prompts x {d.greedy_tokens} tokens against refdec "
        f"float64; sampling planned for a detectable TV of {fmt(d.target_tv)}, alpha "
        f"{fmt(d.alpha)}). Rule: {rule}; no control may be flagged. Survivors: {d.survivors} "
        f"(below power: {', '.join(d.below_power) or 'none'}); controls flagged: "
        f"{d.controls_flagged}. Exact TV: the mutant's enumerated law vs refdec's over whole "
        "sequences; "
        "binned TV: the largest shift a view sees; margin: the largest (view shift / that view's "
        "detectable TV), >= 1 means the plan promises the kill.",
        table(
            [
                [
                    r.id,
                    r.bug,
                    r.settings,
                    ", ".join(r.cases) or "greedy only",
                    r.n_samples or DASH,
                    " + ".join(r.rejected_by) or "none",
                    r.p_value,
                    r.tv,
                    r.binned_tv,
                    r.detectable_tv,
                    r.power_margin,
                    DASH if r.control else fmt(r.promised),
                    "ok" if r.ok else "**WRONG**",
                ]
                for r in d.rows
            ],
            MUTANT_HEADERS,
        ),
    ]
    return "\n\n".join(out)


@section(FalseAlarmDetails, "## False-alarm rate")
def false_alarm_section(c: CheckResult, d: FalseAlarmDetails, title: str) -> str:
    rows = [
        [fmt(a.level), a.rejections, fmt(a.rate), fmt(a.rate_ci95), fmt(a.binomial_tail_p)]
        for a in (d.at_alpha, d.second_level)
    ]
    return "\n\n".join(
        [
            heading(c, title),
            f"{d.decoder} on {d.model}, cases {d.case}, "
            f"N per case {fmt(d.n_samples)} (the plan's): "
            f"{d.replicates} independent sampling checks ({d.how}).",
            table(
                rows,
                ["level", "rejections", "rate", "95% CI (Clopper-Pearson)", "P(at least that many | level)"],
            ),
            table(
                [[f"{10 * i}%", q] for i, q in enumerate(d.p_value_deciles)],
                ["quantile", "smallest p-value"],
            ),
        ]
    )
