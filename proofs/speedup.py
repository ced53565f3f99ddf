"""How fast fastdec's strategies are against its own autoregressive baseline, and why (issue 6;
DESIGN.md section 5 "Performance model", section 6 check 6). Every function measures and
returns plain data; reports/speedup.py renders it, proofs/gates.py compares it with a baseline.

Timing protocol: ratios, never absolute times. All settings decode the same prompts with the
same seeds, interleaved within each repeat (the order rotates), so a change in the host's
load hits them alike; a setting's speedup is the median over repeats of (baseline decode time
/ its decode time) in that repeat. Decode time is `Stats.decode_seconds`: the prefill, the
same for every strategy, and the first token, which comes out of it, are excluded. Two clocks
are kept: wall time (what a user sees; the report's figures) and process CPU time (what this
process did; steadier when other jobs share the host).

Ideal speedup and efficiency. A run counts its engine calls per (phase, padded width)
(`Stats.calls`); the acceptance statistics fix these counts. The cost c(phase, w) of one call
(`Engine.run_phase`: inputs, the batched forward, outputs) is measured in the same runs
(`Decoder.time_calls`), pooled over every setting and round: total seconds in (phase, w)
calls / their number. Then

    ideal time per token  = sum over (phase, w) of calls(phase, w) * c(phase, w) / decode tokens
    ideal speedup         = baseline decode time per token / ideal time per token
    efficiency            = measured speedup / ideal speedup = ideal time / measured time

that is, the speedup the strategy would reach if nothing but its engine calls took time, each
at the average cost of a call of its width, and the share of its time that such calls would
take. What efficiency misses is host work (lane bookkeeping, drafting, verification,
sampling) and calls dearer than the average of their width (side lanes, many strided runs).
The baseline's own efficiency is reported the same way.

Settings are labelled by `Setting.label`; the baseline is the "autoregressive" setting.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fastdec import DecodeConfig, Decoder, Engine, Lane, Stats
from proofs.progress import Progress
from proofs.protocol import tokens_of
from proofs.stamp import stamp
from proofs.theorem2 import best_integer_depths, expected_cost, fit_depth_curve, optimal_depths
from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams, transform

GREEDY = SamplingParams()
SAMPLING = SamplingParams(temperature=1.0)
BASELINE = "autoregressive"
NAIVE = "naive-kv"  # proofs.naive_kv: the honest-baseline reference loop (DESIGN.md section 6)
COUNTS = (
    "tokens",
    "from_first",
    "from_second",
    "from_restart",
    "proposals",
    "accepted",
    "rounds",
    "escalations",
    "gate_checks",
    "gate_opens",
    "rewind_checks",
    "rewind_hits",
    "steps",
    "prefill_steps",
    "lane_steps",
)


Setting = DecodeConfig  # a bench setting is a fastdec.DecodeConfig; its label names it everywhere


def grid(R: int, quick: bool) -> list[Setting]:
    """The baseline, draft-verify, and pipelined over a (d1, d2) grid (d2 None: no second
    proposal); full mode adds more points and the lossy adaptive-verify. Depths >= R drop out."""
    out = [Setting("autoregressive")]
    dv = [(4, 4)] if quick else [(2, 4), (4, 4), (2, 8), (4, 8)]
    out += [Setting("draft-verify", draft_depth=d1, draft_ahead=k) for d1, k in dv if d1 < R]
    d1s = (1, 2, 4) if quick else (1, 2, 3, 4, 6)
    d2s = (None, 8, 16) if quick else (None, 4, 6, 8, 12, 16, 24)
    out += [Setting("pipelined", draft_depth=a, second_depth=b)
            for a in d1s for b in d2s if a < R and (b is None or a < b < R)]
    if not quick and 2 < R // 4 < R:
        out.append(Setting("adaptive-verify", draft_depth=2, draft_ahead=4, rewind_depth=R // 4))
    return out


def gate_settings(R: int) -> list[Setting]:
    """The few settings the regression gates time (proofs.gates)."""
    out = [Setting("autoregressive")]
    if 4 < R:
        out.append(Setting("draft-verify", draft_depth=4, draft_ahead=4))
    d1 = 2 if 2 < R else 1
    out.append(Setting("pipelined", draft_depth=d1))
    d2 = min(8, R - 1)
    if d1 < d2:
        out.append(Setting("pipelined", draft_depth=d1, second_depth=d2))
    return out


def rewind_depths(R: int) -> list[int]:
    """L = R/8, R/4, R/2 (rounded down, at least 1, distinct)."""
    return sorted({max(1, R // k) for k in (8, 4, 2)})


# -- timing ------------------------------------------------------------------------------------


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def aggregate(stats: Sequence[Stats]) -> dict:
    """Sum the counts of several runs of one setting; derived rates from the sums."""
    s0 = stats[0]
    tot = Stats(s0.strategy, s0.depth, s0.draft_depth, s0.second_depth)
    for s in stats:
        for name in COUNTS:
            setattr(tot, name, getattr(tot, name) + getattr(s, name))
        tot.peak_lanes = max(tot.peak_lanes, s.peak_lanes)
        for w, n in s.steps_per_width.items():
            tot.steps_per_width[w] = tot.steps_per_width.get(w, 0) + n
        for phase, per in s.calls.items():
            dst = tot.calls.setdefault(phase, {})
            for w, n in per.items():
                dst[w] = dst.get(w, 0) + n
        for d, (c, h) in s.rewind_at.items():
            acc = tot.rewind_at.setdefault(d, [0, 0])
            acc[0] += c
            acc[1] += h
    d = tot.as_dict()
    for name in (
        "seconds",
        "prefill_seconds",
        "cpu_seconds",
        "prefill_cpu_seconds",
        "decode_seconds",
        "tokens_per_s",
        "decode_tokens_per_s",
    ):
        d.pop(name)  # timings live in the repeat lists, not in the (deterministic) counts
    d["steps_per_token"] = tot.steps / d["decode_tokens"] if d["decode_tokens"] else 0.0
    return d


def time_runs(
    decoders: dict,
    prompts: Sequence[Sequence[int]],
    n_tokens: int,
    repeats: int,
    sampling: SamplingParams = GREEDY,
    seed: int = 0,
    progress: Progress | None = None,
) -> dict:
    """Time every decoder on every prompt, `repeats` rounds, interleaved per prompt: within a
    round, each prompt is decoded by every decoder in turn (the order rotates), so a burst of
    load on the host lands on all of them alike.

    decoders: label -> object with generate(prompt, n, sampling, seed); fastdec decoders report
    decode-only times through their Stats (and time their engine calls: `time_calls` is set),
    others (proofs.naive_kv) only whole-call times. Prompt i uses seed + i.
    Returns label -> {"wall", "cpu": decode seconds per round; "wall_total", "cpu_total": whole
    generate() seconds per round; "decode_tokens"; "tokens" (per prompt); "stats" (aggregate, or
    None); "call_seconds": (phase, w) -> [wall, cpu, calls] summed over rounds; "deterministic":
    every round gave the same tokens and counts}.
    """
    labels = list(decoders)
    for dec in decoders.values():  # warm-up: allocation, first-call dispatch, CUDA graph capture
        if isinstance(dec, Decoder):
            dec.time_calls = True
        dec.generate(list(prompts[0]), min(4, n_tokens), sampling, seed)
    out = {
        lb: {
            "wall": [],
            "cpu": [],
            "wall_total": [],
            "cpu_total": [],
            "tokens": None,
            "stats": None,
            "decode_tokens": 0,
            "deterministic": True,
            "call_seconds": {},
        }
        for lb in labels
    }
    for r in range(repeats):
        cur = {lb: {"clock": [0.0, 0.0, 0.0, 0.0], "tokens": [], "stats": []} for lb in labels}
        for i, p in enumerate(prompts):
            k = (r + i) % len(labels)
            for label in labels[k:] + labels[:k]:
                dec, rec, acc = decoders[label], out[label], cur[label]
                _sync(getattr(dec, "device", "cpu"))
                t0, c0 = time.perf_counter(), time.process_time()
                res = dec.generate(list(p), n_tokens, sampling, seed + i)
                wall_t, cpu_t = time.perf_counter() - t0, time.process_time() - c0
                acc["tokens"].append(tokens_of(res))
                s = getattr(res, "stats", None)
                if s is None:
                    acc["clock"] = [a + b for a, b in zip(acc["clock"], (wall_t, cpu_t, wall_t, cpu_t))]
                    continue
                acc["stats"].append(s)
                dec_t = (s.decode_seconds, s.cpu_seconds - s.prefill_cpu_seconds, wall_t, cpu_t)
                acc["clock"] = [a + b for a, b in zip(acc["clock"], dec_t)]
                for phase, per in s.call_seconds.items():
                    for w, (a, b) in per.items():
                        cs = rec["call_seconds"].setdefault((phase, w), [0.0, 0.0, 0])
                        cs[0] += a
                        cs[1] += b
                        cs[2] += s.calls[phase][w]
        for label in labels:
            rec, acc = out[label], cur[label]
            agg = aggregate(acc["stats"]) if acc["stats"] else None
            if rec["tokens"] is None:
                rec["tokens"], rec["stats"] = acc["tokens"], agg
                rec["decode_tokens"] = sum(max(len(t) - 1, 0) for t in acc["tokens"])
            elif acc["tokens"] != rec["tokens"] or (
                agg is not None and _counts(agg) != _counts(rec["stats"])
            ):
                rec["deterministic"] = False
            for key, v in zip(("wall", "cpu", "wall_total", "cpu_total"), acc["clock"]):
                rec[key].append(v)
        if progress:
            progress(f"  round {r + 1}/{repeats} done")
    return out


def _counts(agg: dict) -> dict:
    return {k: agg[k] for k in (*COUNTS, "peak_lanes", "calls", "rewind_at")}


def ratio(base: Sequence[float], other: Sequence[float]) -> float:
    """Median over rounds of base/other (paired by round: load drift cancels)."""
    rs = [b / o for b, o in zip(base, other) if o > 0]
    return statistics.median(rs) if rs else float("nan")


# -- the cost of one engine call ------------------------------------------------------------------


def _probe_lanes(engine: Engine, kind: str, w: int, pos0: int, gen: torch.Generator) -> list[Lane]:
    """w main-line lanes at positions pos0.. in one strided run (a wavefront, as pipelining has)."""
    R, d = engine.depth, engine.cfg.d_model
    lanes = []
    for i in range(w):
        if kind == "prelude":
            depth = 0
        elif kind == "recur":
            depth = i * ((R - 1) // (w - 1)) if w > 1 else R - 1
        else:
            depth = R
        h = torch.randn(1, d, generator=gen).to(engine.device, engine.dtype)
        lanes.append(Lane(pos0 + i, i % engine.cfg.vocab_size, depth=depth, h=h, e=h.clone()))
    return lanes


def step_costs(engine: Engine, context: int, keys: Sequence[tuple[str, int]], calls: int = 8) -> dict:
    """(phase, width) -> (wall, cpu) seconds of one `Engine.run_phase` call of w lanes at
    positions around `context` (a call reads up to its last lane's position), the engine's own
    reads and widths."""
    gen = torch.Generator().manual_seed(0)
    out = {}
    with torch.no_grad():
        for kind, w in keys:
            pos0 = max(0, context - w // 2)  # the lanes straddle `context`
            if pos0 + w > engine.capacity:
                raise LoopcertError(f"context {context} + width {w} exceeds capacity {engine.capacity}")
            lanes = _probe_lanes(engine, kind, w, pos0, gen)
            engine.run_phase(kind, lanes)  # warm-up
            _sync(engine.device)
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(calls):
                engine.run_phase(kind, lanes)
            _sync(engine.device)
            out[(kind, w)] = ((time.perf_counter() - t0) / calls, (time.process_time() - c0) / calls)
    return out


def ideal_seconds(calls: dict, cost: dict, clock: int) -> float:
    """sum over (phase, w) of calls(phase, w) * cost(phase, w); clock 0 = wall, 1 = cpu."""
    return sum(n * cost[(phase, w)][clock] for phase, per in calls.items() for w, n in per.items())


def pooled_costs(times: dict) -> dict:
    """(phase, w) -> (wall, cpu, calls): mean seconds of one engine call of that phase and width,
    pooled over every setting and round of `time_runs`."""
    tot: dict = {}
    for rec in times.values():
        for k, (a, b, n) in rec["call_seconds"].items():
            acc = tot.setdefault(k, [0.0, 0.0, 0])
            acc[0] += a
            acc[1] += b
            acc[2] += n
    return {k: (a / n, b / n, n) for k, (a, b, n) in sorted(tot.items()) if n}


# -- depth spectrum and Theorem 2 -------------------------------------------------------------------


def depth_spectrum(model, prompts: Sequence[Sequence[int]], generated: Sequence[Sequence[int]]) -> dict:
    """Per depth r = 1..R, over the decoded positions (the baseline's greedy tokens): mean
    TV(p_r, p_R) at temperature 1 and the greedy agreement argmax p_r == argmax p_R.

    Laws from refdec's uncached `depth_logits` (the oracle; float64 transform of its logits).
    """
    R = model.cfg.recurrence
    tvs, agree = [], []
    for p, g in zip(prompts, generated):
        if not g:
            continue
        ids = list(p) + list(g[:-1])  # position t's law predicts token t+1
        lg = model.depth_logits(ids, list(range(1, R + 1)))[:, len(p) - 1 :]  # (R, n, V)
        laws = transform(lg.cpu(), SAMPLING)
        tvs.append(0.5 * (laws - laws[-1:]).abs().sum(-1))  # (R, n)
        top = lg.argmax(-1)
        agree.append((top == top[-1:]).double())
    if not tvs:
        raise LoopcertError("depth spectrum: no decoded positions")
    tv, ag = torch.cat(tvs, 1), torch.cat(agree, 1)
    return {
        "R": R,
        "positions": int(tv.shape[1]),
        "temperature": 1.0,
        "depth": list(range(1, R + 1)),
        "mean_tv": tv.mean(1).tolist(),
        "max_tv": tv.max(1).values.tolist(),
        "agreement": ag.mean(1).tolist(),
    }


def theorem2_compare(spectrum: dict, rows: Sequence[dict]) -> dict:
    """Theorem 2's optimum from the envelope fitted on the measured mean TV(p_r, p_R), beside the
    measured best (d1, d2) of the grid (highest wall-clock speedup among pipelined settings)."""
    R = spectrum["R"]
    out: dict = {"R": R}
    pipes = [r for r in rows if r["strategy"] == "pipelined"]
    if pipes:
        best = max(pipes, key=lambda r: r["speedup"])
        out["measured_best"] = {
            "d1": best["draft_depth"],
            "d2": best["second_depth"],
            "speedup": best["speedup"],
            "label": best["label"],
        }
        two = [r for r in pipes if r["second_depth"] is not None]
        if two:
            b2 = max(two, key=lambda r: r["speedup"])
            out["measured_best_with_d2"] = {
                "d1": b2["draft_depth"],
                "d2": b2["second_depth"],
                "speedup": b2["speedup"],
                "label": b2["label"],
            }
    try:
        env = fit_depth_curve(spectrum["mean_tv"])
    except LoopcertError as e:
        out.update(fitted=False, reason=str(e))
        return out
    alpha, beta, depths = env.alpha, env.beta, list(env.depths)
    d1, d2 = optimal_depths(alpha, beta, R)
    out.update(
        fitted=True,
        alpha=alpha,
        beta=beta,
        fitted_depths=depths,
        d1_star=d1,
        d2_star=d2,
        best_integer=best_integer_depths(alpha, beta, R) if R >= 3 else None,
    )
    grid_pairs = [(r["draft_depth"], r["second_depth"]) for r in pipes if r["second_depth"] is not None]
    if grid_pairs:
        out["best_on_grid"] = min(grid_pairs, key=lambda d: (expected_cost(d[0], d[1], alpha, beta, R), d))
        out["bound_cost"] = {f"{a},{b}": expected_cost(a, b, alpha, beta, R) for a, b in grid_pairs}
    return out


# -- context length and the performance model -------------------------------------------------------


def perf_model(model, d1: int, R: int, context: int) -> dict:
    """DESIGN.md section 5: ideal speedup R(Wb + A) / (d1 Wb + R A) of a fully accepted pipeline,
    Wb = weight bytes one step reads (the recurrent block: adapter + core layers), A = KV bytes
    one lane reads per step (its depth's keys and values at `context` positions, core layers)."""
    cfg = model.cfg
    elem = next(model.parameters()).element_size()
    wb = sum(p.numel() for p in model.core.parameters()) * elem
    if model.adapter is not None:
        wb += model.adapter.weight.numel() * elem
    a = cfg.n_core * 2 * cfg.n_kv_heads * cfg.head_dim * context * elem
    return {"weight_bytes": wb, "kv_bytes_per_lane": a, "predicted": R * (wb + a) / (d1 * wb + R * a)}


def long_sequence(prompts: Sequence[Sequence[int]], n: int) -> list[int]:
    """The first n tokens of the prompts laid end to end (cycled): a real context of any length."""
    seq: list[int] = []
    while len(seq) < n:
        seq += [t for p in prompts for t in p]
        if not seq:
            raise LoopcertError("no prompt tokens to build a context from")
    return seq[:n]


def context_sweep(
    model,
    setting: Setting,
    lengths: Sequence[int],
    prompts,
    n_tokens: int,
    repeats: int,
    device="cpu",
    seed: int = 0,
    progress: Progress | None = None,
) -> dict:
    """Speedup of `setting` over the baseline against the number of cached positions, beside the
    performance model, and the measured cost of a recurrence call at the pipeline's width W =
    ceil(R/d1) over width 1 at that context (the KV-traffic term of the model)."""
    R = model.cfg.recurrence
    clock = default_clock(device)
    c = {"wall": 0, "cpu": 1}[clock]
    d1 = setting.draft_depth or R
    w = next(x for x in (1, 2, 4, 8, 16, 32, 64) if x >= -(-R // d1))
    base = Decoder(model, Setting("autoregressive"), device=device)
    fast = Decoder(model, setting, device=device)
    for dec in (base, fast):  # one prefill per context length and decoder, not one per round
        dec.reuse_prefill = True
    seq = long_sequence(prompts, max(lengths))
    rows = []
    for L in lengths:
        if L + n_tokens > model.cfg.max_seq_len:
            continue
        t = time_runs({BASELINE: base, setting.label: fast}, [seq[:L]], n_tokens, repeats, GREEDY, seed)
        eng = fast.engine(L + n_tokens)
        cost = step_costs(eng, L, [("recur", 1), ("recur", w)], calls=16)
        fast.forget_prefills()  # the probe wrote rows a saved prefill may own
        b, f = t[BASELINE], t[setting.label]
        rows.append(
            {
                "context": L,
                "baseline_tokens_per_s": b["decode_tokens"] / statistics.median(b[clock]),
                "tokens_per_s": f["decode_tokens"] / statistics.median(f[clock]),
                "speedup": ratio(b[clock], f[clock]),
                "speedup_wall": ratio(b["wall"], f["wall"]),
                "speedup_cpu": ratio(b["cpu"], f["cpu"]),
                "acceptance": f["stats"]["acceptance_rate"],
                "gamma": f["stats"]["gamma"],
                "width": w,
                "step_cost_ratio": cost[("recur", w)][c] / cost[("recur", 1)][c],
                **perf_model(model, d1, R, L),
            }
        )
        if progress:
            r = rows[-1]
            progress(f"  context {L}: x{r['speedup']:.2f} (model x{r['predicted']:.2f})")
    stop = next((r["context"] for r in rows if r["speedup"] < 1.0), None)
    return {
        "setting": setting.label,
        "d1": d1,
        "R": R,
        "tokens": n_tokens,
        "repeats": repeats,
        "rows": rows,
        "clock": clock,
        "stops_paying_at": stop,
    }


# -- the whole report --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    mode: str
    prompts: int  # how many prompts
    prompt_len: int  # each cut to its last prompt_len tokens
    tokens: int  # new tokens per prompt
    repeats: int
    sampling_repeats: int
    lengths: tuple[int, ...]  # context sweep
    sweep_tokens: int
    sweep_repeats: int


PLANS = {
    "quick": Plan(
        "quick",
        prompts=2,
        prompt_len=48,
        tokens=32,
        repeats=3,
        sampling_repeats=3,
        lengths=(64, 512, 2048),
        sweep_tokens=24,
        sweep_repeats=2,
    ),
    "full": Plan(
        "full",
        prompts=4,
        prompt_len=64,
        tokens=64,
        repeats=5,
        sampling_repeats=3,
        lengths=(64, 128, 256, 512, 1024, 2048),
        sweep_tokens=48,
        sweep_repeats=3,
    ),
}


def default_clock(device) -> str:
    """ "cpu" (process time) for a one-thread CPU run, where it is the work done whatever else the
    host runs, and equals wall time on an idle host; "wall" on CUDA (asynchronous work) or with
    several threads (process time sums them)."""
    return "cpu" if torch.device(device).type == "cpu" and torch.get_num_threads() == 1 else "wall"


def rows_from(
    times: dict, settings: Sequence[Setting], costs: dict, clock: str = "wall", base_label: str = BASELINE
) -> list[dict]:
    """One row per setting: speedup (by `clock`; both clocks' beside), decode tokens/s, ideal
    speedup and efficiency (by `clock`), acceptance statistics."""
    c = {"wall": 0, "cpu": 1}[clock]
    base = times[base_label]
    base_per_tok = statistics.median(base[clock]) / base["decode_tokens"]
    rows = []
    for st in settings:
        t = times[st.label]
        s = t["stats"]
        n = t["decode_tokens"]
        ideal = ideal_seconds(s["calls"], costs, c)
        speed = ratio(base[clock], t[clock])
        ideal_speedup = base_per_tok / (ideal / n) if ideal > 0 else float("nan")
        rows.append(
            {
                "label": st.label,
                "strategy": st.strategy,
                "draft_depth": st.draft_depth,
                "second_depth": st.second_depth,
                "draft_ahead": st.draft_ahead,
                "verify_depth": st.verify_depth,
                "lossless": st.strategy != "adaptive-verify",
                "clock": clock,
                "tokens_per_s": n / statistics.median(t[clock]),
                "wall_tokens_per_s": n / statistics.median(t["wall"]),
                "speedup": speed,
                "speedup_wall": ratio(base["wall"], t["wall"]),
                "speedup_cpu": ratio(base["cpu"], t["cpu"]),
                "ideal_speedup": ideal_speedup,
                "efficiency": speed / ideal_speedup,
                "in_engine_share": sum(v[c] for v in t["call_seconds"].values()) / sum(t[clock]),
                "wall": t["wall"],
                "cpu": t["cpu"],
                "ideal_seconds": ideal,
                "decode_tokens": n,
                "same_tokens_as_baseline": t["tokens"] == base["tokens"],
                "deterministic": t["deterministic"],
                **{
                    k: s[k]
                    for k in (
                        "gamma",
                        "acceptance_rate",
                        "from_first",
                        "from_second",
                        "from_restart",
                        "proposals",
                        "accepted",
                        "gate_open_rate",
                        "gate_checks",
                        "gate_opens",
                        "mean_live_lanes",
                        "peak_lanes",
                        "steps",
                        "steps_per_token",
                        "calls",
                    )
                },
            }
        )
    return rows


def telemetry(model, settings: Sequence[Setting], prompts, n_tokens: int, device="cpu") -> dict:
    """label -> {L: [checks, hits]}: rewind telemetry at L = R/8, R/4, R/2 in separate, untimed
    runs (each telemetry depth adds a readout, so it would slow the timed runs)."""
    R = model.cfg.recurrence
    out = {}
    for st in settings:
        if st.strategy == "autoregressive":
            continue
        dec = Decoder(model, dataclasses.replace(st, telemetry_depths=rewind_depths(R)), device=device)
        stats = [dec.generate(list(p), n_tokens, GREEDY, i).stats for i, p in enumerate(prompts)]
        out[st.label] = aggregate(stats)["rewind_at"]
    return out


def bench_stamp(model_name: str, model, device: str, plan: Plan, seed: int, load: dict) -> dict:
    """proofs.stamp's fields, plus the plan's mode and the host's load average."""
    dtype = next(model.parameters()).dtype
    seeds = {"prompt i": f"{seed} + i", "weights": "as shipped"}
    return {**stamp(model_name, device, dtype, seeds), "mode": plan.mode, "load_average": load}


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def bench(
    model,
    model_name: str,
    plan: Plan,
    prompts: Sequence[Sequence[int]],
    device="cpu",
    seed: int = 0,
    naive=None,
    progress: Progress | None = None,
) -> dict:
    """Everything the speedup report shows, as one JSON-able dict."""
    say = progress or (lambda _: None)
    load = {"start": loadavg()}
    R = model.cfg.recurrence
    every_prompt = [tuple(p) for p in prompts]  # the context sweep lays them all end to end
    prompts = [tuple(p)[-plan.prompt_len :] for p in prompts[: plan.prompts]]
    settings = grid(R, plan.mode == "quick")
    decoders = {st.label: Decoder(model, st, device=device) for st in settings}
    if naive is not None:
        decoders[NAIVE] = naive
    say(
        f"grid: {len(settings)} settings x {len(prompts)} prompts x {plan.tokens} tokens, "
        f"{plan.repeats} rounds (greedy)"
    )
    times = time_runs(decoders, prompts, plan.tokens, plan.repeats, GREEDY, seed, progress=say)
    costs = pooled_costs(times)
    clock = default_clock(device)
    rows = rows_from(times, settings, costs, clock)
    say("rewind telemetry (untimed)")
    tele = telemetry(model, settings, prompts, plan.tokens, device)
    for row in rows:
        got = tele.get(row["label"], {})
        row["rewind_hit_rate"] = {d: (h / c if c else None) for d, (c, h) in got.items()}
        row["rewind_checks"] = {d: c for d, (c, _) in got.items()}
    naive_row = None
    if naive is not None:
        b, n = times[BASELINE], times[NAIVE]
        key = f"{clock}_total"
        toks = sum(len(t) for t in b["tokens"])
        naive_row = {
            "naive_tokens_per_s": toks / statistics.median(n[key]),
            "baseline_tokens_per_s": toks / statistics.median(b[key]),
            "baseline_over_naive": ratio(n[key], b[key]),
            "baseline_over_naive_wall": ratio(n["wall_total"], b["wall_total"]),
            "baseline_over_naive_cpu": ratio(n["cpu_total"], b["cpu_total"]),
            "same_tokens": n["tokens"] == b["tokens"],
            "measured": "whole generate() calls, prefill included",
        }
    say("sampling (T=1)")
    samp_settings = gate_settings(R)
    samp = time_runs(
        {
            st.label: decoders[st.label] if st.label in decoders else Decoder(model, st, device=device)
            for st in samp_settings
        },
        prompts,
        plan.tokens,
        plan.sampling_repeats,
        SAMPLING,
        seed,
    )
    sampling_rows = rows_from(samp, samp_settings, pooled_costs(samp), clock)
    say("depth spectrum")
    spectrum = depth_spectrum(model, prompts, times[BASELINE]["tokens"])
    theorem2 = theorem2_compare(spectrum, rows)
    say("context sweep")
    best = theorem2.get("measured_best", {})
    sweep_setting = (
        Setting("pipelined", draft_depth=best.get("d1", 2), second_depth=best.get("d2"))
        if best
        else Setting("pipelined", draft_depth=2)
    )
    sweep = context_sweep(
        model,
        sweep_setting,
        plan.lengths,
        every_prompt,
        plan.sweep_tokens,
        plan.sweep_repeats,
        device,
        seed,
        say,
    )
    load["end"] = loadavg()
    return {
        "stamp": bench_stamp(model_name, model, device, plan, seed, load),
        "plan": dataclasses.asdict(plan),
        "clock": clock,
        "R": R,
        "prompts": [len(p) for p in prompts],
        "tokens": plan.tokens,
        "step_costs": [
            {"phase": k[0], "width": k[1], "wall": v[0], "cpu": v[1], "calls": v[2]} for k, v in costs.items()
        ],
        "rows": rows,
        "sampling_rows": sampling_rows,
        "naive": naive_row,
        "rewind_depths": rewind_depths(R),
        "spectrum": spectrum,
        "theorem2": theorem2,
        "context": sweep,
    }
