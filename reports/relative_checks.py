"""The certificate's section on the engine-relative check (kind relative_sampling): the candidate's
samples against the same engine's plain decoder, one row per view of each case
(docs/certify.md#the-engine-relative-check)."""

from __future__ import annotations

from proofs.details import RelativeCase, RelativeDetails
from proofs.result import CheckResult
from reports.markdown import fmt
from reports.sampling_checks import (
    JUDGED,
    case_by_case,
    failure_notes,
    judged_cells,
    no_power_note,
    table_and_notes,
)

HEADERS = [
    "check",
    "case",
    "view",
    "N drawn (cand./ref.)/planned",
    "counted (cand./ref.)",
    "bins",
    "statistic",
    *JUDGED,
]


def sampled(c: CheckResult) -> RelativeDetails | None:
    d = c.details
    return d if isinstance(d, RelativeDetails) and d.cases else None


def summary_notes(d: RelativeDetails) -> list[str]:
    """Why an engine-relative check failed, for the summary (rejected, broken, or no power)."""
    return failure_notes(d, "the two decoders' laws differ", "decoder errors or malformed samples")


def case_rows_and_notes(name: str, r: RelativeCase) -> tuple[list[list], list[str]]:
    """One case's table rows (one per view) and its notes."""
    broken = any(r.errors) or any(r.malformed)
    drawn = f"{r.samples[0]}/{r.samples[1]}/{r.planned}"
    rows = [
        [name, r.case, v.view, drawn, f"{v.counted[0]}/{v.counted[1]}", v.dof + 1, v.stat]
        + judged_cells(v, broken, r.stopped_by_deadline)
        for v in r.views
    ]
    notes = []
    for side, err, bad in zip(("candidate", "reference"), r.errors, r.malformed, strict=True):
        if err:
            notes.append(f"- {name} {r.case}: the {side} failed: `{err}`")
        if bad:
            notes.append(f"- {name} {r.case}: {bad} malformed sample(s) from the {side}")
    return rows, notes + no_power_note(name, r, f"{r.samples[0]}/{r.samples[1]} samples", " per decoder")


def rows_and_notes(c: CheckResult) -> tuple[list[list], list[str]]:
    return case_by_case(c, sampled(c), len(HEADERS), lambda r: case_rows_and_notes(c.name, r))


def relative_section(checks: list[CheckResult]) -> str:
    if not checks:
        return ""
    first = next((d for d in map(sampled, checks) if d), None)
    out = ["## Engine-relative check: the candidate against the same engine's plain decoder"]
    who = f" ({first.candidate} against {first.reference})" if first else ""
    out.append(
        f"Every sampling case is drawn N times from both decoders{who}, the candidate with seeds "
        "base .. base+N-1 and the reference with base+N .. base+2N-1; each view counts both over its "
        "bins (fixed from refdec's exact law, one more bin for tokens outside it) and a chi-square test "
        "of homogeneity asks whether the two laws differ, Holm across every view. It needs no exact "
        "law of the engine: it tells a lossy speculative mode from a different sampler or numerics, "
        "which the plain mode shares."
        + (
            f" Every view must detect a binned TV >= {fmt(first.target_tv)} between the two laws with "
            f"probability >= {fmt(first.power_level)} at its Holm level ({fmt(first.alpha_test)}); N "
            "per decoder is twice the one-sample need (n_eff = N/2)."
            if first
            else ""
        )
    )
    out += table_and_notes(checks, rows_and_notes, HEADERS)
    return "\n\n".join(out)
