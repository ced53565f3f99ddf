"""Render a certificate (the JSON `proofs.run.certify.certify` returns) as markdown with tabulate.

Render-only: every number printed here was computed by a check; nothing is recomputed or
judged. Layout: the verdict line first, the stamp, a summary table of every check (measured
vs bound), then one section per check with its own table, power statements, the mutant
table, the Theorem 1/2 tables and the speed table.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tabulate import tabulate

DASH = "—"


def fmt(x, digits: int = 4) -> str:
    """Numbers for humans: None / nan as a dash, small p-values in scientific notation."""
    if x is None:
        return DASH
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, str):
        return DASH if x == "nan" else ("∞" if x == "inf" else x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return DASH
        if math.isinf(x):
            return "∞" if x > 0 else "-∞"
        if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e6):
            return f"{x:.{max(1, digits - 2)}e}"
        return f"{x:.{digits}g}"
    if isinstance(x, (list, tuple)):
        return "(" + ", ".join(fmt(v, digits) for v in x) + ")"
    return str(x)


def table(rows: list[list], headers: list[str]) -> str:
    return tabulate(
        [[fmt(v) for v in r] for r in rows], headers=headers, tablefmt="github", disable_numparse=True
    )


def verdict(passed: bool) -> str:
    return "pass" if passed else "**FAIL**"


# -- sections ---------------------------------------------------------------------------------


def stamp_section(cert: dict) -> str:
    s = cert["stamp"]
    seeds = s.get("seeds", {})
    rows = [
        ["command", f"`{s.get('command')}`" if s.get("command") else DASH],
        ["commit", s.get("commit")],
        ["date (UTC)", s.get("date")],
        ["model", f"{s.get('model')} (R={s.get('R')}, vocab {s.get('vocab_size')})"],
        ["decoder", s.get("decoder")],
        ["settings", "; ".join(s.get("settings", []))],
        ["device", s.get("device") + (f" ({s['device_name']})" if s.get("device_name") else "")],
        ["dtype", s.get("dtype")],
        ["plan", s.get("mode")],
        [
            "seeds",
            f"base {s.get('seed')}; sampling {fmt(seeds.get('sampling'))}; "
            f"mutants {fmt(seeds.get('mutants'))}; greedy {seeds.get('greedy')}",
        ],
        ["torch / CUDA", f"{s.get('torch')} / {s.get('cuda')}"],
        ["python / platform", f"{s.get('python')} / {s.get('platform')}"],
        ["torch threads / CPUs", f"{s.get('threads')} / {s.get('cpu_count')}"],
        ["run time", f"{fmt(s.get('seconds'), 3)} s"],
    ]
    return "## Stamp\n\n" + table(rows, ["", ""])


def status(c: dict) -> tuple[str, str]:
    """(result, note) of one check for the summary: a failure is always FAIL; "not applicable" and
    "skipped" only when nothing failed, each with its reason; partial gaps go in the note."""
    d = c["details"]
    notes = []
    if d.get("not_applicable"):
        na = d["not_applicable"]
        notes.append(
            f"not applicable: {na}"
            if isinstance(na, str)
            else f"{len(na)} run(s) not applicable: " + "; ".join(na)
        )
    if d.get("skipped"):
        sk = d["skipped"]
        notes.append(
            f"skipped: {sk}" if isinstance(sk, str) else f"{len(sk)} run(s) skipped: " + "; ".join(sk)
        )
    if d.get("rejected"):
        notes.append("rejected: " + ", ".join(d["rejected"]))
    if d.get("failed_samples"):
        notes.append("impossible samples or decoder errors: " + ", ".join(d["failed_samples"]))
    if d.get("no_power"):
        notes.append("no power: " + ", ".join(d["no_power"]))
    if "error" in d:
        notes.append(f"could not run: {d['error']}")
    if not c["passed"]:
        result = "**FAIL**"
    elif isinstance(d.get("not_applicable"), str):
        result = "not applicable"
    elif isinstance(d.get("skipped"), str):
        result = "skipped"
    elif d.get("informational"):
        result = "reported"
    else:
        result = "pass"
    return result, " / ".join(notes) or DASH


def summary_section(cert: dict) -> str:
    rows = []
    for c in cert["checks"]:
        result, note = status(c)
        rows.append([c["name"], c["measured"], c["bound"], result, note, c["details"].get("seconds")])
    return (
        "## Summary\n\n"
        + table(rows, ["check", "measured", "bound", "result", "notes", "seconds"])
        + "\n\nmeasured vs bound: greedy/bitwise/mutation count failures (bound 0); sampling gives the "
        "smallest p-value against the strictest Holm level; Theorem 1 the largest P(both rejected)/eps2 "
        "(gated, bound 2); Theorem 2 the largest measured E[C] / envelope bound (bound 1); "
        "speed the best "
        "speedup over the autoregressive baseline (reported, not asserted). A failed check is FAIL "
        "whatever else it holds; skipped and not-applicable runs are listed with their reason."
    )


def error_lines(c: dict) -> str:
    return f"\n\nThe check could not run: `{c['details']['error']}`" if "error" in c["details"] else ""


def heading(c: dict, title: str) -> str:
    return f"{title}: {verdict(c['passed'])}"


def stopped(c: dict, title: str, needs: str) -> str | None:
    """The whole section of a check that stopped before it measured `needs` (a key its details
    lack): the heading and the error it stopped on. None when the check ran."""
    return None if needs in c["details"] else heading(c, title) + error_lines(c)


def greedy_section(c: dict) -> str:
    d, title = c["details"], f"### {c['name']}"
    if short := stopped(c, title, "runs"):
        return short
    out = [
        heading(c, title),
        f"{d['real_bugs']} real bug(s), {d['numerical_ties']} numerical tie(s) over "
        f"{len(d['runs'])} model x setting runs of {d['tokens_per_prompt']} tokens per prompt. "
        "A divergence "
        "is a numerical tie when the candidate's token is within the dtype's tolerance of the reference "
        f"maximum logit (tolerances: {', '.join(f'{k} {v:g}' for k, v in d['tie_tolerance'].items())}).",
        table(
            [[r["model"], r["setting"], r["dtype"], f"{r['agree']}/{r['prompts']}"] for r in d["runs"]],
            ["model", "setting", "dtype", "prompts equal"],
        ),
    ]
    if d["divergences"]:
        out.append("Divergences (first position of each):")
        out.append(
            table(
                [
                    [
                        v["model"],
                        v["setting"],
                        fmt(v["prompt"]),
                        v["position"],
                        v["reference"],
                        v["candidate"],
                        v["top2_margin"],
                        v["candidate_gap"],
                        v["class"],
                    ]
                    for v in d["divergences"]
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
    if d.get("not_applicable"):
        out.append("Not applicable (declined by the factory): " + "; ".join(d["not_applicable"]))
    if d.get("skipped"):
        out.append("Skipped: " + "; ".join(d["skipped"]))
    return "\n\n".join(out)


def bitwise_section(c: dict) -> str:
    d = c["details"]
    if d.get("skipped"):
        return f"### {c['name']}: skipped\n\n{d['skipped']}"
    if short := stopped(c, f"### {c['name']}", "runs"):
        return short
    out = [
        heading(c, f"### {c['name']}"),
        f"Greedy tokens of each strategy vs fastdec's autoregressive baseline, every engine call at width "
        f"W={d['width']}, {d['dtype']}, {d['tokens_per_prompt']} tokens per prompt; bitwise equality "
        "required (no tie excuse).",
        table(
            [[r["setting"], f"{r['equal']}/{r['prompts']}"] for r in d["runs"]], ["setting", "prompts equal"]
        ),
    ]
    if d["mismatches"]:
        out.append(
            table(
                [
                    [m["setting"], fmt(m["prompt"]), m["first_difference"], m["error"]]
                    for m in d["mismatches"]
                ],
                ["setting", "prompt", "first difference", "error"],
            )
        )
    return "\n\n".join(out)


def sampling_section(checks: list[dict]) -> str:
    out = ["## Distributional equality under sampling"]
    if not checks:
        return out[0] + "\n\nNo sampling check ran."
    first = next((c for c in checks if "cases" in c["details"]), None)
    target = (
        f" must detect a binned TV >= {fmt(first['details']['target_tv'])} with probability >= "
        f"{fmt(first['details']['power_level'])}"
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
    groups: dict[str, list[dict]] = {}
    for c in checks:
        groups.setdefault(c["details"].get("model", c["name"]), []).append(c)
    for model, group in groups.items():
        head = next((c for c in group if "cases" in c["details"]), None)
        if head is not None:
            d, case0 = head["details"], head["details"]["cases"][0]
            why = f" ({d['why_this_model']})" if d.get("why_this_model") else ""
            prompt = repr(d["prompt_text"]) if d.get("prompt_text") else fmt(case0["prompt"])
            out.append(
                f"### {model}{why}\n\nPrompt {prompt}; family-wise alpha {fmt(d['alpha'])} per "
                "setting "
                f"({fmt(d['alpha_test'])} per view); sampling budget {fmt(d.get('budget_s'), 3)} s "
                "per setting."
            )
        rows, notes = [], []
        for c in group:
            d = c["details"]
            if d.get("not_applicable"):
                notes.append(f"- {c['name']}: not applicable: {d['not_applicable']}")
                continue
            if "cases" not in d:
                rows.append([c["name"]] + [DASH] * 11 + [verdict(c["passed"])])
                notes.append(f"- {c['name']}: could not run: `{d.get('error')}`")
                continue
            for r in d["cases"]:
                for v in r["views"]:
                    ok = (
                        not v.get("holm_rejected")
                        and v["has_power"]
                        and not r["impossible"]
                        and not r["error"]
                    )
                    res = verdict(ok) if v["has_power"] or v.get("holm_rejected") else "**FAIL** (no power)"
                    rows.append(
                        [
                            c["name"],
                            r["case"],
                            v["view"],
                            f"{r['samples']}/{r['planned']}",
                            v["counted"],
                            r["samples_per_s"],
                            v["bins"],
                            v["p_value"],
                            "rejected" if v.get("holm_rejected") else "kept",
                            v["detectable_tv"],
                            v["needed_n"],
                            v["empirical_tv"],
                            res,
                        ]
                    )
                if r.get("error"):
                    notes.append(f"- {c['name']} {r['case']}: the decoder failed: `{r['error']}`")
                if r.get("impossible"):
                    notes.append(
                        f"- {c['name']} {r['case']}: {r['impossible']} sample(s) of probability 0 "
                        "under the reference law"
                    )
                if not r["has_power"]:
                    notes.append(
                        f"- {c['name']} {r['case']}: no power: reached TV {fmt(r['detectable_tv'])} "
                        f"with {r['samples']} samples in {fmt(r['seconds'], 3)} s; needs N = "
                        f"{fmt(r['needed_n'])}"
                    )
            notes.append(
                f"- power of {c['name']}: {fmt(c.get('power'))}; {fmt(d.get('samples_per_s'), 3)} samples/s"
            )
        out.append(
            table(
                rows,
                [
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
                ],
            )
        )
        out.append("\n".join(notes))
        laws, untested, chosen = {}, {}, {}
        for c in group:
            for r in c["details"].get("cases", []):
                laws[r["case"]] = "; ".join(f"{v['view']}: {v['law']}" for v in r["views"]) or "no view"
                if r.get("not_tested"):
                    untested[r["case"]] = "; ".join(r["not_tested"])
                if r.get("chosen"):
                    chosen[r["case"]] = f"{r['case']} (N {r['planned']:,}): {r['chosen']}"
        if chosen:
            out.append(
                "Cases chosen from this model's law (proofs.run.certify.choose_case): "
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
    return "\n\n".join(out)


def mutation_section(c: dict) -> str:
    d = c["details"]
    if short := stopped(c, "## Mutation power", "rows"):
        return short
    rule = (
        "every mutant must be rejected"
        if d.get("require_all")
        else "every mutant whose binned TV shift reaches its view's detectable TV must be rejected; the "
        "others "
        "are reported as below this plan's power"
    )
    out = [
        heading(c, "## Mutation power"),
        f"{len(d['rows']) - sum(r['control'] for r in d['rows'])} wrong decoders and "
        f"{sum(r['control'] for r in d['rows'])} lossless controls, on {d['model']} "
        + (f"({d['why_this_model']}) " if d.get("why_this_model") else "")
        + f"(greedy: {len(d['greedy_prompts'])} prompts x {d['greedy_tokens']} tokens against refdec "
        f"float64; sampling planned for a detectable TV of {fmt(d.get('target_tv'))}, alpha "
        f"{fmt(d['alpha'])}). Rule: {rule}; no control may be flagged. Survivors: {d['survivors']} "
        f"(below power: {', '.join(d.get('below_power', [])) or 'none'}); controls flagged: "
        f"{d['controls_flagged']}. Exact TV: the mutant's enumerated law vs refdec's over whole "
        "sequences; "
        "binned TV: the largest shift a view sees; margin: the largest (view shift / that view's "
        "detectable TV), >= 1 means the plan promises the kill.",
        table(
            [
                [
                    r["name"],
                    r["bug"],
                    r["settings"],
                    ", ".join(r["cases"]) or "greedy only",
                    r.get("n_samples") or DASH,
                    " + ".join(r["rejected_by"]) or "none",
                    r["p_value"],
                    r["tv"],
                    r["binned_tv"],
                    r["detectable_tv"],
                    r.get("power_margin"),
                    DASH if r["control"] else fmt(r.get("promised")),
                    "ok" if r["ok"] else "**WRONG**",
                ]
                for r in d["rows"]
            ],
            [
                "decoder",
                "bug / change",
                "settings",
                "cases",
                "N",
                "rejected by",
                "p-value",
                "exact TV",
                "binned TV",
                "detects TV >=",
                "margin",
                "promised",
                "verdict",
            ],
        ),
    ]
    return "\n\n".join(out)


def false_alarm_section(c: dict) -> str:
    d = c["details"]
    if short := stopped(c, "## False-alarm rate", "replicates"):
        return short
    second = d.get("second_level") or {}
    rows = [
        [fmt(d["alpha"]), d["rejections"], fmt(c["measured"]), fmt(d["rate_ci95"]), fmt(d["binomial_tail_p"])]
    ]
    if second:
        rows.append(
            [
                fmt(second["level"]),
                second["rejections"],
                fmt(second["rate"]),
                fmt(second["rate_ci95"]),
                fmt(second["binomial_tail_p"]),
            ]
        )
    return "\n\n".join(
        [
            heading(c, "## False-alarm rate"),
            f"{d['decoder']} on {d['model']}, cases {d['case']}, "
            f"N per case {fmt(d['n_samples'])} (the plan's): "
            f"{d['replicates']} independent sampling checks ({d.get('how', 'sampled')}).",
            table(
                rows,
                ["level", "rejections", "rate", "95% CI (Clopper-Pearson)", "P(at least that many | level)"],
            ),
            table(
                [[f"{10 * i}%", q] for i, q in enumerate(d["p_value_deciles"])],
                ["quantile", "smallest p-value"],
            ),
        ]
    )


def theorem1_section(checks: list[dict]) -> str:
    rows = []
    for c in checks:
        d = c["details"]
        if d.get("skipped"):
            rows.append([c["name"], DASH, DASH, DASH, DASH, f"skipped: {d['skipped']}"])
            continue
        if "max_ratio_ungated" not in d:
            rows.append([c["name"], DASH, DASH, DASH, DASH, verdict(c["passed"])])
            continue
        if "examples" in d:
            source, n = f"hypothesis search steering towards counterexamples (V={d['vocab']})", d["examples"]
        elif "vocab" in d:
            source, n = f"random + adversarial families (V={d['vocab']}, seed {d['seed']})", d["cases"]
        else:
            source, n = (
                f"{d['model']} traces: {d['positions']} positions x {d['depth_pairs']} depth pairs",
                d["cases"],
            )
        rows.append(
            [source, n, c["measured"], d["max_ratio_ungated"], d["max_lemma_ratio"], verdict(c["passed"])]
        )
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


def theorem2_section(traces: dict | None, published: dict | None) -> str:
    out = ["## Theorem 2"]
    if traces is not None and "mean_tv" in traces["details"]:
        d = traces["details"]
        R = d["R"]
        fitted = d.get("fitted_depths") or [1, R]
        out.append(
            f"{d['model']}, {d['positions']} positions, T=1: envelope phi(r) = beta r^-alpha with "
            f"alpha = {fmt(d['alpha'])}, beta = {fmt(d['beta'])}, fitted on depths "
            f"{fitted[0]}..{fitted[-1]} (mean TV >= {fmt(d.get('tv_floor'))}; deeper, p_r equals p_R "
            f"to float64 rounding); it bounds every depth: "
            f"{fmt(d.get('envelope_covers_every_depth'))}; closed form (d1*, d2*) = "
            f"({fmt(d['d1_star'], 3)}, {fmt(d['d2_star'], 3)}); best integer pair of the bound: "
            f"{fmt(d['bound_best_integer'])}; measured best {fmt(d['measured_best'])} with "
            f"E[C] = {fmt(d['measured_best_cost'])} steps/token "
            f"(rounded optimum {fmt(d['rounded_star'])}: "
            f"{fmt(d['rounded_star_cost'])}; autoregressive: {R}). Measured = {d['measured']}. "
            f"Check: measured E[C] <= envelope bound at every grid pair; worst ratio "
            f"{fmt(traces['measured'])} at {fmt(d['worst_pair'])}: {verdict(traces['passed'])}."
        )
        out.append(
            table(
                [[r + 1, tv, env] for r, (tv, env) in enumerate(zip(d["mean_tv"], d["envelope"]))],
                ["depth r", "mean TV(p_r, p_R)", "envelope phi(r)"],
            )
        )
        best = sorted(d["grid"], key=lambda g: g["cost"])[:8]
        out.append(
            "Best pairs by measured cost:\n\n"
            + table(
                [
                    [g["d1"], g["d2"], g["p_x1_rejected"], g["p_both_rejected"], g["cost"], g["bound"]]
                    for g in best
                ],
                ["d1", "d2", "P(x1 rejected)", "P(both rejected)", "E[C] measured", "envelope bound"],
            )
        )
    elif traces is not None:
        out.append(f"theorem2_traces: {verdict(traces['passed'])}" + error_lines(traces))
    if published is not None and "d1_closed_form" in published["details"]:
        d = published["details"]
        out.append(
            table(
                [
                    ["alpha, beta, R", f"{d['alpha']}, {d['beta']}, {d['R']}"],
                    ["(d1*, d2*) closed form", fmt((d["d1_closed_form"], d["d2_closed_form"]), 4)],
                    ["published", fmt((d["d1"], d["d2"]))],
                    [
                        "largest difference",
                        f"{fmt(published['measured'])} (tolerance {fmt(published['bound'])})",
                    ],
                    ["result", verdict(published["passed"])],
                ],
                ["published reproduction", ""],
            )
        )
    return "\n\n".join(out)


def speed_section(c: dict) -> str:
    d = c["details"]
    if short := stopped(c, "## Speed", "rows"):
        return short
    out = [
        "## Speed",
        f"Greedy, {d['prompts']} prompt(s) x {d['tokens_per_prompt']} tokens, "
        f"{d['repeats']} interleaved rounds after a warm-up, {d['device']} {d['dtype']}, "
        f"{d.get('clock', 'wall')} clock; speedup = the median over rounds of the {d['baseline']} "
        "baseline's decode time over the setting's, `loopcert bench`'s protocol (proofs.speed.timing). "
        "Reported, not asserted.",
        table(
            [
                [r["setting"], r["tokens_per_s"], r["speedup"], r.get("acceptance_rate"), r.get("gamma")]
                for r in d["rows"]
            ],
            ["setting", "tokens/s", "speedup", "acceptance rate", "gamma"],
        ),
    ]
    if d["errors"]:
        out.append(table([[e["setting"], e["error"]] for e in d["errors"]], ["setting", "error"]))
    return "\n\n".join(out)


def reproducibility_section(c: dict) -> str:
    d = c["details"]
    if short := stopped(c, "## Reproducibility", "runs"):
        return short
    out = [
        heading(c, "## Reproducibility"),
        f"Each setting decodes {d['tokens']} tokens at T={d['temperature']:g} twice with each of the "
        f"seeds {fmt(d['seeds'])}, one request after another; both runs must give the same tokens. "
        "A decoder that fails only this check samples from a law the other checks judged, but its "
        "seed does not pin its output: the certificate then says NON-REPRODUCIBLE, not FAIL.",
        table(
            [[r["setting"], f"{r['equal']}/{r['seeds']}"] for r in d["runs"]], ["setting", "seeds reproduced"]
        ),
    ]
    if d["differences"]:
        out.append(
            table(
                [[v["setting"], v["seed"], fmt(v["first"]), fmt(v["second"])] for v in d["differences"]],
                ["setting", "seed", "first run", "second run"],
            )
        )
    if "error" in d:
        out.append(f"No power: {d['error']}")
    return "\n\n".join(out)


def generic_section(c: dict) -> str:
    return (
        heading(c, f"## {c['name']}") + "\n\n"
        f"measured {fmt(c['measured'])}, bound {fmt(c['bound'])}" + error_lines(c)
    )


# -- the document -------------------------------------------------------------------------------


def render_certificate(cert: dict) -> str:
    s = cert["stamp"]
    checks = cert["checks"]
    by: Callable[[Callable[[str], bool]], list[dict]] = lambda pred: [c for c in checks if pred(c["name"])]
    n_ok = sum(c["passed"] for c in checks)
    head = (
        f"# loopcert certificate: {cert['verdict']}\n\n"
        f"**{cert['verdict']}**: {n_ok}/{len(checks)} checks passed for {s.get('decoder')} on "
        f"{s.get('model')} ({s.get('mode')} plan, {s.get('device')}, {s.get('dtype')}, "
        f"seed {s.get('seed')})"
        + (f"; failed: {', '.join(cert['failed'])}" if cert["failed"] else "")
        + "".join(f"; skipped: {name} ({why})" for name, why in cert.get("skipped", {}).items())
        + "."
    )
    parts = [head, stamp_section(cert), summary_section(cert)]
    greedy = by(lambda n: n.startswith("greedy_"))
    if greedy:
        parts.append("## Greedy exactness\n\n" + "\n\n".join(greedy_section(c) for c in greedy))
    parts += [bitwise_section(c) for c in by(lambda n: n.startswith("bitwise"))]
    parts.append(sampling_section(by(lambda n: n.startswith("sampling["))))
    parts += [reproducibility_section(c) for c in by(lambda n: n == "reproducibility")]
    parts += [mutation_section(c) for c in by(lambda n: n == "mutation")]
    parts += [false_alarm_section(c) for c in by(lambda n: n == "false_alarm")]
    parts.append(theorem1_section(by(lambda n: n.startswith("theorem1"))))
    t2 = {c["name"]: c for c in by(lambda n: n.startswith("theorem2"))}
    parts.append(theorem2_section(t2.get("theorem2_traces"), t2.get("theorem2_published")))
    parts += [speed_section(c) for c in by(lambda n: n == "speed")]
    known = (
        "greedy_",
        "bitwise",
        "sampling[",
        "reproducibility",
        "mutation",
        "false_alarm",
        "theorem1",
        "theorem2",
        "speed",
    )
    parts += [generic_section(c) for c in checks if not c["name"].startswith(known)]
    return "\n\n".join(parts) + "\n"
