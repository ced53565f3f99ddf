"""`loopcert bench`'s measurement: the whole speedup report (speed.report.SpeedReport)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from fastdec import DecodeConfig, Decoder
from refdec.load import load_model
from refdec.progress import Progress, quiet
from refdec.stamp import stamp
from speed.batch_table import SAMPLE_MODEL, batch_table, judge_batch
from speed.context import context_sweep
from speed.costs import call_costs, pooled_costs
from speed.report import BenchPlan, SpeedReport
from speed.rows import naive_comparison, rows_from, telemetry, with_telemetry
from speed.settings import (
    BASELINE,
    NAIVE,
    batch_settings,
    fastdec_configs,
    gate_settings,
    grid,
    rewind_depths,
)
from speed.targets import judge
from speed.theorem2_vs_measured import depth_spectrum, theorem2_compare
from speed.timing import GREEDY, SAMPLING, default_clock, loadavg, time_runs


def bench_stamp(model_name: str, model, device, plan: BenchPlan, load: dict) -> dict:
    """refdec.stamp's fields, plus the plan's mode and the host's load average."""
    dtype = next(model.parameters()).dtype
    seeds = {"prompt i": f"{plan.grid.seed} + i", "weights": "as shipped"}
    return {**stamp(model_name, device, dtype, seeds), "mode": plan.mode, "load_average": load}


def bench(
    model,
    model_name: str,
    plan: BenchPlan,
    prompts: Sequence[Sequence[int]],
    device="cpu",
    naive=None,
    progress: Progress | None = None,
    compile: bool = False,
) -> SpeedReport:
    """Everything the speedup report shows. `naive`: proofs.decoders.naive_kv's decoder, timed beside
    the baseline (None: no honest-baseline section). `compile` (bench --compile): every timed fastdec
    decoder runs compiled engine steps (fastdec/compiled.py), warmed up by the calls it will time so
    that no compile is timed; the untimed telemetry and the step-cost probes stay eager (the report
    says so)."""
    say = progress or quiet
    load = {"start": loadavg()}
    R = model.cfg.recurrence
    work = plan.grid
    every_prompt = [tuple(p) for p in prompts]  # the context sweep lays them all end to end
    prompts = work.select(prompts)
    settings = grid(R, plan.mode == "quick")
    decoders = {st.label: Decoder(model, st, device=device, compile=compile) for st in settings}
    if naive is not None:
        decoders[NAIVE] = naive
    say(
        f"grid: {len(settings)} settings x {len(prompts)} prompts x {work.tokens} tokens, "
        f"{work.repeats} rounds (greedy)"
    )
    times = time_runs(decoders, prompts, work.tokens, work.repeats, GREEDY, work.seed, progress=say)
    costs = pooled_costs(times)
    clock = default_clock(device)
    rows = rows_from(times, settings, costs, clock)
    say("rewind telemetry (untimed)")
    rows = with_telemetry(rows, telemetry(model, settings, prompts, work.tokens, device))
    naive_row = naive_comparison(times, clock) if naive is not None else None

    say("sampling (T=1)")
    samp_settings = gate_settings(R)
    samp = time_runs(
        {
            st.label: decoders.get(st.label) or Decoder(model, st, device=device, compile=compile)
            for st in samp_settings
        },
        prompts,
        work.tokens,
        plan.sampling_repeats,
        SAMPLING,
        work.seed,
    )
    sampling_rows = rows_from(samp, samp_settings, pooled_costs(samp), clock)

    say("depth spectrum")
    spectrum = depth_spectrum(model, prompts, times[BASELINE]["tokens"])
    theorem2 = theorem2_compare(spectrum, rows)

    say("context sweep")
    best = theorem2.measured_best
    sweep_setting = DecodeConfig(
        "pipelined", draft_depth=best.d1 if best else 2, second_depth=best.d2 if best else None
    )
    sweep = context_sweep(
        model,
        sweep_setting,
        plan.lengths,
        every_prompt,
        plan.sweep_tokens,
        plan.sweep_repeats,
        device,
        work.seed,
        say,
        compile=compile,
    )
    say("batch table")
    sample_model = load_model(SAMPLE_MODEL).to(device=device, dtype=next(model.parameters()).dtype)
    sample_settings = fastdec_configs(sample_model.cfg.recurrence, full=False)  # what certify samples
    batch = batch_table(
        model,
        batch_settings(R),
        every_prompt,
        sample_model,
        SAMPLE_MODEL,
        sample_settings,
        plan.batch,
        clock,
        device,
        say,
        compile=compile,
    )
    load["end"] = loadavg()
    compiled = {
        "compile": compile,
        "compile_seconds": sum(t["compile_seconds"] for t in (*times.values(), *samp.values()))
        + sweep.compile_seconds
        + batch.compile_seconds,
    }
    return SpeedReport(
        stamp={**bench_stamp(model_name, model, device, plan, load), **compiled},
        plan=plan,
        clock=clock,
        R=R,
        prompts=[len(p) for p in prompts],
        rewind_depths=rewind_depths(R),
        targets=judge(rows, naive_row) + judge_batch(batch),
        rows=rows,
        naive=naive_row,
        sampling_rows=sampling_rows,
        step_costs=call_costs(costs),
        theorem2=theorem2,
        spectrum=spectrum,
        context=sweep,
        batch=batch,
    )


def with_overrides(plan: BenchPlan, **grid) -> BenchPlan:
    """The plan with some of its grid workload's fields replaced (`--tokens`, `--repeats`)."""
    return dataclasses.replace(plan, grid=dataclasses.replace(plan.grid, **grid))
