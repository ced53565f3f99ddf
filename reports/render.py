"""Render a certificate (the JSON `proofs.certify.certify` returns) as markdown with tabulate.

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
    return tabulate([[fmt(v) for v in r] for r in rows], headers=headers, tablefmt="github",
                    disable_numparse=True)


def verdict(passed: bool) -> str:
    return "pass" if passed else "**FAIL**"


# -- sections ---------------------------------------------------------------------------------


def stamp_section(cert: dict) -> str:
    s = cert["stamp"]
    seeds = s.get("seeds", {})
    rows = [
        ["command", f"`{s.get('command')}`" if s.get("command") else DASH],
        ["commit", s.get("commit")], ["date (UTC)", s.get("date")],
        ["model", f"{s.get('model')} (R={s.get('R')}, vocab {s.get('vocab_size')})"],
        ["decoder", s.get("decoder")], ["settings", "; ".join(s.get("settings", []))],
        ["device", s.get("device") + (f" ({s['device_name']})" if s.get("device_name") else "")],
        ["dtype", s.get("dtype")],
        ["plan", s.get("mode")],
        ["seeds", f"base {s.get('seed')}; sampling {fmt(seeds.get('sampling'))}; "
                  f"mutants {fmt(seeds.get('mutants'))}; greedy {seeds.get('greedy')}"],
        ["torch / CUDA", f"{s.get('torch')} / {s.get('cuda')}"],
        ["python / platform", f"{s.get('python')} / {s.get('platform')}"],
        ["torch threads / CPUs", f"{s.get('threads')} / {s.get('cpu_count')}"],
        ["run time", f"{fmt(s.get('seconds'), 3)} s"],
    ]
    return "## Stamp\n\n" + table(rows, ["", ""])


def summary_section(cert: dict) -> str:
    rows = []
    for c in cert["checks"]:
        d = c["details"]
        if d.get("skipped"):
            result = "skipped"
        elif d.get("informational"):
            result = "reported" if c["passed"] else "**FAIL**"
        else:
            result = verdict(c["passed"])
        rows.append([c["name"], c["measured"], c["bound"], result, d.get("seconds")])
    return ("## Summary\n\n" + table(rows, ["check", "measured", "bound", "result", "seconds"]) +
            "\n\nmeasured vs bound: greedy/bitwise/mutation count failures (bound 0); sampling gives the "
            "smallest p-value against the strictest Holm level; Theorem 1 the largest P(both rejected)/eps2 "
            "(gated, bound 2); Theorem 2 the largest measured E[C] / envelope bound (bound 1); "
            "speed the best "
            "speedup over the autoregressive baseline (reported, not asserted).")


def error_lines(c: dict) -> str:
    return f"\n\nThe check could not run: `{c['details']['error']}`" if "error" in c["details"] else ""


def greedy_section(c: dict) -> str:
    d = c["details"]
    if "runs" not in d:
        return f"### {c['name']}: {verdict(c['passed'])}" + error_lines(c)
    out = [f"### {c['name']}: {verdict(c['passed'])}",
           f"{d['real_bugs']} real bug(s), {d['numerical_ties']} numerical tie(s) over "
           f"{len(d['runs'])} model x setting runs of {d['tokens_per_prompt']} tokens per prompt. "
           "A divergence "
           "is a numerical tie when the candidate's token is within the dtype's tolerance of the reference "
           f"maximum logit (tolerances: {', '.join(f'{k} {v:g}' for k, v in d['tie_tolerance'].items())}).",
           table([[r["model"], r["setting"], r["dtype"], f"{r['agree']}/{r['prompts']}"] for r in d["runs"]],
                 ["model", "setting", "dtype", "prompts equal"])]
    if d["divergences"]:
        out.append("Divergences (first position of each):")
        out.append(table([[v["model"], v["setting"], fmt(v["prompt"]), v["position"], v["reference"],
                           v["candidate"], v["top2_margin"], v["candidate_gap"], v["class"]]
                          for v in d["divergences"]],
                         ["model", "setting", "prompt", "position", "reference", "candidate",
                          "top-2 margin", "gap to candidate", "class"]))
    if d.get("skipped"):
        out.append("Skipped: " + "; ".join(d["skipped"]))
    return "\n\n".join(out)


def bitwise_section(c: dict) -> str:
    d = c["details"]
    if d.get("skipped"):
        return f"### {c['name']}: skipped\n\n{d['skipped']}"
    if "runs" not in d:
        return f"### {c['name']}: {verdict(c['passed'])}" + error_lines(c)
    out = [f"### {c['name']}: {verdict(c['passed'])}",
           f"Greedy tokens of each strategy vs fastdec's autoregressive baseline, every engine call at width "
           f"W={d['width']}, {d['dtype']}, {d['tokens_per_prompt']} tokens per prompt; bitwise equality "
           "required (no tie excuse).",
           table([[r["setting"], f"{r['equal']}/{r['prompts']}"] for r in d["runs"]],
                 ["setting", "prompts equal"])]
    if d["mismatches"]:
        out.append(table([[m["setting"], fmt(m["prompt"]), m["first_difference"], m["error"]]
                          for m in d["mismatches"]], ["setting", "prompt", "first difference", "error"]))
    return "\n\n".join(out)


def sampling_section(checks: list[dict]) -> str:
    out = ["## Distributional equality under sampling"]
    if not checks:
        return out[0] + "\n\nNo sampling check ran."
    out.append("Exact law of the first n tokens enumerated from refdec (float64); the candidate sampled N "
               "times per case with seeds base .. base+N-1; chi-square goodness of fit with bins chosen from "
               "expected counts only (>= 5 each, the rest pooled); Holm across the cases of each setting. "
               "Power: probability >= 0.99 of rejecting a law whose binned TV from the reference is at least "
               "the stated value (non-central chi-square approximation).")
    groups: dict[str, list[dict]] = {}
    for c in checks:
        groups.setdefault(c["details"].get("model", c["name"]), []).append(c)
    for model, group in groups.items():
        first = next((c for c in group if "cases" in c["details"]), None)
        if first is not None:
            d, case0 = first["details"], first["details"]["cases"][0]
            why = f" ({d['why_this_model']})" if d.get("why_this_model") else ""
            prompt = repr(d["prompt_text"]) if d.get("prompt_text") else fmt(case0["prompt"])
            out.append(f"### {model}{why}\n\nPrompt {prompt}; N={d['n_samples']} per case, "
                       f"seeds {fmt(case0['seeds'])}; family-wise alpha {fmt(d['alpha'])} per setting.")
        rows, notes = [], []
        for c in group:
            d = c["details"]
            if "cases" not in d:
                rows.append([c["name"], DASH, DASH, DASH, DASH, DASH, DASH, DASH, DASH, verdict(c["passed"])])
                notes.append(f"- {c['name']}: could not run: `{d.get('error')}`")
                continue
            for r in d["cases"]:
                rows.append([c["name"], r["case"], r["tokens"], r["samples"], r["bins"], r["p_value"],
                             "rejected" if r.get("holm_rejected") else "kept", r["detectable_tv"],
                             r["empirical_tv"], verdict(not r.get("holm_rejected"))])
                if r.get("error"):
                    notes.append(f"- {c['name']} {r['case']}: the decoder failed: `{r['error']}`")
                if r.get("impossible"):
                    notes.append(f"- {c['name']} {r['case']}: {r['impossible']} sample(s) of probability 0 "
                                 "under the reference law")
            notes.append(f"- power of {c['name']}: {c['power']}")
        out.append(table(rows, ["check", "case", "tokens", "N", "bins", "p-value", "Holm", "detects TV >=",
                                "observed TV", "result"]))
        out.append("\n".join(notes))
        laws = {r["case"]: r["law"] for c in group for r in c["details"].get("cases", [])}
        if laws:
            out.append("Laws: " + "; ".join(f"{k}: {v}" for k, v in laws.items()) + ".")
    return "\n\n".join(out)


def mutation_section(c: dict) -> str:
    d = c["details"]
    if "rows" not in d:
        return f"## Mutation power: {verdict(c['passed'])}" + error_lines(c)
    out = [f"## Mutation power: {verdict(c['passed'])}",
           f"{len(d['rows']) - sum(r['control'] for r in d['rows'])} wrong decoders must be rejected and "
           f"{sum(r['control'] for r in d['rows'])} lossless controls must not be, on {d['model']} "
           + (f"({d['why_this_model']}) " if d.get("why_this_model") else "") +
           f"(greedy: {len(d['greedy_prompts'])} prompts x {d['greedy_tokens']} tokens against refdec "
           "float64; "
           f"sampling: N={d['n_samples']} per case, alpha {fmt(d['alpha'])}). Survivors: {d['survivors']}; "
           f"controls flagged: {d['controls_flagged']}. Exact TV shift: enumerated law of the first 3 tokens "
           "vs refdec's, over whole sequences and over the test's bins; detectable TV: the test's power.",
           table([[r["name"], r["bug"], r["settings"], ", ".join(r["cases"]) or "greedy only",
                   r.get("n_samples") or DASH, " + ".join(r["rejected_by"]) or "none", r["p_value"], r["tv"],
                   r["binned_tv"], r["detectable_tv"], r["empirical_binned_tv"],
                   "ok" if r["ok"] else "**WRONG**"] for r in d["rows"]],
                 ["decoder", "bug / change", "settings", "cases", "N", "rejected by", "p-value", "exact TV",
                  "binned TV", "detects TV >=", "observed TV", "verdict"])]
    return "\n\n".join(out)


def false_alarm_section(c: dict) -> str:
    d = c["details"]
    if "replicates" not in d:
        return f"## False-alarm rate: {verdict(c['passed'])}" + error_lines(c)
    return "\n\n".join([
        f"## False-alarm rate: {verdict(c['passed'])}",
        f"{d['decoder']} on {d['model']}, case {d['case']}: {d['replicates']} independent sampling checks of "
        f"N={d['n_samples']} at alpha {fmt(d['alpha'])} rejected {d['rejections']} times: "
        f"rate {fmt(c['measured'])} (95% CI {fmt(d['rate_ci95'])}); "
        f"P(at least that many | Binomial(K, alpha)) = {fmt(d['binomial_tail_p'])}.",
        table([[f"{10 * i}%", q] for i, q in enumerate(d["p_value_deciles"])], ["quantile", "p-value"])])


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
            source, n = f"{d['model']} traces: {d['positions']} positions x {d['depth_pairs']} depth pairs", \
                d["cases"]
        rows.append([source, n, c["measured"], d["max_ratio_ungated"], d["max_lemma_ratio"],
                     verdict(c["passed"])])
    return "\n\n".join(["## Theorem 1",
                        "Largest P(both proposals rejected) / eps2 seen (eps2 = TV(p_d2, p_R)), "
                        "gated (bound 2) and ungated (bound 1), and the Lemma eps1 TV(p_d2 (-) p_d1, "
                        "p_R (-) p_d1) / eps2 (bound 1), exact laws from fastdec.accept.",
                        table(rows, ["triples", "cases", "max gated ratio (<= 2)", "max ungated ratio (<= 1)",
                                     "max Lemma ratio (<= 1)", "result"])])


def theorem2_section(traces: dict | None, published: dict | None) -> str:
    out = ["## Theorem 2"]
    if traces is not None and "mean_tv" in traces["details"]:
        d = traces["details"]
        R = d["R"]
        fitted = d.get("fitted_depths") or [1, R]
        out.append(f"{d['model']}, {d['positions']} positions, T=1: envelope phi(r) = beta r^-alpha with "
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
                   f"{fmt(traces['measured'])} at {fmt(d['worst_pair'])}: {verdict(traces['passed'])}.")
        out.append(table([[r + 1, tv, env] for r, (tv, env) in enumerate(zip(d["mean_tv"], d["envelope"]))],
                         ["depth r", "mean TV(p_r, p_R)", "envelope phi(r)"]))
        best = sorted(d["grid"], key=lambda g: g["cost"])[:8]
        out.append("Best pairs by measured cost:\n\n" + table(
            [[g["d1"], g["d2"], g["p_x1_rejected"], g["p_both_rejected"], g["cost"], g["bound"]]
             for g in best],
            ["d1", "d2", "P(x1 rejected)", "P(both rejected)", "E[C] measured", "envelope bound"]))
    elif traces is not None:
        out.append(f"theorem2_traces: {verdict(traces['passed'])}" + error_lines(traces))
    if published is not None and "d1_closed_form" in published["details"]:
        d = published["details"]
        out.append(table([["alpha, beta, R", f"{d['alpha']}, {d['beta']}, {d['R']}"],
                          ["(d1*, d2*) closed form", fmt((d["d1_closed_form"], d["d2_closed_form"]), 4)],
                          ["published", fmt((d["d1"], d["d2"]))],
                          ["largest difference",
                           f"{fmt(published['measured'])} (tolerance {fmt(published['bound'])})"],
                          ["result", verdict(published["passed"])]],
                         ["published reproduction", ""]))
    return "\n\n".join(out)


def speed_section(c: dict) -> str:
    d = c["details"]
    if "rows" not in d:
        return f"## Speed: {verdict(c['passed'])}" + error_lines(c)
    out = ["## Speed",
           f"Greedy, {d['prompts']} prompt(s) x {d['tokens_per_prompt']} tokens, "
           f"median of {d['repeats']} runs after a warm-up, {d['device']} {d['dtype']}; "
           f"speedup = tokens/s over the {d['baseline']} baseline "
           "timed in the same run. Reported, not asserted.",
           table([[r["setting"], r["tokens_per_s"], r["speedup"], r.get("acceptance_rate"), r.get("gamma")]
                  for r in d["rows"]], ["setting", "tokens/s", "speedup", "acceptance rate", "gamma"])]
    if d["errors"]:
        out.append(table([[e["setting"], e["error"]] for e in d["errors"]], ["setting", "error"]))
    return "\n\n".join(out)


def reproducibility_section(c: dict) -> str:
    d = c["details"]
    if "runs" not in d:
        return f"## Reproducibility: {verdict(c['passed'])}" + error_lines(c)
    out = [f"## Reproducibility: {verdict(c['passed'])}",
           f"Each setting decodes {d['tokens']} tokens at T={d['temperature']:g} twice with each of the "
           f"seeds {fmt(d['seeds'])}, one request after another; both runs must give the same tokens. "
           "A decoder that fails only this check samples from a law the other checks judged, but its "
           "seed does not pin its output: the certificate then says NON-REPRODUCIBLE, not FAIL.",
           table([[r["setting"], f"{r['equal']}/{r['seeds']}"] for r in d["runs"]],
                 ["setting", "seeds reproduced"])]
    if d["differences"]:
        out.append(table([[v["setting"], v["seed"], fmt(v["first"]), fmt(v["second"])]
                          for v in d["differences"]], ["setting", "seed", "first run", "second run"]))
    if "error" in d:
        out.append(f"No power: {d['error']}")
    return "\n\n".join(out)


def generic_section(c: dict) -> str:
    return (f"## {c['name']}: {verdict(c['passed'])}\n\n"
            f"measured {fmt(c['measured'])}, bound {fmt(c['bound'])}" + error_lines(c))


# -- the document -------------------------------------------------------------------------------


def render_certificate(cert: dict) -> str:
    s = cert["stamp"]
    checks = cert["checks"]
    by: Callable[[Callable[[str], bool]], list[dict]] = lambda pred: [c for c in checks if pred(c["name"])]
    n_ok = sum(c["passed"] for c in checks)
    head = (f"# loopcert certificate: {cert['verdict']}\n\n"
            f"**{cert['verdict']}**: {n_ok}/{len(checks)} checks passed for {s.get('decoder')} on "
            f"{s.get('model')} ({s.get('mode')} plan, {s.get('device')}, {s.get('dtype')}, "
            f"seed {s.get('seed')})"
            + (f"; failed: {', '.join(cert['failed'])}." if cert["failed"] else "."))
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
    known = ("greedy_", "bitwise", "sampling[", "reproducibility", "mutation", "false_alarm", "theorem1",
             "theorem2", "speed")
    parts += [generic_section(c) for c in checks if not c["name"].startswith(known)]
    return "\n\n".join(parts) + "\n"
