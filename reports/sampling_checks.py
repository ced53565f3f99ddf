"""The certificate's section on distributional equality under sampling (kind sampling): one
group per sampled model, one table row per view of each case, and every reason a view fell
short (docs/design.md section 7)."""

from __future__ import annotations

from proofs.details import SamplingDetails
from proofs.result import CheckResult
from reports.markdown import DASH, fmt, table, verdict

HEADERS = [
    "check",
    "case",
    "view",
    "N drawn/planned",
    "counted",
    "samples/s",
    "bins",
    "p-value",
    "Holm",
    "detects TV >=",
    "N needed",
    "observed TV",
    "result",
]


def sampled(c: CheckResult) -> SamplingDetails | None:
    """The check's details when it sampled at least one case."""
    d = c.details
    return d if isinstance(d, SamplingDetails) and d.cases else None


def summary_notes(d: SamplingDetails) -> list[str]:
    """Why a sampling check failed, for the summary: rejected on its samples is named as such,
    never as "no power" (proofs.checks.distribution.evaluate keeps the two apart)."""
    notes = []
    if d.rejected:
        notes.append("rejected: " + ", ".join(d.rejected))
    if d.failed_samples:
        notes.append("impossible samples or decoder errors: " + ", ".join(d.failed_samples))
    if d.no_power:
        notes.append("no power: " + ", ".join(d.no_power))
    return notes


def rows_and_notes(c: CheckResult) -> tuple[list[list], list[str]]:
    """One check's table rows (one per view of each case) and its notes."""
    d = sampled(c)
    if c.not_applicable:
        return [], [f"- {c.name}: not applicable: {c.not_applicable}"]
    if d is None:
        return [[c.name] + [DASH] * 11 + [verdict(c.passed)]], [f"- {c.name}: could not run: `{c.error}`"]
    rows, notes = [], []
    for r in d.cases:
        for v in r.views:
            ok = not v.holm_rejected and v.has_power and not r.impossible and not r.error
            res = verdict(ok) if v.has_power or v.holm_rejected else "**FAIL** (no power)"
            rows.append(
                [
                    c.name,
                    r.case,
                    v.view,
                    f"{r.samples}/{r.planned}",
                    v.counted,
                    r.samples_per_s,
                    v.bins,
                    v.p_value,
                    "rejected" if v.holm_rejected else "kept",
                    v.detectable_tv,
                    v.needed_n,
                    v.empirical_tv,
                    res,
                ]
            )
        if r.error:
            notes.append(f"- {c.name} {r.case}: the decoder failed: `{r.error}`")
        if r.impossible:
            notes.append(
                f"- {c.name} {r.case}: {r.impossible} sample(s) of probability 0 under the reference law"
            )
        if not r.has_power:
            notes.append(
                f"- {c.name} {r.case}: no power: reached TV {fmt(r.detectable_tv)} "
                f"with {r.samples} samples in {fmt(r.seconds, 3)} s; needs N = {fmt(r.needed_n)}"
            )
    notes.append(f"- power of {c.name}: {fmt(c.power)}; {fmt(d.samples_per_s, 3)} samples/s")
    return rows, notes


def laws_lines(group: list[CheckResult]) -> list[str]:
    """How each case was chosen, its views' exact laws, and the views the rules left out."""
    laws, untested, chosen = {}, {}, {}
    for c in group:
        d = sampled(c)
        for r in d.cases if d else ():
            laws[r.case] = "; ".join(f"{v.view}: {v.law}" for v in r.views) or "no view"
            if r.not_tested:
                untested[r.case] = "; ".join(r.not_tested)
            if r.chosen:
                chosen[r.case] = f"{r.case} (N {r.planned:,}): {r.chosen}"
    orders = {r.order for c in group if (d := sampled(c)) for r in d.cases}
    out = []
    if orders - {"temperature-first"}:
        out.append(
            f"Laws under the {', '.join(sorted(orders))} sampler convention, the one the decoder declares "
            "(refdec.sampling.SAMPLER_ORDERS; the section on the sampler convention has the distance "
            "to the other)."
        )
    if chosen:
        out.append(
            "Cases chosen from this model's law (proofs.run.cases.choose_case): "
            + " | ".join(chosen.values())
            + "."
        )
    if laws:
        out.append("Laws: " + " | ".join(f"**{k}**: {v}" for k, v in laws.items()) + ".")
    if untested:
        out.append(
            "Views not tested (by rule, from the law): "
            + " | ".join(f"{k}: {v}" for k, v in untested.items())
            + "."
        )
    return out


def sampling_section(checks: list[CheckResult]) -> str:
    out = ["## Distributional equality under sampling"]
    if not checks:
        return out[0] + "\n\nNo sampling check ran."
    first = next((d for d in map(sampled, checks) if d), None)
    target = (
        f" must detect a binned TV >= {fmt(first.target_tv)} with probability >= {fmt(first.power_level)}"
        if first
        else ""
    )
    out.append(
        "Exact law of the first n tokens from refdec (float64), seen through views: the first token's "
        "law, each next token's law given the most likely prefix, and the most likely whole "
        "sequences, each with bins fixed from the law alone (likely tokens singly, the rest pooled by "
        "probability "
        "rank). The candidate is sampled N times per case with seeds base .. base+N-1; chi-square "
        f"goodness of fit per view; Holm across every view of a setting. Every view{target} "
        "(non-central chi-square); N per case is what its hungriest view needs. A view that falls "
        "short "
        "(fewer than 2 bins, or the time budget stopped sampling) FAILS as no power, with the N it "
        "would need."
    )
    groups: dict[str, list[CheckResult]] = {}
    for c in checks:
        model = c.details.model if isinstance(c.details, SamplingDetails) else None
        groups.setdefault(model or c.name, []).append(c)
    for model, group in groups.items():
        head = next((d for d in map(sampled, group) if d), None)
        if head is not None:
            why = f" ({head.why_this_model})" if head.why_this_model else ""
            prompt = repr(head.prompt_text) if head.prompt_text else fmt(head.cases[0].prompt)
            out.append(
                f"### {model}{why}\n\nPrompt {prompt}; family-wise alpha {fmt(head.alpha)} per "
                "setting "
                f"({fmt(head.alpha_test)} per view); sampling budget {fmt(head.budget_s, 3)} s "
                "per setting."
            )
        rows, notes = [], []
        for c in group:
            r, n = rows_and_notes(c)
            rows += r
            notes += n
        out.append(table(rows, HEADERS))
        out.append("\n".join(notes))
        out += laws_lines(group)
    return "\n\n".join(out)
