"""The certificate's sections on exact tokens: greedy exactness against refdec, bitwise agreement
with fastdec's baseline, and reproducibility of a seed (kinds greedy, bitwise, reproducibility)."""

from __future__ import annotations

from proofs.details import BitwiseDetails, GreedyDetails, ReproducibilityDetails, SeedInvarianceDetails
from proofs.result import CheckResult
from reports.markdown import fmt, heading, section, stopped, table


@section(GreedyDetails)
def greedy_section(c: CheckResult, d: GreedyDetails, title: str) -> str:
    failed = [r for r in d.runs if r.error]
    tolerances = ", ".join(f"{k} {v:g}" for k, v in d.tie_tolerance.items())
    out = [
        heading(c, title),
        f"{d.real_bugs} real bug(s), {d.numerical_ties} numerical tie(s)"
        + (f", {len(failed)} run(s) without a decoder (its factory failed)" if failed else "")
        + " over "
        f"{len(d.runs)} model x setting runs of {d.tokens_per_prompt} tokens per prompt. "
        "A divergence "
        "is a numerical tie when the candidate's token is within the dtype's tolerance of the reference "
        f"maximum logit (tolerances: {tolerances}).",
        table(
            [
                [r.model, r.setting, r.dtype, "**no decoder**" if r.error else f"{r.agree}/{r.prompts}"]
                for r in d.runs
            ],
            ["model", "setting", "dtype", "prompts equal"],
        ),
    ]
    if failed:  # the factory raised: the run failed before a token was decoded
        out.append("\n".join(f"- {r.model} / {r.setting}: `{r.error}`" for r in failed))
    if d.divergences:
        out.append("Divergences (first position of each):")
        out.append(
            table(
                [
                    [
                        v.model,
                        v.setting,
                        fmt(v.prompt),
                        v.position,
                        v.reference,
                        v.candidate,
                        v.top2_margin,
                        v.candidate_gap,
                        v.classified,
                    ]
                    for v in d.divergences
                ],
                [
                    "model",
                    "setting",
                    "prompt",
                    "position",
                    "reference",
                    "candidate",
                    "top-2 margin",
                    "gap to candidate",
                    "class",
                ],
            )
        )
        # a real bug not judged by logits (the decoder raised, or returned the wrong length): the
        # reviewer reads what went wrong here, not only in certificate.json
        why = [v for v in d.divergences if v.why]
        if why:
            out.append(
                "\n".join(f"- {v.model} / {v.setting}, prompt {fmt(v.prompt)}: `{v.why}`" for v in why)
            )
    if d.not_applicable:
        out.append("Not applicable (declined by the factory): " + "; ".join(d.not_applicable))
    return "\n\n".join(out)


def bitwise_section(c: CheckResult) -> str:
    if c.skipped:
        return f"### {c.name}: skipped\n\n{c.skipped}"
    d = c.details
    if not isinstance(d, BitwiseDetails):
        return stopped(c, f"### {c.name}")
    out = [
        heading(c, f"### {c.name}"),
        f"Greedy tokens of each strategy vs fastdec's autoregressive baseline, every engine call at width "
        f"W={d.width}, {d.dtype}, {d.tokens_per_prompt} tokens per prompt; bitwise equality "
        "required (no tie excuse).",
        table([[r.setting, f"{r.equal}/{r.prompts}"] for r in d.runs], ["setting", "prompts equal"]),
    ]
    if d.mismatches:
        out.append(
            table(
                [[m.setting, fmt(m.prompt), m.first_difference, m.error] for m in d.mismatches],
                ["setting", "prompt", "first difference", "error"],
            )
        )
    return "\n\n".join(out)


@section(ReproducibilityDetails, "## Reproducibility")
def reproducibility_section(c: CheckResult, d: ReproducibilityDetails, title: str) -> str:
    out = [
        heading(c, title),
        f"Each setting decodes {d.tokens} tokens at T={d.temperature:g} twice with each of the "
        f"seeds {fmt(d.seeds)}, one request after another; both runs must give the same tokens. "
        "A decoder that fails only this check samples from a law the other checks judged, but its "
        "seed does not pin its output: the certificate then says NON-REPRODUCIBLE, not FAIL.",
        table([[r.setting, f"{r.equal}/{r.seeds}"] for r in d.runs], ["setting", "seeds reproduced"]),
    ]
    if d.differences:
        out.append(
            table(
                [[v.setting, v.seed, fmt(v.first), fmt(v.second)] for v in d.differences],
                ["setting", "seed", "first run", "second run"],
            )
        )
        # the power line carries the flag that pins a server's seeds (a decoder's seed_hint)
        if c.power:
            out.append(f"Checked: {c.power}.")
    if c.error is not None:
        out.append(f"No power: {c.error}")
    return "\n\n".join(out)


@section(SeedInvarianceDetails, "## Seed invariance")
def seed_invariance_section(c: CheckResult, d: SeedInvarianceDetails, title: str) -> str:
    out = [
        heading(c, title),
        f"Each setting decodes {d.tokens} tokens at T={d.temperature:g} with each of the seeds "
        f"{fmt(d.seeds)}: alone, then beside {d.neighbours} other prompts and seeds (first, middle and "
        "last of one generate_batch call; an HTTP decoder sends them as concurrent requests). Every "
        "decode must give the tokens decoded alone: a seed is a promise about one request, whatever "
        "else is decoded beside it. A failure only here, or with reproducibility, is NON-REPRODUCIBLE.",
    ]
    if d.runs:
        out.append(
            table([[r.setting, f"{r.equal}/{r.seeds}"] for r in d.runs], ["setting", "decodes as alone"])
        )
    if d.no_batch:
        out.append("Without generate_batch (nothing decoded beside it): " + ", ".join(d.no_batch) + ".")
    if d.differences:
        out.append(
            table(
                [[v.setting, v.seed, fmt(v.first), fmt(v.second)] for v in d.differences],
                ["setting", "seed", "alone", "beside others"],
            )
        )
    if c.error is not None:
        out.append(f"No power: {c.error}")
    return "\n\n".join(out)
