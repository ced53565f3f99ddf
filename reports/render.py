"""Render a certificate (proofs.certificate.Certificate) as markdown (docs/design.md section 9).

Render-only: every number printed here was computed by a check; nothing is recomputed or
judged. Layout: the verdict line first, the stamp, a summary table of every check (measured
vs bound), then one section per kind of check (RENDERED), in this order: greedy and bitwise
(reports/exactness.py), sampling (reports/sampling_checks.py), the engine-relative check
(reports/relative_checks.py), the per-position test on long samples (reports/positions.py), the
sampler conventions' finding (reports/convention.py),
reproducibility, the mutant table and
the false-alarm rate (reports/mutants.py), Theorems 1 and 2 (reports/theorems.py), speed. A
check of a kind with no section still gets a short one (generic_section).
"""

from __future__ import annotations

from proofs.certificate import Certificate
from proofs.details import GreedyDetails, PositionsDetails, RelativeDetails, SamplingDetails, SpeedDetails
from proofs.result import CheckResult
from reports import positions as positions_report
from reports import relative_checks
from reports.convention import convention_section
from reports.coverage import coverage_section, depth_section
from reports.exactness import (
    bitwise_section,
    greedy_section,
    reproducibility_section,
    seed_invariance_section,
)
from reports.markdown import DASH, error_lines, fmt, heading, section, table, verdict
from reports.mutants import false_alarm_section, mutation_section
from reports.positions import positions_section
from reports.relative_checks import relative_section
from reports.sampling_checks import sampling_section, summary_notes
from reports.scope import scope_parts
from reports.theorems import theorem1_section, theorem2_section

__all__ = ["DASH", "fmt", "render_certificate", "status", "table", "verdict"]


def stamp_section(cert: Certificate) -> str:
    s = cert.stamp
    rows = [
        ["command", f"`{s.command}`" if s.command else DASH],
        ["commit", s.commit],
        ["date (UTC)", s.date],
        ["model", f"{s.model} (R={s.R}, vocab {s.vocab_size})"],
        ["decoder", s.decoder],
        [
            "sampler convention",
            s.sampler_order
            + (
                " (declared by the decoder: its laws are judged)"
                if s.sampler_order != "temperature-first"
                else ""
            ),
        ],
        *([["relative to", s.relative_to]] if s.relative_to else []),
        *sampling_rows(s),
        ["settings", "; ".join(s.settings)],
        ["device", s.device + (f" ({s.device_name})" if s.device_name else "")],
        ["dtype", s.dtype],
        ["plan", s.mode],
        [
            "seeds",
            f"base {s.seed}; sampling {fmt(s.seeds.sampling)}; "
            f"mutants {fmt(s.seeds.mutants)}; greedy {s.seeds.greedy}",
        ],
        ["torch / CUDA", f"{s.torch} / {s.cuda}"],
        ["python / platform", f"{s.python} / {s.platform}"],
        ["torch threads / CPUs", f"{s.threads} / {s.cpu_count}"],
        ["run time", f"{fmt(s.seconds, 3)} s"],
    ]
    return "## Stamp\n\n" + table(rows, ["", ""])


def sampling_rows(s) -> list[list[str]]:
    """The stamp's rows on the engines' other sampling parameters (none for a certificate written
    before decoders declared them)."""
    if s.sampling_fields is None:
        return []
    c = s.sampling_conventions or {}
    scope = c.get("penalty_scope", "split")
    if c.get("penalty_window"):
        scope += f", the last {c['penalty_window']} tokens"
    said = ", ".join(s.sampling_fields) + f" (min-p {c.get('min_p_order', 'min-p-first')}; penalties {scope})"
    rows = [["other sampling parameters", said if s.sampling_fields else "none declared"]]
    if s.not_declared:
        rows.append(["cases it does not declare", "; ".join(s.not_declared)])
    return rows


def status(c: CheckResult) -> tuple[str, str]:
    """(result, note) of one check for the summary: a failure is always FAIL; "not applicable" and
    "skipped" only when nothing failed, each with its reason; partial gaps go in the note."""
    d = c.details
    notes = []
    if c.not_applicable:
        notes.append(f"not applicable: {c.not_applicable}")
    if isinstance(d, GreedyDetails) and d.not_applicable:
        notes.append(f"{len(d.not_applicable)} run(s) not applicable: " + "; ".join(d.not_applicable))
    if isinstance(d, GreedyDetails) and any(r.error for r in d.runs):
        notes.append("; ".join(f"{r.setting} on {r.model}: {r.error}" for r in d.runs if r.error))
    if c.skipped:
        notes.append(f"skipped: {c.skipped}")
    if isinstance(d, SamplingDetails):
        notes += summary_notes(d)
    if isinstance(d, RelativeDetails):
        notes += relative_checks.summary_notes(d)
    if isinstance(d, PositionsDetails):  # the per-position test
        notes += positions_report.summary_notes(d)
    if isinstance(d, SpeedDetails):
        notes += speed_notes(d)
    if c.error is not None:
        notes.append(f"could not run: {c.error}")
    if c.incomplete is not None:
        notes.append(f"incomplete: {c.incomplete}")
    if c.incomplete is not None:  # short of its planned power, nothing against the decoder
        result = "INCOMPLETE"
    elif not c.passed:
        result = "**FAIL**"
    elif c.not_applicable:
        result = "not applicable"
    elif c.skipped:
        result = "skipped"
    elif d is not None and d.informational:
        result = "reported"
    else:
        result = "pass"
    return result, " / ".join(notes) or DASH


def speed_notes(d: SpeedDetails) -> list[str]:
    """Each timed setting's own speedup over the baseline, a slowdown flagged, and each setting
    that could not run with its error."""
    rows = [r for r in d.rows if r.setting != f"{d.baseline} (baseline)"]
    notes = [
        f"{r.setting} x{r.speedup:.2f}" + (" (slower than the baseline)" if r.speedup < 1 else "")
        for r in rows
    ]
    return notes + [f"{e.setting} could not run: {e.error}" for e in d.errors]


def summary_section(cert: Certificate) -> str:
    rows = []
    for c in cert.checks:
        result, note = status(c)
        rows.append([c.name, c.measured, c.bound, result, note, c.seconds])
    return (
        "## Summary\n\n"
        + table(rows, ["check", "measured", "bound", "result", "notes", "seconds"])
        + "\n\nmeasured vs bound: greedy/bitwise/mutation count failures (bound 0); sampling gives the "
        "smallest p-value against the strictest Holm level (relative_sampling: its two-sample "
        "tests'); sampler_convention the largest binned TV between the two conventions' laws "
        "(reported); Theorem 1 the largest P(both rejected)/eps2 "
        "(gated, bound 2); Theorem 2 the largest measured E[C] / envelope bound (bound 1); "
        "speed the best "
        "speedup over the autoregressive baseline (reported, not asserted). A failed check is FAIL "
        "whatever else it holds; skipped and not-applicable runs are listed with their reason."
    )


@section(SpeedDetails, "## Speed")
def speed_section(c: CheckResult, d: SpeedDetails, title: str) -> str:
    out = [
        title,
        f"Greedy, {d.prompts} prompt(s) x {d.tokens_per_prompt} tokens, "
        f"{d.repeats} interleaved rounds after a warm-up, {d.device} {d.dtype}, "
        f"{d.clock} clock; speedup = the median over rounds of the {d.baseline} "
        "baseline's decode time over the setting's, `loopcert bench`'s protocol (speed.timing). "
        "Reported, not asserted.",
        table(
            [[r.setting, r.tokens_per_s, r.speedup, r.acceptance_rate, r.gamma] for r in d.rows],
            ["setting", "tokens/s", "speedup", "acceptance rate", "gamma"],
        ),
    ]
    if d.errors:
        out.append(table([[e.setting, e.error] for e in d.errors], ["setting", "error"]))
    return "\n\n".join(out)


def generic_section(c: CheckResult) -> str:
    return (
        heading(c, f"## {c.name}") + f"\n\nmeasured {fmt(c.measured)}, bound {fmt(c.bound)}" + error_lines(c)
    )


# the kinds the sections above and render_certificate's order cover; any other gets generic_section
RENDERED = frozenset(
    (
        "greedy",
        "greedy_depth",
        "coverage",
        "bitwise",
        "sampling",
        "relative_sampling",
        "sampler_convention",
        "reproducibility",
        "seed_invariance",
        "mutation",
        "false_alarm",
        "theorem1",
        "theorem2_traces",
        "theorem2_published",
        "speed",
        "positions",  # the per-position test
    )
)


def render_certificate(cert: Certificate) -> str:
    s, checks = cert.stamp, cert.checks

    def of(kind: str) -> list[CheckResult]:
        return [c for c in checks if c.kind == kind]

    na = sum(bool(c.passed and c.not_applicable) for c in checks)  # not counted as passed
    n_ok = sum(c.passed for c in checks) - na
    head = (
        f"# loopcert certificate: {cert.verdict}\n\n"
        f"**{cert.verdict}**: {n_ok}/{len(checks) - na} checks passed"
        + (f" ({na} not applicable)" if na else "")
        + f" for {s.decoder} on "
        f"{s.model} ({s.mode} plan, {s.device}, {s.dtype}, seed {s.seed})"
        + (f"; failed: {', '.join(cert.failed)}" if cert.failed else "")
        + (f"; incomplete: {', '.join(cert.incomplete)}" if cert.incomplete else "")
        + "".join(f"; skipped: {name} ({why})" for name, why in cert.skipped.items())
        + "".join(f"; {part}" for part in scope_parts(cert.scope))
        + "."
    )
    parts = [head, stamp_section(cert), summary_section(cert)]
    if greedy := of("greedy"):
        parts.append("## Greedy exactness\n\n" + "\n\n".join(map(greedy_section, greedy)))
    parts += map(depth_section, of("greedy_depth"))
    parts += map(coverage_section, of("coverage"))
    parts += map(bitwise_section, of("bitwise"))
    parts.append(sampling_section(of("sampling")))
    if relative := of("relative_sampling"):
        parts.append(relative_section(relative))
    if positions := of("positions"):  # the per-position test
        parts.append(positions_section(positions))
    parts += map(convention_section, of("sampler_convention"))
    parts += map(reproducibility_section, of("reproducibility"))
    parts += map(seed_invariance_section, of("seed_invariance"))
    parts += map(mutation_section, of("mutation"))
    parts += map(false_alarm_section, of("false_alarm"))
    parts.append(theorem1_section(of("theorem1")))
    traces, published = of("theorem2_traces"), of("theorem2_published")
    parts.append(theorem2_section(traces[0] if traces else None, published[0] if published else None))
    parts += map(speed_section, of("speed"))
    parts += [generic_section(c) for c in checks if c.kind not in RENDERED]
    return "\n\n".join(parts) + "\n"
