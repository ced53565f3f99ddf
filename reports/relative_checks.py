"""The certificate's section on the engine-relative check (kind relative_sampling): the candidate's
samples against the same engine's plain decoder, one row per view of each case
(docs/certify.md#the-engine-relative-check)."""

from __future__ import annotations

from proofs.details import RelativeDetails
from proofs.result import CheckResult
from reports.markdown import DASH, fmt, table, verdict

HEADERS = [
    "check",
    "case",
    "view",
    "N drawn (cand./ref.)/planned",
    "counted (cand./ref.)",
    "bins",
    "statistic",
    "p-value",
    "Holm",
    "detects TV >=",
    "N needed",
    "observed TV",
    "result",
]


def sampled(c: CheckResult) -> RelativeDetails | None:
    d = c.details
    return d if isinstance(d, RelativeDetails) and d.cases else None


def summary_notes(d: RelativeDetails) -> list[str]:
    """Why an engine-relative check failed, for the summary (rejected, broken, or no power)."""
    notes = []
    if d.rejected:
        notes.append("the two decoders' laws differ: " + ", ".join(d.rejected))
    if d.failed_samples:
        notes.append("decoder errors or malformed samples: " + ", ".join(d.failed_samples))
    if d.no_power:
        notes.append("no power: " + ", ".join(d.no_power))
    return notes


def rows_and_notes(c: CheckResult) -> tuple[list[list], list[str]]:
    d = sampled(c)
    if c.not_applicable:
        return [], [f"- {c.name}: not applicable: {c.not_applicable}"]
    if d is None:
        return [[c.name] + [DASH] * 11 + [verdict(c.passed)]], [f"- {c.name}: could not run: `{c.error}`"]
    rows, notes = [], []
    for r in d.cases:
        broken = any(r.errors) or any(r.malformed)
        for v in r.views:
            ok = not v.holm_rejected and v.has_power and not broken
            res = verdict(ok) if v.has_power or v.holm_rejected else "**FAIL** (no power)"
            rows.append(
                [
                    c.name,
                    r.case,
                    v.view,
                    f"{r.samples[0]}/{r.samples[1]}/{r.planned}",
                    f"{v.counted[0]}/{v.counted[1]}",
                    v.dof + 1,
                    v.stat,
                    v.p_value,
                    "rejected" if v.holm_rejected else "kept",
                    v.detectable_tv,
                    v.needed_n,
                    v.empirical_tv,
                    res,
                ]
            )
        for side, err, bad in zip(("candidate", "reference"), r.errors, r.malformed, strict=True):
            if err:
                notes.append(f"- {c.name} {r.case}: the {side} failed: `{err}`")
            if bad:
                notes.append(f"- {c.name} {r.case}: {bad} malformed sample(s) from the {side}")
        if not r.has_power:
            notes.append(
                f"- {c.name} {r.case}: no power: reached TV {fmt(r.detectable_tv)} with "
                f"{r.samples[0]}/{r.samples[1]} samples; needs N = {fmt(r.needed_n)} per decoder"
            )
    notes.append(f"- power of {c.name}: {fmt(c.power)}")
    return rows, notes


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
    rows, notes = [], []
    for c in checks:
        r, n = rows_and_notes(c)
        rows += r
        notes += n
    out.append(table(rows, HEADERS))
    out.append("\n".join(notes))
    return "\n\n".join(out)
