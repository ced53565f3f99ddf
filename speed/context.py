"""Speedup against context length, beside docs/design.md section 5's performance model, and where
the difference between the two goes.

Per committed token the autoregressive baseline runs R steps of width 1; a fully accepted
pipeline runs d1 steps of k = R/d1 lanes. Weights are read once per step, KV timelines once per
lane and step, so the ideal speedup is R(Wb + A) / (d1 Wb + R A) = k / m, with
m = (Wb + k A) / (Wb + A) the model's cost of a k-lane step over a 1-lane step (`perf_model`).

The measured speedup factors exactly into the model and three measured factors:

    measured = model x (m / s) x (d1 / n_fill) x (n_fill / n) x rest

- s = measured cost of one recurrence call at the pipeline's width W over width 1, at this
  context (`step_costs`): the step-cost factor m / s says how far the model's byte count
  predicts the real cost of a wide step;
- n = engine steps per decoded token (Stats): R / n is the step speedup the run reached, k when
  every draft is accepted and the pipeline never empties; (R / n) / k = d1 / n is the steps
  factor, split into the pipeline's fill (the first lane needs R - d1 more steps than a lane of
  a full pipeline: n_fill = d1 + (R - d1) / N over N decoded tokens, a fill factor d1 / n_fill)
  and rejections (each empties the pipeline, which refills: n_fill / n);
- rest = measured / ((R / n) / s): everything but recurrence calls (prelude and readout calls,
  host work: lanes, drafting, verification) and steps narrower or wider than W.

To say what a step costs, each row also times the recurrence call at a context of W positions
(fixed cost: weights and per-op overhead, no cache to read) at widths 1 and W, the W-lane
call with the cache read through gathered copies (the CUDA-graph path) instead of views, and
splits the 1-lane and W-lane calls at this context into parts (speed.costs.CallParts:
host planning, cache writes, cache reads, attention over the cache, the MLP, the rest).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from fastdec import DecodeConfig, Decoder
from refdec.errors import LoopcertError
from refdec.progress import Progress
from speed.costs import CLOCK_INDEX, CallParts, call_parts, step_costs
from speed.settings import BASELINE
from speed.timing import GREEDY, default_clock, ratio, time_runs


@dataclass(frozen=True)
class PerfModel:
    weight_bytes: int  # Wb: what one step reads of the recurrent block (adapter + core layers)
    kv_bytes_per_lane: int  # A: keys and values one lane reads per step (core layers, L positions)
    predicted: float  # R(Wb + A) / (d1 Wb + R A)


def perf_model(model, d1: int, R: int, context: int) -> PerfModel:
    """docs/design.md section 5: ideal speedup R(Wb + A) / (d1 Wb + R A) of a fully accepted pipeline,
    Wb = weight bytes one step reads (the recurrent block: adapter + core layers), A = KV bytes
    one lane reads per step (its depth's keys and values at `context` positions, core layers)."""
    cfg = model.cfg
    elem = next(model.parameters()).element_size()
    wb = sum(p.numel() for p in model.core.parameters()) * elem
    if model.adapter is not None:
        wb += model.adapter.weight.numel() * elem
    a = cfg.n_core * 2 * cfg.n_kv_heads * cfg.head_dim * context * elem
    return PerfModel(wb, a, R * (wb + a) / (d1 * wb + R * a))


def long_sequence(prompts: Sequence[Sequence[int]], n: int) -> list[int]:
    """The first n tokens of the prompts laid end to end (cycled): a real context of any length."""
    seq: list[int] = []
    while len(seq) < n:
        seq += [t for p in prompts for t in p]
        if not seq:
            raise LoopcertError("no prompt tokens to build a context from")
    return seq[:n]


def fill_steps_per_token(R: int, d1: int, n_tokens: int) -> float:
    """n_fill = d1 + (R - d1) / N: engine steps per decoded token of a pipeline that never
    rejects (its first lane needs R steps, every later one d1 more)."""
    return d1 + (R - d1) / n_tokens


def model_step_ratio(pm: PerfModel, lanes: float) -> float:
    """m = (Wb + k A) / (Wb + A): the performance model's cost of a k-lane step over a 1-lane step."""
    return (pm.weight_bytes + lanes * pm.kv_bytes_per_lane) / (pm.weight_bytes + pm.kv_bytes_per_lane)


@dataclass(frozen=True)
class ContextRow:
    context: int  # cached positions before decoding starts
    baseline_tokens_per_s: float
    tokens_per_s: float
    speedup: float
    speedup_wall: float
    speedup_cpu: float
    acceptance: float
    gamma: float
    width: int  # the pipeline's padded recurrence width W
    step_cost_ratio: float  # s: one recur call at W / one at width 1, at this context
    weight_bytes: int
    kv_bytes_per_lane: int
    kv_over_weight_bytes: float  # A / Wb
    predicted: float  # the performance model, k / m
    of_model: float  # speedup / predicted = step_cost_factor * fill_factor * rejection_factor * rest_factor
    model_step_ratio: float  # m
    steps_per_token: float  # n: engine steps per decoded token (the pipeline)
    step_cost_factor: float  # m / s
    fill_factor: float  # d1 / n_fill
    rejection_factor: float  # n_fill / n
    rest_factor: float  # measured / ((R / n) / s)
    # step cost x rest = measured / (model x fill x rejections): the engine against the model once
    # the run's own fill and acceptance are charged (the model assumes every draft accepted)
    engine_factor: float
    recur_1: float  # seconds of one recur call at width 1, this context
    recur_w: float  # ... at width W
    fixed_1: float  # one recur call at width 1 at a context of W positions: weights and overhead
    fixed_w: float  # ... at width W
    recur_w_gather: float  # the W-lane call at this context, keys/values gathered (copies), not viewed
    cache_share: float  # (recur_w - fixed_w) / recur_w: the share of a W-lane step spent on the cache
    gather_over_view: float  # recur_w_gather / recur_w
    parts_1: CallParts  # where the 1-lane recur call at this context goes (its total is recur_1)
    parts_w: CallParts  # ... the W-lane call (its total is recur_w)


@dataclass(frozen=True)
class ContextSweep:
    setting: str
    d1: int
    R: int
    tokens: int
    repeats: int
    rows: list[ContextRow]
    clock: str
    stops_paying_at: int | None  # the first context with speedup < 1
    main_loss: str | None  # at the longest context, the lowest factor: step cost, fill, rejections, rest
    step_cause: StepCause | None = None  # at the longest context, what a W-lane step's time is spent on
    compiled: bool = False  # the timed decoders ran compiled steps (the probes: eager engine calls)
    compile_seconds: float = 0.0  # what compiling them took, in time_runs' untimed warm-ups


@dataclass(frozen=True)
class StepCause:
    """What makes a W-lane recurrence call dearer than a 1-lane one at one context: the part
    (CallParts) that takes the most of the W-lane call, its share, and how much it grew over
    the 1-lane call's (W lanes at different depths read W different slices of the cache)."""

    context: int
    width: int
    part: str
    share: float  # of the W-lane call
    growth: float | None  # its time in the W-lane call / in the 1-lane call (None: 0 there)
    step_cost_ratio: float  # s: the whole W-lane call / the 1-lane call
    model_step_ratio: float  # m


def step_cause(row: ContextRow) -> StepCause:
    shares = row.parts_w.shares()
    part = max(shares, key=shares.get)
    one = getattr(row.parts_1, part)
    return StepCause(
        row.context,
        row.width,
        part,
        shares[part],
        getattr(row.parts_w, part) / one if one > 0 else None,  # strict JSON: no inf
        row.step_cost_ratio,
        row.model_step_ratio,
    )


def factors(row: ContextRow) -> dict[str, float]:
    """measured / model as a product of named factors (module docstring)."""
    return {
        "step cost": row.step_cost_factor,
        "fill": row.fill_factor,
        "rejections": row.rejection_factor,
        "rest": row.rest_factor,
    }


def main_loss(row: ContextRow) -> str:
    """The factor of measured / model that loses most (the lowest), by name."""
    f = factors(row)
    return min(f, key=f.get)


def context_sweep(
    model,
    setting: DecodeConfig,
    lengths: Sequence[int],
    prompts,
    n_tokens: int,
    repeats: int,
    device="cpu",
    seed: int = 0,
    progress: Progress | None = None,
    compile: bool = False,
) -> ContextSweep:
    """Speedup of `setting` over the baseline against the number of cached positions, beside the
    performance model, and the measured cost of a recurrence call at the pipeline's width W =
    ceil(R/d1) over width 1 at that context (the KV-traffic term of the model). `compile`: the two
    timed decoders run compiled steps (time_runs compiles them in its warm-up); the probes time
    an eager engine's calls (a compiled call is one fused graph: call_parts cannot take it apart)."""
    R = model.cfg.recurrence
    clock = default_clock(device)
    c = CLOCK_INDEX[clock]
    d1 = setting.draft_depth or R
    w = next(x for x in (1, 2, 4, 8, 16, 32, 64) if x >= -(-R // d1))
    base = Decoder(model, DecodeConfig("autoregressive"), device=device, compile=compile)
    fast = Decoder(model, setting, device=device, compile=compile)
    probe = Decoder(model, setting, device=device) if compile else fast
    for dec in (base, fast):  # one prefill per context length and decoder, not one per round
        dec.reuse_prefill = True
    seq = long_sequence(prompts, max(lengths))
    rows, compiled = [], 0.0
    for L in lengths:
        if L + n_tokens > model.cfg.max_seq_len:
            continue
        t = time_runs({BASELINE: base, setting.label: fast}, [seq[:L]], n_tokens, repeats, GREEDY, seed)
        compiled += t[BASELINE]["compile_seconds"] + t[setting.label]["compile_seconds"]
        eng = probe.engine(L + n_tokens)
        parts_1, parts_w = (call_parts(eng, L, x, clock, calls=16) for x in (1, w))
        fixed = step_costs(eng, w, [("recur", 1), ("recur", w)], calls=16)
        eng.reads = "gather"
        try:
            gather = step_costs(eng, L, [("recur", w)], calls=16)
        finally:
            eng.reads = "view"
        probe.forget_prefills()  # the probes wrote rows a saved prefill may own
        b, f = t[BASELINE], t[setting.label]
        pm = perf_model(model, d1, R, L)
        k = R / d1
        s_ratio = parts_w.total / parts_1.total
        m_ratio = model_step_ratio(pm, k)
        n = f["stats"]["steps_per_token"]
        n_fill = fill_steps_per_token(R, d1, f["decode_tokens"])
        speedup = ratio(b[clock], f[clock])
        rows.append(
            ContextRow(
                context=L,
                baseline_tokens_per_s=b["decode_tokens"] / statistics.median(b[clock]),
                tokens_per_s=f["decode_tokens"] / statistics.median(f[clock]),
                speedup=speedup,
                speedup_wall=ratio(b["wall"], f["wall"]),
                speedup_cpu=ratio(b["cpu"], f["cpu"]),
                acceptance=f["stats"]["acceptance_rate"],
                gamma=f["stats"]["gamma"],
                width=w,
                step_cost_ratio=s_ratio,
                weight_bytes=pm.weight_bytes,
                kv_bytes_per_lane=pm.kv_bytes_per_lane,
                kv_over_weight_bytes=pm.kv_bytes_per_lane / pm.weight_bytes,
                predicted=pm.predicted,
                of_model=speedup / pm.predicted,
                model_step_ratio=m_ratio,
                steps_per_token=n,
                step_cost_factor=m_ratio / s_ratio,
                fill_factor=d1 / n_fill,
                rejection_factor=n_fill / n,
                rest_factor=speedup / ((R / n) / s_ratio),
                engine_factor=(m_ratio / s_ratio) * (speedup / ((R / n) / s_ratio)),
                recur_1=parts_1.total,
                recur_w=parts_w.total,
                fixed_1=fixed[("recur", 1)][c],
                fixed_w=fixed[("recur", w)][c],
                recur_w_gather=gather[("recur", w)][c],
                cache_share=(parts_w.total - fixed[("recur", w)][c]) / parts_w.total,
                gather_over_view=gather[("recur", w)][c] / parts_w.total,
                parts_1=parts_1,
                parts_w=parts_w,
            )
        )
        if progress:
            r = rows[-1]
            progress(f"  context {L}: x{r.speedup:.2f} (model x{r.predicted:.2f})")
    stop = next((r.context for r in rows if r.speedup < 1.0), None)
    return ContextSweep(
        setting.label,
        d1,
        R,
        n_tokens,
        repeats,
        rows,
        clock,
        stop,
        main_loss(rows[-1]) if rows else None,
        step_cause(rows[-1]) if rows else None,
        compiled=compile,
        compile_seconds=compiled,
    )
