"""The certificate's sections on LoopSpec's theorems (docs/design.md section 4): Theorem 1 on exact
laws (kind theorem1) and Theorem 2's cost model on traces and the published optimum (kinds
theorem2_traces, theorem2_published)."""

from __future__ import annotations

from proofs.details import Theorem1Details, Theorem2PublishedDetails, Theorem2TracesDetails
from proofs.result import CheckResult
from reports.markdown import DASH, error_lines, fmt, table, verdict


def triples_of(d: Theorem1Details) -> tuple[str, int]:
    """Where a Theorem 1 check's triples came from, in words, and how many it checked."""
    if d.source == "search":
        return f"hypothesis search steering towards counterexamples (V={d.vocab})", d.examples
    if d.source == "random":
        return f"random + adversarial families (V={d.vocab}, seed {d.seed})", d.cases
    if d.source == "traces":
        return f"{d.model} traces: {d.positions} positions x {d.depth_pairs} depth pairs", d.cases
    return f"{d.source} triples", d.cases


def outcome(c: CheckResult) -> str:
    """A theorem check's result without its figures, as the summary gives it (reports.render.status):
    a failure is always FAIL; "not applicable" and "skipped" only when nothing failed, with the reason."""
    if c.passed and c.not_applicable:
        return f"not applicable: {c.not_applicable}"
    if c.passed and c.skipped:
        return f"skipped: {c.skipped}"
    return verdict(c.passed)


def theorem1_section(checks: list[CheckResult]) -> str:
    rows = []
    for c in checks:
        d = c.details
        if c.skipped or c.not_applicable or not isinstance(d, Theorem1Details):
            rows.append([c.name, DASH, DASH, DASH, DASH, outcome(c)])
        else:
            source, n = triples_of(d)
            rows.append([source, n, c.measured, d.max_ratio_ungated, d.max_lemma_ratio, verdict(c.passed)])
    return "\n\n".join(
        [
            "## Theorem 1",
            "Largest P(both proposals rejected) / eps2 seen (eps2 = TV(p_d2, p_R)), "
            "gated (bound 2) and ungated (bound 1), and the Lemma eps1 TV(p_d2 (-) p_d1, "
            "p_R (-) p_d1) / eps2 (bound 1), exact laws from fastdec.accept.",
            table(
                rows,
                [
                    "triples",
                    "cases",
                    "max gated ratio (<= 2)",
                    "max ungated ratio (<= 1)",
                    "max Lemma ratio (<= 1)",
                    "result",
                ],
            ),
        ]
    )


def traces_lines(c: CheckResult, d: Theorem2TracesDetails) -> list[str]:
    R = d.R
    fitted = d.fitted_depths or (1, R)
    best = sorted(d.grid, key=lambda g: g.cost)[:8]
    return [
        f"{d.model}, {d.positions} positions, T=1: envelope phi(r) = beta r^-alpha with "
        f"alpha = {fmt(d.alpha)}, beta = {fmt(d.beta)}, fitted on depths "
        f"{fitted[0]}..{fitted[-1]} (mean TV >= {fmt(d.tv_floor)}; deeper, p_r equals p_R "
        f"to float64 rounding); it bounds every depth: "
        f"{fmt(d.envelope_covers_every_depth)}; closed form (d1*, d2*) = "
        f"({fmt(d.d1_star, 3)}, {fmt(d.d2_star, 3)}); best integer pair of the bound: "
        f"{fmt(d.bound_best_integer)}; measured best {fmt(d.measured_best)} with "
        f"E[C] = {fmt(d.measured_best_cost)} steps/token "
        f"(rounded optimum {fmt(d.rounded_star)}: "
        f"{fmt(d.rounded_star_cost)}; autoregressive: {R}). Measured = {d.how_measured}. "
        f"Check: measured E[C] <= envelope bound at every grid pair; worst ratio "
        f"{fmt(c.measured)} at {fmt(d.worst_pair)}: {verdict(c.passed)}.",
        table(
            [[r + 1, tv, env] for r, (tv, env) in enumerate(zip(d.mean_tv, d.envelope))],
            ["depth r", "mean TV(p_r, p_R)", "envelope phi(r)"],
        ),
        "Best pairs by measured cost:\n\n"
        + table(
            [[g.d1, g.d2, g.p_x1_rejected, g.p_both_rejected, g.cost, g.bound] for g in best],
            ["d1", "d2", "P(x1 rejected)", "P(both rejected)", "E[C] measured", "envelope bound"],
        ),
    ]


def published_table(c: CheckResult, d: Theorem2PublishedDetails) -> str:
    return table(
        [
            ["alpha, beta, R", f"{d.alpha}, {d.beta}, {d.R}"],
            ["(d1*, d2*) closed form", fmt((d.d1_closed_form, d.d2_closed_form), 4)],
            ["published", fmt((d.d1, d.d2))],
            ["largest difference", f"{fmt(c.measured)} (tolerance {fmt(c.bound)})"],
            ["result", verdict(c.passed)],
        ],
        ["published reproduction", ""],
    )


def theorem2_section(traces: CheckResult | None, published: CheckResult | None) -> str:
    out = ["## Theorem 2"]
    if traces is not None:
        if isinstance(traces.details, Theorem2TracesDetails):
            out += traces_lines(traces, traces.details)
        else:
            out.append(f"{traces.name}: {outcome(traces)}" + error_lines(traces))
    if published is not None:
        if isinstance(published.details, Theorem2PublishedDetails):
            out.append(published_table(published, published.details))
        else:
            out.append(f"{published.name}: {outcome(published)}" + error_lines(published))
    return "\n\n".join(out)
