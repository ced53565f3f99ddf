"""The certificate's section on the per-position test on long samples (kind positions): per check,
what was sampled, the bands and their boundaries, one row per stratum, the simulated false-alarm
rate and every reason it failed (docs/design.md section 7, "The per-position test")."""

from __future__ import annotations

from proofs.details import PositionsDetails
from proofs.result import CheckResult
from proofs.stats.pit import LEVEL_MARGIN
from reports.markdown import DASH, fmt, heading, section, table, verdict

HEADERS = ["band", "half", "entropy cut (nats)", "tokens", "p-value", "Holm", "detects TV >=", "observed TV"]


def summary_notes(d: PositionsDetails) -> list[str]:
    """Why a per-position check failed, for the summary: each cause named apart."""
    out = []
    if d.rejected:
        out.append("rejected: " + ", ".join(d.rejected))
    if d.impossible:
        out.append(f"{d.impossible} impossible token(s), first {d.first_impossible}")
    if d.malformed:
        out.append(f"{d.malformed} malformed sample(s)")
    if d.decoder_error:
        out.append(f"decoder error: {d.decoder_error}")
    if d.no_power:
        out.append("no power: " + ", ".join(d.no_power))
    return out


@section(PositionsDetails)
def positions_check(c: CheckResult, d: PositionsDetails, title: str) -> str:
    law = (
        f"T={fmt(d.temperature)}"
        + (f" top-k={d.top_k}" if d.top_k else "")
        + (f" top-p={fmt(d.top_p)}" if d.top_p else "")
    )
    horizon = len(d.prompt) + d.tokens
    out = [
        heading(c, title),
        f"{d.setting} on {d.model}: {d.samples}/{d.planned_samples} samples of {d.tokens} tokens after a "
        f"{len(d.prompt)}-token prompt (positions {len(d.prompt)}..{horizon - 1}), {law} ({d.order}), seeds "
        f"{fmt(d.seeds)} (the first is the pilot: its laws set each band's entropy cut, its tokens are not "
        f"tested); {fmt(d.decode_seconds, 3)} s decoding, {fmt(d.reference_seconds, 3)} s of teacher-forced "
        f"float64 reference passes"
        + (" (stopped by its time budget)" if d.stopped_by_deadline else "")
        + f". Uniforms: {d.uniforms}.",
        f"Bands cut at the boundaries {fmt(d.boundaries)}"
        + (f"; not band edges (a band would be too narrow): {fmt(d.left_out)}" if d.left_out else "")
        + f". Each band (`all`) must detect a binned TV >= {fmt(d.target_tv)} of the transform's law "
        f"({d.bins} equal bins) with probability >= {fmt(d.power_level)} at alpha {fmt(d.alpha_test, 3)} "
        f"(Holm, family-wise {fmt(d.alpha)}): {d.needed_per_band} tokens each; the entropy halves are "
        "tested and their power stated, not required.",
        table(
            [
                [
                    f"[{s.band[0]}, {s.band[1]})",
                    s.half,
                    s.entropy_threshold,
                    s.tokens,
                    s.p_value if s.stat is not None else "not tested (< 5 per bin)",
                    "rejected" if s.holm_rejected else "kept",
                    s.detectable_tv,
                    s.empirical_tv,
                ]
                for s in d.strata
            ],
            HEADERS,
        ),
    ]
    a = d.false_alarm
    if a is not None:
        out.append(
            f"False alarms at these stratum sizes, {a.replicates} simulated lossless runs: "
            f"{a.rejections} rejected at {fmt(a.level)} (P(at least that many) at a real level "
            f"{fmt(LEVEL_MARGIN)}x that: {fmt(a.tail_p)}), {a.rejections_second_level} at "
            f"{fmt(a.level_second_level)} (P {fmt(a.tail_p_second_level)}); the check fails when either is "
            f"below {fmt(a.plausibility)}: its real level then lies above {fmt(LEVEL_MARGIN)}x the nominal."
        )
    notes = summary_notes(d)
    if notes:
        out.append("\n".join(f"- {n}" for n in notes))
    return "\n\n".join(out)


def positions_section(checks: list[CheckResult]) -> str:
    """All per-position checks under one heading (empty when the plan ran none)."""
    if not checks:
        return ""
    rows = [[c.name, verdict(c.passed), c.measured, c.bound, c.power or DASH] for c in checks]
    return "\n\n".join(
        [
            "## The per-position test on long samples",
            "Every sampled token's randomized probability-integral transform under the reference's exact "
            "law at its position (given the sample's own prefix) is uniform if the decoder is lossless; "
            "tested per position band and entropy half, Holm across them. Blind to a swap between tokens "
            "of equal reference probability ([certify.md](../../docs/certify.md#the-per-position-test)).",
            table(rows, ["check", "result", "smallest p", "Holm level", "power"]),
            *map(positions_check, checks),
        ]
    )
