"""Render the speedup report (speed.report.SpeedReport) as markdown with tabulate.

Render-only: every number, ratio and verdict was measured or judged in speed; the only
arithmetic here is formatting (percentages, milliseconds, ratios of two shown figures).
"""

from __future__ import annotations

from reports.render import DASH, fmt, table
from speed.batch_table import SAMPLE_TOKENS
from speed.context import factors
from speed.report import SpeedReport
from speed.rows import GridRow


def _pct(x) -> str:
    return DASH if x is None else f"{100 * x:.1f}%"


def _x(x) -> str:
    return DASH if x is None or fmt(x) == DASH else f"{fmt(x, 3)}x"


def stamp_section(res: SpeedReport) -> str:
    s = res.stamp
    load = s.get("load_average") or {}
    rows = [
        ["command", f"`{s['command']}`" if s.get("command") else DASH],
        ["commit", s["commit"]],
        ["date (UTC)", s["date"]],
        ["model", f"{s['model']} (R={res.R})"],
        ["device", f"{s['device']} ({s['device_name']}), {s['threads']} thread(s), {s['cpu_count']} CPUs"],
        ["dtype", s["dtype"]],
        ["versions", f"torch {s['torch']}, python {s['python']}, numpy {s['numpy']}"],
        ["platform", s["platform"]],
        ["mode", s["mode"]],
        ["engine steps", _steps(s)],
        [
            "workload",
            f"{len(res.prompts)} prompts of {fmt(res.prompts)} tokens, {res.plan.grid.tokens} new "
            f"tokens each, {res.plan.grid.repeats} interleaved rounds",
        ],
        ["seeds", "prompt i decodes with seed i (sampling); greedy consumes none"],
        ["load average (1, 5, 15 min)", f"start {fmt(load.get('start'))}, end {fmt(load.get('end'))}"],
    ]
    return "## Stamp\n\n" + table(rows, ["", ""])


def _steps(s: dict) -> str:
    if not s.get("compile"):
        return "eager"
    return (
        "compiled (--compile: torch.compile, fastdec/compiled.py): every timed fastdec decoder, each "
        "warmed up, untimed, by the very calls it then times, so every graph was compiled before "
        f"({s.get('compile_seconds', 0.0):.0f} s compiling in all, outside every figure); eager: the "
        "untimed rewind telemetry and the step-cost probes (context sweep, step cost against width). "
        "naive-kv is not fastdec: it runs as it is"
    )


CLOCKS = {
    "cpu": "process CPU time (one thread: the work done, whatever else the host runs; equal to wall "
    "time on an idle host)",
    "wall": "wall-clock time",
}


def _other(clock: str) -> str:
    return "wall" if clock == "cpu" else "cpu"


def definitions(res: SpeedReport) -> str:
    clock = res.clock
    return f"""## How this was measured

- **Clock**: {CLOCKS[clock]}; the {_other(clock)} clock's speedup is shown beside it. Tokens/s
  are decode tokens per second of that clock.
- **Speedup**: decode time of the autoregressive baseline over decode time of the setting, the
  same prompts and seeds, every prompt decoded by all settings in turn (order rotated) in each
  round; the median over rounds of the per-round ratio. Decode time excludes the prefill (the
  same for every strategy) and the first token, which comes out of it.
- **Ideal speedup**: every engine call is timed in the same runs; c(phase, w) = mean seconds of a
  call of that phase (prelude / recur / readout) at padded width w, pooled over all settings and
  rounds. With calls(phase, w) the setting's call counts (fixed by its acceptance statistics),
  ideal time per token = sum calls(phase, w) * c(phase, w) / decode tokens, and
  ideal speedup = baseline decode time per token / ideal time per token: what the setting would
  reach if nothing but its engine calls took time.
- **Efficiency** = measured speedup / ideal speedup = ideal time / measured time: the share of the
  setting's time its engine calls account for; the rest is host work (lane bookkeeping,
  drafting, verification, sampling) and calls dearer than their width's average.
- **gamma** = N R / (N1 d1 + N2 d2 + Nrest R) (docs/design.md section 4); token sources N1 / N2 / Nrest:
  first proposal accepted / second proposal accepted / restart.
- **Rewind hit rate at L**: at each rejected first proposal, argmax p_L == argmax p_R; from
  separate, untimed runs (each telemetry depth adds a readout)."""


def targets_section(res: SpeedReport) -> str:
    rows = [
        [
            t.name,
            (_x(t.measured) if t.unit == "x" else fmt(t.measured, 3)) + (f" ({t.note})" if t.note else ""),
            "met" if t.met else "**not met**",
        ]
        for t in res.targets
    ]
    return (
        "## Targets\n\nThey are set for the default model (R = 32) on a CPU, "
        "greedy, ratios measured in one run; for other models and devices they are reference lines.\n\n"
        + table(rows, ["target", "measured", ""])
    )


def _sources(r: GridRow) -> str:
    return f"{r.from_first} / {r.from_second} / {r.from_restart}"


def grid_section(res: SpeedReport, key: str = "rows", title: str = "Strategy grid (greedy)") -> str:
    Ls = res.rewind_depths
    other = _other(res.clock)
    head = [
        "setting",
        "tok/s",
        "speedup",
        f"speedup ({other})",
        "ideal",
        "efficiency",
        "gamma",
        "acceptance",
        "sources 1st/2nd/restart",
        "gate open",
        "lanes mean / peak",
        "steps/token",
        *[f"rewind L={L}" for L in Ls],
        "same tokens",
    ]
    rows = []
    for r in getattr(res, key):
        rw = r.rewind_hit_rate
        rows.append(
            [
                r.label + ("" if r.lossless else " (LOSSY)"),
                fmt(r.tokens_per_s, 4),
                _x(r.speedup),
                _x(getattr(r, f"speedup_{other}")),
                _x(r.ideal_speedup),
                fmt(r.efficiency, 3),
                fmt(r.gamma, 3),
                _pct(r.acceptance_rate) if r.proposals else DASH,
                _sources(r),
                _pct(r.gate_open_rate) if r.gate_checks else DASH,
                f"{fmt(r.mean_live_lanes, 3)} / {r.peak_lanes}",
                fmt(r.steps_per_token, 3),
                *[_pct(rw.get(L)) if rw else DASH for L in Ls],
                ("yes" if r.same_tokens_as_baseline else "no") if key == "rows" else DASH,
            ]
        )
    note = (
        "\n\n`same tokens`: the setting emitted exactly the baseline's tokens (greedy; lossless settings "
        "may differ only at float32 near-ties, which certify classifies)."
    )
    return f"## {title}\n\n" + table(rows, head) + (note if key == "rows" else "")


def naive_section(res: SpeedReport) -> str:
    n = res.naive
    if n is None:
        return ""
    rows = [
        ["fastdec autoregressive", fmt(n.baseline_tokens_per_s, 4)],
        [
            "proofs.decoders.naive_kv (minimal KV-cached loop over refdec's layers)",
            fmt(n.naive_tokens_per_s, 4),
        ],
        [f"ratio ({res.clock}, median of rounds)", _x(n.baseline_over_naive)],
        [f"ratio ({_other(res.clock)})", _x(getattr(n, f"baseline_over_naive_{_other(res.clock)}"))],
        ["same tokens", "yes" if n.same_tokens else "no"],
    ]
    over = [[label, _x(x)] for label, x in n.over_naive.items()]
    return (
        "## Honest baseline\n\nThe autoregressive strategy runs unpadded at width 1; its speed beside a "
        f"straightforward decode loop over the same maths, {n.measured}. A ratio below 1 is the engine's "
        "machinery: R + 1 engine calls per token, each planned (lanes, index tensors, RoPE rows, a cache "
        "write by index), where the loop runs one forward per token. Every strategy pays it, so speedups "
        "over the baseline compare at equal machinery; over the loop, each setting gains:\n\n"
        + table(rows, ["", "tokens/s"])
        + "\n\n"
        + table(over, ["setting", "speedup over proofs.decoders.naive_kv"])
    )


def costs_section(res: SpeedReport) -> str:
    if not res.step_costs and res.stamp.get("compile"):
        return (
            "## Cost of one engine call by width\n\nNot timed: compiled decoders are timed whole (timing "
            "each engine call would run a compiled decoder's unfused per-phase graphs instead of its fused "
            "steps and greedy chains), so the grid has no ideal speedup or efficiency either."
        )
    by = {}
    for c in res.step_costs:
        by.setdefault(c.phase, {})[c.width] = c
    widths = sorted({c.width for c in res.step_costs})
    clock = res.clock
    rows = []
    for phase in ("prelude", "recur", "readout"):
        per = by.get(phase, {})
        base = per.get(1)
        rows.append(
            [
                phase,
                *[
                    (
                        f"{1e3 * getattr(per[w], clock):.3f} ms"
                        + (
                            f" ({getattr(per[w], clock) / getattr(base, clock):.2f}x)"
                            if base and w > 1
                            else ""
                        )
                    )
                    if w in per
                    else DASH
                    for w in widths
                ],
            ]
        )
    return (
        f"## Cost of one engine call by width\n\nMean {clock} time of one call, pooled over all settings and "
        "rounds of the grid (in parentheses: over width 1).\n\n"
        + table(rows, ["phase", *[f"W={w}" for w in widths]])
    )


def theorem2_section(res: SpeedReport) -> str:
    t = res.theorem2
    mb, m2 = t.measured_best, t.measured_best_with_d2
    rows = []
    if mb:
        rows.append(["measured best pipelined setting", f"({mb.d1}, {fmt(mb.d2)})", _x(mb.speedup)])
    if m2:
        rows.append(["measured best with a second proposal", f"({m2.d1}, {m2.d2})", _x(m2.speedup)])
    if not t.fitted:
        return (
            "## Theorem 2 vs the measured best\n\n"
            + (table(rows, ["", "(d1, d2)", "speedup"]) + "\n\n" if rows else "")
            + f"Envelope not fitted: {t.reason}."
        )
    rows += [
        ["Theorem 2 closed form (continuous)", f"({fmt(t.d1_star, 3)}, {fmt(t.d2_star, 3)})", DASH],
        ["Theorem 2 best integer pair, 1 <= d1 < d2 < R", fmt(t.best_integer), DASH],
    ]
    if t.best_on_grid:
        rows.append(["Theorem 2 best pair on the measured grid", fmt(t.best_on_grid), DASH])
    return (
        "## Theorem 2 vs the measured best\n\n"
        f"Envelope phi(r) = beta r^-alpha fitted on the mean TV(p_r, p_R) of the depth spectrum below "
        f"(depths {fmt(t.fitted_depths)}): alpha = {fmt(t.alpha, 4)}, beta = {fmt(t.beta, 4)}. "
        "Theorem 2 minimises a bound on recurrent steps per token; the measured best maximises measured "
        "speedup, which also pays for wider steps and readouts.\n\n"
        + table(rows, ["", "(d1, d2)", "speedup"])
    )


def spectrum_section(res: SpeedReport) -> str:
    s = res.spectrum
    rows = [[r, fmt(tv), fmt(mx), _pct(a)] for r, tv, mx, a in zip(s.depth, s.mean_tv, s.max_tv, s.agreement)]
    return (
        "## Depth spectrum\n\n"
        f"Over {s.positions} decoded positions (the baseline's greedy tokens), refdec's uncached "
        "readouts: "
        f"mean and max TV(p_r, p_R) at temperature {s.temperature:g}, and greedy agreement "
        "argmax p_r == argmax p_R (the first-proposal acceptance of a greedy draft at depth r).\n\n"
        + table(rows, ["depth r", "mean TV", "max TV", "agreement"])
    )


def _eager_probes(compiled: bool) -> str:
    return (
        ", timed on an eager engine's calls: the decode figures are compiled, and a compiled call is one "
        "fused graph that the probes cannot take apart"
        if compiled
        else ""
    )


def context_section(res: SpeedReport) -> str:
    c = res.context
    wb = c.rows[0].weight_bytes if c.rows else 0
    other = _other(c.clock)
    rows = [
        [
            r.context,
            fmt(r.baseline_tokens_per_s, 4),
            fmt(r.tokens_per_s, 4),
            _x(r.speedup),
            _x(getattr(r, f"speedup_{other}")),
            _pct(r.acceptance),
            fmt(r.gamma, 3),
            f"{fmt(r.step_cost_ratio, 3)}x",
            _x(r.predicted),
            fmt(r.kv_over_weight_bytes, 3),
        ]
        for r in c.rows
    ]
    stop = c.stops_paying_at
    verdict = (
        f"Pipelining stops paying (speedup < 1) at {stop} cached positions on this host."
        if stop is not None
        else f"Pipelining still pays at the longest context measured ({c.rows[-1].context} positions)."
        if c.rows
        else "No context length fitted max_seq_len."
    )
    return (
        "## Speedup against context length\n\n"
        f"`{c.setting}` over the baseline with a real context of L cached positions (the prompts laid end "
        f"to end), {c.tokens} new tokens, {c.repeats} interleaved rounds. `W-step / 1-step`: measured "
        f"cost of one recurrence call at the pipeline's width over width 1 at that context"
        f"{_eager_probes(c.compiled)}. `model`: "
        f"docs/design.md section 5, R(Wb + A) / (d1 Wb + R A) with Wb = {wb} weight bytes per step "
        f"(adapter + "
        "core) and A = KV bytes one lane reads per step (core layers, L positions); it assumes every draft "
        "is accepted and memory traffic is the cost. On a small model on a CPU, per-op host overhead is a "
        "large fixed cost per call, which the model leaves out.\n\n"
        + table(
            rows,
            [
                "L",
                "baseline tok/s",
                "tok/s",
                "speedup",
                f"speedup ({other})",
                "acceptance",
                "gamma",
                "W-step / 1-step",
                "model",
                "A / Wb",
            ],
        )
        + f"\n\n{verdict}\n\n"
        + context_cause(res)
    )


LOSSES = {
    "step cost": "the cost of a wide step (the model's byte count overstates it)",
    "fill": "the pipeline's fill (R - d1 extra steps before the first lane commits, amortised over the run)",
    "rejections": "rejections (each empties the pipeline, which refills from the rejected position)",
    "rest": "everything but recurrence calls (prelude and readout calls, whose coda attention also reads "
    "the cache, and host work); above 1 when the refills after rejections run steps narrower, so cheaper, "
    "than the W-lane step the rejection factor charges them at",
}

PARTS = {
    "host": "host planning",
    "cache_write": "cache writes",
    "cache_read": "cache reads (views)",
    "attention": "attention over the cache",
    "mlp": "the MLP",
    "other": "the rest of the forward",
}


def parts_table(c) -> str:
    rows = []
    for r in c.rows:
        for p in (r.parts_1, r.parts_w):
            rows.append(
                [
                    r.context,
                    p.width,
                    f"{1e3 * p.total:.3f}",
                    *[f"{1e3 * getattr(p, k):.3f} ({_pct(v)})" for k, v in p.shares().items()],
                ]
            )
    return table(rows, ["L", "lanes", "call ms", *[f"{v} ms" for v in PARTS.values()]])


def step_cause_line(c) -> str:
    sc = c.step_cause
    if sc is None:
        return ""
    return (
        f"At {sc.context} positions a {sc.width}-lane recurrence call costs "
        f"{fmt(sc.step_cost_ratio, 3)}x a 1-lane one (the model: {fmt(sc.model_step_ratio, 3)}x); "
        "the largest part of it is "
        f"{PARTS[sc.part]}, {_pct(sc.share)} of the call and {fmt(sc.growth, 3)}x its 1-lane time."
    )


def context_cause(res: SpeedReport) -> str:
    c = res.context
    if not c.rows:
        return ""
    rows = [
        [
            r.context,
            fmt(r.of_model, 3),
            f"{fmt(r.model_step_ratio, 3)} / {fmt(r.step_cost_ratio, 3)}",
            fmt(r.step_cost_factor, 3),
            fmt(r.steps_per_token, 3),
            fmt(r.fill_factor, 3),
            fmt(r.rejection_factor, 3),
            fmt(r.rest_factor, 3),
            f"{1e3 * r.fixed_1:.3f} / {1e3 * r.fixed_w:.3f} ms",
            f"{1e3 * r.recur_1:.3f} / {1e3 * r.recur_w:.3f} ms",
            _pct(r.cache_share),
            f"{fmt(r.gather_over_view, 3)}x",
        ]
        for r in c.rows
    ]
    last = c.rows[-1]
    return (
        "### Where the difference from the model goes\n\n"
        "measured / model = step cost x fill x rejections x rest (speed/context.py). step cost = "
        "m / s: the model's cost of a k-lane step over a 1-lane step, m = (Wb + k A) / (Wb + A) with "
        "k = R / d1, over the measured one, s. fill = d1 / n_fill and rejections = n_fill / n, with n the "
        "pipeline's engine steps per decoded token and n_fill = d1 + (R - d1) / N the steps a never-rejected "
        "run of N tokens takes. rest = measured / ((R / n) / s). The recurrence call is also timed at a "
        "context of W positions (fixed cost: weights and per-op overhead, which the model counts once per "
        "step whatever its width) and with the cache read through gathered copies (the CUDA-graph path) "
        "instead of views.\n\n"
        + table(
            rows,
            [
                "L",
                "measured / model",
                "m / s",
                "step cost",
                "steps/token n",
                "fill",
                "rejections",
                "rest",
                "fixed 1 / W lanes",
                "step 1 / W lanes",
                "cache share of a W step",
                "gathers / views",
            ],
        )
        + f"\n\nAt {last.context} cached positions the measured speedup is {fmt(last.of_model, 3)} of the "
        f"model's; the largest loss is {c.main_loss}, x{fmt(factors(last)[c.main_loss], 3)}: "
        f"{LOSSES[c.main_loss]}. Once the run's own fill and rejections are charged (the model assumes "
        f"every draft accepted), the engine reaches {fmt(last.engine_factor, 3)} of the model (step cost x "
        f"rest). {step_cause_line(c)}\n\n"
        f"Where one recurrence call's {c.clock} time goes, at 1 lane and at the pipeline's W lanes, by "
        "context (speed.costs.call_parts: the parts timed inside the engine's calls, host planning "
        "in Engine.phase_inputs, `other` the call's total less the parts):\n\n" + parts_table(c)
    )


def batch_section(res: SpeedReport) -> str:
    t = res.batch
    p = t.plan
    rows = [
        [
            r.label,
            r.batch,
            fmt(r.tokens_per_s, 4),
            _x(r.speedup),
            _x(r.over_b1),
            _pct(r.acceptance) if r.strategy != "autoregressive" else DASH,
        ]
        for r in t.rows
    ]
    base = t.samples[0] if t.samples else None
    samples = [
        [
            s.label,
            s.batch,
            fmt(s.samples_per_s, 4),
            fmt(s.alone_per_s, 4),
            _x(s.ratio),
            fmt(s.lane_steps_per_sample, 3),
            fmt(base.samples_per_s * base.lane_steps_per_sample / s.lane_steps_per_sample, 4)
            if s.lane_steps_per_sample
            else DASH,
        ]
        for s in t.samples
    ]
    b = max(p.batches)
    costs = [
        [c.width, c.lanes_per_sequence, fmt(c.ms_per_step, 3), fmt(c.us_per_lane_step, 3)]
        for c in t.width_costs
    ]
    bounds = [
        [
            r.label,
            fmt(r.lane_steps_per_token, 3),
            fmt(1e6 / (r.tokens_per_s * r.lane_steps_per_token), 3)
            if r.tokens_per_s * r.lane_steps_per_token
            else DASH,
            _x(r.speedup),
            _x(t.ceiling(r.label, b)) if t.ceiling(r.label, b) is not None else DASH,
        ]
        for r in t.rows
        if r.batch == b
    ]
    cost_part = (
        ""
        if not costs
        else (
            f"\n\nWhy B={b} speedups are small on this device: step cost against width at B={b} (each of "
            f"the B sequences holding 1, 2, 4, ... lanes, all at one depth{_eager_probes(t.compiled)}). "
            "Every token of every strategy is "
            "one lane deepened to the full depth, so a setting's decode time is about its lane-steps per "
            "token times the per-lane-step cost at its width; ceiling: the baseline's per-lane-step cost at "
            f"width B={b} over the cheapest of any width, times the baseline's lane-steps per token over the "
            "setting's: what the setting would reach if its steps cost nothing but their lanes. "
            "us/lane-step (decoding): the setting's own decode time per lane-step at B (aggregate: "
            "1 / (tok/s x lane-steps/token)); speedup is about the baseline's lane-steps/token x "
            "us/lane-step over the setting's, so the two columns say why a setting falls short of its "
            "ceiling: extra lane-steps (rejections, the pipeline's fill), or steps dearer than their width's "
            "(readouts, the prelude, attention over scattered depths, host work).\n\n"
            + table(costs, ["width", "lanes per sequence", "ms/step", "us/lane-step"])
            + "\n\n"
            + table(bounds, ["setting", "lane-steps/token", "us/lane-step (decoding)", "speedup", "ceiling"])
        )
    )
    return (
        "## Batches\n\n"
        "`Decoder.generate_batch`: B sequences through one engine, sequence i decoding held-out prompt i "
        f"(cycled, its last {p.prompt_len} tokens), {p.tokens} new tokens each, greedy, {p.repeats} "
        f"interleaved rounds. tok/s: aggregate decode tokens per second of the {t.clock} clock over the "
        "B sequences (prefill excluded); speedup: over the autoregressive baseline at the same B (median "
        "of per-round ratios); vs B=1: the setting's aggregate tokens/s over its own B=1 figure.\n\n"
        + table(rows, ["setting", "B", "tok/s", "speedup", "vs B=1", "acceptance"])
        + f"\n\nCertification throughput on {t.sample_model}: {SAMPLE_TOKENS}-token samples at "
        f"temperature 1 of one prompt, one generate_batch call of {p.sample_calls} x B sequences "
        "through B cache rows (a finished sequence's row takes the next; the prompt's prefill stays in "
        f"its rows) against {p.sample_alone} generate() calls one at a time, whole calls (prefill "
        "included), same decoder, same run. lane-steps/sample: lanes advanced by one recurrence per "
        "sample (its tokens after the first; the prefill is held in the rows); at the first's cost: "
        "the samples/s this setting would reach if a lane-step cost what it costs the first setting "
        "(a strategy that runs more lanes per sample cannot pass that on a device whose steps cost "
        "by the lane).\n\n"
        + table(
            samples,
            [
                "setting",
                "B",
                "samples/s",
                "one at a time",
                "gain",
                "lane-steps/sample",
                "at the first's cost",
            ],
        )
        + cost_part
    )


def render(res: SpeedReport) -> str:
    parts = [
        f"# Speedup report: {res.stamp['model']} on {res.stamp['device']}",
        stamp_section(res),
        definitions(res),
        targets_section(res),
        grid_section(res),
        naive_section(res),
        grid_section(res, "sampling_rows", "Sampling (temperature 1)"),
        costs_section(res),
        theorem2_section(res),
        spectrum_section(res),
        context_section(res),
        batch_section(res),
    ]
    return "\n\n".join(p for p in parts if p) + "\n"
