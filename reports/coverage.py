"""The certificate's sections on positions: greedy at depth and boundary coverage (kinds
greedy_depth, coverage; proofs/checks/depth.py)."""

from __future__ import annotations

from proofs.details import CoverageDetails, DepthDetails
from proofs.result import CheckResult
from reports.markdown import fmt, heading, section, table


@section(DepthDetails, "## Greedy at depth")
def depth_section(c: CheckResult, d: DepthDetails, title: str) -> str:
    out = [
        heading(c, title),
        f"{d.real_bugs} real bug(s), {d.numerical_ties} numerical tie(s) over {len(d.runs)} setting(s) x "
        f"{len(d.placements)} placements on {d.model}, up to {d.horizon} tokens of context. Each run's "
        "tokens are judged by one teacher-forced float64 pass of refdec: every token must be refdec's "
        "argmax given the run's own prefix (a tie within the dtype's tolerance passes and the tokens "
        "after it are still judged).",
        table(
            [
                [r.setting, r.dtype, "**no decoder**" if r.error else f"{r.agree}/{r.placements}", r.tokens]
                for r in d.runs
            ],
            ["setting", "dtype", "placements equal", "tokens judged"],
        ),
        "Placements: " + "; ".join(d.placements) + ".",
    ]
    if d.divergences:
        out.append(
            table(
                [
                    [
                        v.setting,
                        f"{v.prompt_len} + {v.tokens}",
                        v.position,
                        v.near,
                        v.reference,
                        v.candidate,
                        fmt(v.candidate_gap),
                        v.classified + (f": {v.why}" if v.why else ""),
                    ]
                    for v in d.divergences
                ],
                [
                    "setting",
                    "prompt + tokens",
                    "position",
                    "relative to",
                    "reference",
                    "candidate",
                    "gap",
                    "class",
                ],
            )
        )
    out += [f"- {r.setting}: `{r.error}`" for r in d.runs if r.error]
    return "\n\n".join(out)


@section(CoverageDetails, "## Boundary coverage")
def coverage_section(c: CheckResult, d: CoverageDetails, title: str) -> str:
    return "\n\n".join(
        [
            heading(c, title),
            f"Where {d.model}'s decoders change state (proofs/boundaries.py), up to the horizon of "
            f"{d.horizon} tokens: {d.uncovered} declared boundary(ies) no check crossed (each fails as "
            "no coverage). A run crosses a boundary by generating tokens on both sides of it, by a "
            "prefill longer than it, or (a speculation width k) by a prompt of exactly k + 1 tokens.",
            table(
                [
                    [r.position, r.source, r.what, r.greedy_runs, r.greedy_tokens, r.samples, r.status]
                    for r in d.rows
                ],
                ["position", "source", "what", "greedy runs", "greedy tokens past it", "samples", "status"],
            ),
        ]
    )
