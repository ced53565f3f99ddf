"""The certificate's section on distributional equality under sampling (kind sampling): one
group per sampled model, one table row per view of each case, and every reason a view fell
short (docs/design.md section 7)."""

from __future__ import annotations

import math
from collections.abc import Callable

from proofs.details import (
    RaisedRequests,
    RelativeCase,
    RelativeDetails,
    RelativeView,
    SamplingCase,
    SamplingDetails,
    SamplingView,
)
from proofs.result import CheckResult
from reports.markdown import DASH, fmt, table, verdict

# a Holm-judged view's last columns, in this table and the engine-relative check's (judged_cells)
JUDGED = ["p-value", "Holm", "detects TV >=", "N needed", "observed TV", "result"]
HEADERS = ["check", "case", "view", "N drawn/planned", "counted", "samples/s", "bins", *JUDGED]


def sampled(c: CheckResult) -> SamplingDetails | None:
    """The check's details when it sampled at least one case."""
    d = c.details
    return d if isinstance(d, SamplingDetails) and d.cases else None


def failure_notes(d: SamplingDetails | RelativeDetails, rejected: str, failed: str) -> list[str]:
    """Why a check that samples failed, for the summary: its rejected cases (named `rejected`), the
    cases that failed on their samples (named `failed`), and the cases with no power; the three are
    kept apart (proofs.checks.distribution.judged)."""
    named = ((rejected, d.rejected), (failed, d.failed_samples), ("no power", d.no_power))
    return [f"{label}: " + ", ".join(cases) for label, cases in named if cases]


MESSAGE_CHARS = 120  # of a request's exception in a summary line (the case's note has it whole)


def raised_text(r: RaisedRequests, samples: int, reached: str, message_chars: int | None = None) -> str:
    """Requests that raised and what the completed samples say, in one sentence: "N of M requests
    raised (first seed S: message); the K completed samples: <law>; bias bound ...". `reached`: the
    power statement of the completed samples (what they detect), said when nothing rejected.
    `message_chars`: the summary's form (one console line), the message cut there, the bound not
    explained."""
    message = r.first_message
    if message_chars is not None and len(message) > message_chars:
        message = message[: message_chars - 3] + "..."
    why = (
        ""
        if message_chars is not None
        else (" (the failed fraction: the kept samples follow the law given that no request failed)")
    )
    law = {
        "rejected": "rejected, past the bias bound or on impossible tokens",
        "not rejected": f"not rejected ({reached})",
        "within the bias bound": "not judged beyond the bias bound (a deviation no larger than dropping the "
        "failed requests can explain)",
    }[r.law]
    return (
        f"{r.failed} of {r.requests} requests raised (first seed {r.first_seed}: {message}); the {samples} "
        f"completed samples: {law}; bias bound TV <= {fmt(r.bias_bound, 3)}{why}"
    )


def case_reached(r: SamplingCase, d: SamplingDetails | None) -> str:
    """What a case's samples detect: the worst view's binned TV at the check's power."""
    power = f" with probability {fmt(d.power_level)}" if d is not None else ""
    return f"they detect a binned TV >= {fmt(r.detectable_tv, 3)}{power}"


def summary_notes(d: SamplingDetails) -> list[str]:
    """Why a sampling check failed, for the summary: requests that raised, with what the completed
    samples say (first: the console's line); rejected on its samples is named as such, never as
    "no power"; a refusal of core parameters, which fails it; and the other cases the engine
    refused (a pass or a failure says nothing of them)."""
    refused = [  # refused_core's entries are "<parameters> (<case>)"
        c.case for c in d.cases if c.refused and not any(e.endswith(f" ({c.case})") for e in d.refused_core)
    ]
    raised = [
        f"{c.case}: " + raised_text(c.raised, c.samples, case_reached(c, d), MESSAGE_CHARS)
        for c in d.cases
        if c.raised
    ]
    return (
        raised
        + failure_notes(d, "rejected", "impossible samples or decoder errors")
        + (["refused core parameters: " + "; ".join(d.refused_core)] if d.refused_core else [])
        + (["refused by the engine: " + ", ".join(refused)] if refused else [])
    )


def case_by_case(
    c: CheckResult,
    d: SamplingDetails | RelativeDetails | None,
    columns: int,
    one_case: Callable[[SamplingCase | RelativeCase], tuple[list[list], list[str]]],
    speed: Callable[[SamplingDetails | RelativeDetails], str] = lambda d: "",
) -> tuple[list[list], list[str]]:
    """One check's rows in a table of `columns` columns and its notes: those of each case of its
    details `d` (`one_case`), then its power (and `speed`, said after it); or, when it sampled
    nothing (`d` None), why: not applicable, or it could not run."""
    if c.not_applicable:
        return [], [f"- {c.name}: not applicable: {c.not_applicable}"]
    if d is None:
        return [[c.name] + [DASH] * (columns - 2) + [verdict(c.passed)]], [
            f"- {c.name}: could not run: `{c.error}`"
        ]
    rows, notes = [], []
    for r in d.cases:
        case_rows, case_notes = one_case(r)
        rows += case_rows
        notes += case_notes
    notes.append(f"- power of {c.name}: {fmt(c.power)}{speed(d)}")
    return rows, notes


def table_and_notes(checks: list[CheckResult], rows_and_notes, headers: list[str]) -> list[str]:
    """The checks' rows (`rows_and_notes(c) -> (rows, notes)`) as one table under `headers`, then
    all their notes: two paragraphs of a section."""
    rows, notes = [], []
    for c in checks:
        r, n = rows_and_notes(c)
        rows += r
        notes += n
    return [table(rows, headers), "\n".join(notes)]


def holm_cell(v: SamplingView | RelativeView) -> str:
    """Holm's decision; a rejection no larger than the view's bias bound (requests raised) says so."""
    if not v.holm_rejected:
        return "kept"
    bound = getattr(v, "bias_bound", None)
    if bound is not None and v.empirical_tv is not None and v.empirical_tv <= bound:
        return f"rejected, within the bias bound {fmt(bound, 3)}"
    return "rejected"


def judged_cells(v: SamplingView | RelativeView, broken: bool, cut: bool = False) -> list:
    """A view's JUDGED cells: its p-value, Holm's decision, the TV it detects and the N it needs,
    the TV observed, and its result (`broken`: its case failed on its samples, which fails it;
    `cut`: the time budget stopped its case, which short of power is incomplete, not failed)."""
    ok = not v.holm_rejected and v.has_power and not broken
    if v.has_power or v.holm_rejected:
        res = verdict(ok)
    else:
        res = "INCOMPLETE (time budget)" if cut and v.needed_n else "**FAIL** (no power)"
    return [
        v.p_value,
        holm_cell(v),
        v.detectable_tv,
        v.needed_n,
        v.empirical_tv,
        res,
    ]


def no_power_note(name: str, r: SamplingCase | RelativeCase, drawn: str, per: str = "") -> list[str]:
    """A case's note when it has no power: the TV it reached with `drawn` (what it drew), and the N it
    needs (`per`: per what, when not per case); none when it has power."""
    if r.has_power:
        return []
    reached = f"reached TV {fmt(r.detectable_tv)} with {drawn}"
    why = "incomplete, the time budget ran out" if r.stopped_by_deadline and r.needed_n else "no power"
    return [f"- {name} {r.case}: {why}: {reached}; needs N = {fmt(r.needed_n)}{per}"]


def case_rows_and_notes(
    name: str, r: SamplingCase, d: SamplingDetails | None = None
) -> tuple[list[list], list[str]]:
    """One case's table rows (one per view) and its notes."""
    broken = bool(r.impossible or r.error)
    rows = [
        [name, r.case, v.view, f"{r.samples}/{r.planned}", v.counted, r.samples_per_s, v.bins]
        + judged_cells(v, broken, r.stopped_by_deadline)
        for v in r.views
    ]
    notes = []
    if r.refused:  # not sampled: neither a pass nor a failure of the case
        return rows, [f"- {name} {r.case}: refused by the engine: `{r.refused}`"]
    if r.error:
        notes.append(f"- {name} {r.case}: the decoder failed: `{r.error}`")
    if r.raised:  # the check fails on them; each view is judged within its bias bound
        bounds = ", ".join(f"{v.view} {fmt(v.bias_bound, 3)}" for v in r.views if v.bias_bound is not None)
        notes.append(
            f"- {name} {r.case}: "
            + raised_text(r.raised, r.samples, case_reached(r, d))
            + f"; per view (failed / (counted + failed): a prefix's view may have held them all): {bounds}"
        )
    if r.impossible:
        notes.append(f"- {name} {r.case}: {r.impossible} sample(s) of probability 0 under the reference law")
    if r.raised:  # failed on the exceptions: the power of its completed samples is said above
        return rows, notes
    return rows, notes + no_power_note(name, r, f"{r.samples} samples in {fmt(r.seconds, 3)} s")


def rows_and_notes(c: CheckResult) -> tuple[list[list], list[str]]:
    """One check's table rows (one per view of each case) and its notes."""
    return case_by_case(
        c,
        sampled(c),
        len(HEADERS),
        lambda r: case_rows_and_notes(c.name, r, c.details),
        lambda d: f"; {fmt(d.samples_per_s, 3)} samples/s",
    )


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


BUDGET_MARGIN = 1.25  # the budget advised over the sum of N / rate: a unit's share is its part of
# the budget by N plus what the units before it left (proofs/run/budget.py), not its time needed


def budget_advice(checks: list[CheckResult]) -> str | None:
    """When the time budget stopped sampling short of N: what reaching every case's N takes at the
    rates this run measured, and the --time-budget that gives it; None when no case was cut."""
    cases = [c for d in filter(None, map(sampled, checks)) for c in d.cases]
    cut = [c for c in cases if c.stopped_by_deadline]
    if not cut:
        return None
    timed = [c for c in cases if c.samples_per_s]
    need = sum(c.planned / c.samples_per_s for c in timed)
    unknown = len(cases) - len(timed)
    advice = (
        f"**The time budget stopped sampling short of N in {len(cut)} of {len(cases)} case(s)** "
        "(they FAIL as no power). "
    )
    if timed:
        budget = math.ceil(BUDGET_MARGIN * need)
        advice += (
            f"At the rates this run measured, every case reaching its N takes about {need:,.0f} s "
            f"({need / 60:.0f} min) of sampling in one process: rerun with `--time-budget {budget}` "
            f"({BUDGET_MARGIN:g} x that), or spread it over `--jobs N`, `--shard I/N` with `loopcert "
            "merge`, or `--executor ray`, or sample on a GPU (`--device cuda`). "
        )
    if unknown:
        advice += (
            f"{unknown} case(s) drew no sample, so their rate is unknown: `loopcert certify ... "
            "--predict SECONDS` measures every case's rate and says the budget the plan needs."
        )
    return advice.rstrip()


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
    own = {  # cases the plan's N cap holds at their own TV (proofs.checks.distribution.capped)
        r.case: r.views[0].target_tv
        for d in map(sampled, checks)
        if d
        for r in d.cases
        if r.views and r.views[0].target_tv != d.target_tv
    }
    if own:
        out.append(
            "The plan caps N per case: these cases are judged at the binned TV their views reach within "
            "the cap, not at the plan's (the per-position test under the same case judges every token "
            "of long samples): " + "; ".join(f"{k}: TV {fmt(v)}" for k, v in own.items()) + "."
        )
    if advice := budget_advice(checks):
        out.append(advice)
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
        out += table_and_notes(group, rows_and_notes, HEADERS)
        out += laws_lines(group)
    return "\n\n".join(out)
