"""The certificate's section on the per-position test on long samples (kind positions): per check,
what was sampled, the bands and their boundaries, the power in temperature factors, one row per
martingale test and per binned stratum, the simulated false-alarm rate and every reason it failed
(docs/design.md section 7, "The per-position test" and "Martingale evidence")."""

from __future__ import annotations

from proofs.details import MartingaleTest, PositionsDetails
from proofs.result import CheckResult
from proofs.stats.pit import LEVEL_MARGIN
from reports.markdown import DASH, fmt, heading, outcome, section, table
from reports.sampling_checks import MESSAGE_CHARS, raised_text

HEADERS = ["band", "half", "entropy cut (nats)", "tokens", "p-value", "Holm", "detects TV >=", "observed TV"]
MARTINGALE_HEADERS = ["statistic", "positions", "stratum", "tokens", "z", "log sup E", "p-value", "Holm"]
POWER_HEADERS = ["positions", "stratum", "tokens", "hotter: T x", "colder: T x", "KL hotter", "KL colder"]
LEANS = {  # which way a rejected statistic's sum leans, in words (z > 0, z < 0)
    "score": (
        "tokens likelier than the law gives (a colder sampler)",
        "tokens rarer than the law gives (hotter)",
    ),
    "pit_mean": ("mass moved toward rarer tokens", "mass moved toward likelier tokens"),
    "pit_spread": ("mass moved to both ends (mode and tail)", "mass moved to the middle ranks"),
}


def leaning(r: MartingaleTest) -> str:
    where = f"[{r.band[0]}, {r.band[1]})" + ("" if r.half == "whole" else f" {r.half}")
    if r.z is None:
        return f"{r.statistic} {where}"
    return f"{r.statistic} {where} ({LEANS[r.statistic][0 if r.z > 0 else 1]})"  # z: the report's table


def summary_notes(d: PositionsDetails) -> list[str]:
    """Why a per-position check failed, for the summary: each cause named apart, requests that
    raised first (with what the completed samples say)."""
    out = []
    if d.raised:
        reached = (
            f"every band detects a binned TV >= {fmt(d.detectable_tv, 3)} with probability "
            f"{fmt(d.power_level)}"
        )
        out.append(raised_text(d.raised, d.samples, reached, MESSAGE_CHARS))
    m_rejected = [r for r in d.martingale if r.holm_rejected]
    if m_rejected:
        early = f" (stopped early at {d.samples} of {d.planned_samples} samples)" if d.stopped_early else ""
        out.append("martingale evidence rejects: " + ", ".join(map(leaning, m_rejected[:4])) + early)
    if d.rejected:
        out.append("binned PIT rejects: " + ", ".join(d.rejected))
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
        f"{len(d.prompt)}-token prompt (positions {len(d.prompt)}..{horizon - 1}), {law} ({d.order})"
        + (f", the sampling case {d.case}" if d.case else "")
        + ", seeds "
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
    if d.martingale:
        target = (
            f" N was planned ({d.planned_by}) so that the tail detects a temperature off by "
            f"+-{fmt(d.drift_target)} with probability {fmt(d.power_level)}."
            if d.drift_target is not None
            else ""
        )
        out.append(
            "Martingale evidence (each statistic summed over a stratum's tokens in the order they were "
            f"drawn, an e-process valid at any stopping time; Holm at family-wise {fmt(d.martingale_alpha)}; "
            f"pilot varentropy {fmt(d.pilot_varentropy)} nats^2).{target} Power, from the pilot's laws at "
            "the tokens each stratum holds: the temperature factors detected with that probability on "
            "every token of the stratum (the tail: from any position up to its start):"
        )
        if d.drift_power:
            out.append(
                table(
                    [
                        [
                            f"[{r.band[0]}, {r.band[1]})",
                            r.half,
                            r.tokens,
                            r.hotter,
                            r.colder,
                            r.kl_hotter,
                            r.kl_colder,
                        ]
                        for r in d.drift_power
                    ],
                    POWER_HEADERS,
                )
            )
        out.append(
            table(
                [
                    [
                        r.statistic,
                        f"[{r.band[0]}, {r.band[1]})",
                        r.half,
                        r.tokens,
                        r.z,
                        r.log_e,
                        r.p_value,
                        "rejected" if r.holm_rejected else "kept",
                    ]
                    for r in d.martingale
                ],
                MARTINGALE_HEADERS,
            )
        )
        out.append("The binned PIT (the omnibus test, family-wise " + fmt(d.alpha) + "):")
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
    rows = [[c.name, outcome(c), c.measured, c.bound, c.power or DASH] for c in checks]
    return "\n\n".join(
        [
            "## The per-position test on long samples",
            "Every sampled token is judged under the reference's exact law at its position (given the "
            "sample's own prefix): its log-probability score and its randomized probability-integral "
            "transform's first two moments, summed over positions as e-processes (martingale evidence: "
            "valid whenever sampling stops, so a lossy decoder fails early), and the transform binned "
            "per position band and entropy half (the omnibus test). Power is stated as the temperature "
            "factors detected with probability 0.99. Blind to a swap between tokens of equal reference "
            "probability ([certify.md](../../docs/certify.md#the-per-position-test)).",
            table(rows, ["check", "result", "smallest p", "Holm level", "power"]),
            *map(positions_check, checks),
        ]
    )
