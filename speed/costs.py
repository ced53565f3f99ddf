"""The cost of one engine call, and the ideal speedup it implies (docs/design.md section 5).

A run counts its engine calls per (phase, padded width) (`Stats.calls`); the acceptance
statistics fix these counts. The cost c(phase, w) of one call (`Engine.run_phase`: inputs, the
batched forward, outputs) is measured in the same runs (`Decoder.time_calls`), pooled over
every setting and round: total seconds in (phase, w) calls / their number. Then

    ideal time per token  = sum over (phase, w) of calls(phase, w) * c(phase, w) / decode tokens
    ideal speedup         = baseline decode time per token / ideal time per token
    efficiency            = measured speedup / ideal speedup = ideal time / measured time

that is, the speedup the strategy would reach if nothing but its engine calls took time, each
at the average cost of a call of its width, and the share of its time that such calls would
take. What efficiency misses is host work (lane bookkeeping, drafting, verification,
sampling) and calls dearer than the average of their width (side lanes, many strided runs).

`step_costs` times calls outside a decode, at a chosen context length (the context sweep);
`call_parts` says where the time of one such call goes (host planning, the cache's writes and
reads, attention over the cache, the MLP, the rest of the forward).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

import fastdec.engine
import refdec.layers
from fastdec import Engine, Lane
from refdec.errors import LoopcertError
from speed.timing import sync

CLOCK_INDEX = {"wall": 0, "cpu": 1}


@dataclass(frozen=True)
class CallCost:
    """Mean seconds of one engine call of `phase` at padded `width`, by both clocks."""

    phase: str  # prelude / recur / readout
    width: int
    wall: float
    cpu: float
    calls: int  # how many calls the mean is over


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


def call_costs(pooled: dict) -> list[CallCost]:
    return [CallCost(phase, w, a, b, n) for (phase, w), (a, b, n) in pooled.items()]


def ideal_seconds(calls: dict, cost: dict, clock: int) -> float:
    """sum over (phase, w) of calls(phase, w) * cost(phase, w); clock 0 = wall, 1 = cpu."""
    return sum(n * cost[(phase, w)][clock] for phase, per in calls.items() for w, n in per.items())


def probe_lanes(
    engine: Engine, kind: str, w: int, pos0: int, gen: torch.Generator, spread: bool = True
) -> list[Lane]:
    """w main-line lanes at positions pos0.. in one strided run (a wavefront, as pipelining has);
    recur lanes sit at depths in arithmetic progression (`spread`) or all at depth R - 1."""
    R, d = engine.depth, engine.cfg.d_model
    lanes = []
    # the states of one earlier call's output rows, as a decode's lanes hold them
    h = torch.randn(w, 1, d, generator=gen).to(engine.device, engine.dtype)
    e = h.clone()
    for i in range(w):
        if kind == "prelude":
            depth = 0
        elif kind == "recur":
            depth = i * ((R - 1) // (w - 1)) if w > 1 and spread else R - 1
        else:
            depth = R
        lanes.append(Lane(pos0 + i, i % engine.cfg.vocab_size, depth=depth, h=(h, i), e=(e, i)))
    return lanes


def step_costs(engine: Engine, context: int, keys: Sequence[tuple[str, int]], calls: int = 8) -> dict:
    """(phase, width) -> (wall, cpu) seconds of one `Engine.run_phase` call of w lanes at
    positions around `context` (a call reads up to its last lane's position), the engine's own
    reads and widths. The probe writes cache rows: a Decoder that saved a prefill in this
    engine must forget it (`Decoder.forget_prefills`)."""
    gen = torch.Generator().manual_seed(0)
    out = {}
    with torch.no_grad():
        for kind, w in keys:
            pos0 = max(0, context - w // 2)  # the lanes straddle `context`
            if pos0 + w > engine.capacity:
                raise LoopcertError(f"context {context} + width {w} exceeds capacity {engine.capacity}")
            lanes = probe_lanes(engine, kind, w, pos0, gen)
            engine.run_phase(kind, lanes)  # warm-up
            sync(engine.device)
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(calls):
                engine.run_phase(kind, lanes)
            sync(engine.device)
            out[(kind, w)] = ((time.perf_counter() - t0) / calls, (time.process_time() - c0) / calls)
    return out


@dataclass(frozen=True)
class CallParts:
    """Seconds of one recurrence call (`Engine.run_phase`) of `width` lanes at `context` cached
    positions, by part. total is timed alone; the parts in separate, instrumented calls, so
    `other` (total minus the parts) also absorbs the instrumentation's few clock reads."""

    width: int
    context: int
    total: float
    host: float  # Engine.phase_inputs: planning the call, index tensors, stacking lane states (Python)
    cache_write: float  # Timeline.write_index and write_at: the call's keys and values into the cache
    cache_read: float  # Timeline.run_view / side_view / gather: the keys and values the lanes read
    attention: float  # fastdec.engine.attention: scores, softmax and values over the keys read
    mlp: float  # refdec.layers.mlp: the core blocks' MLPs
    other: float  # the rest of the forward: projections, RoPE, norms, the adapter, dispatch and glue

    def shares(self) -> dict[str, float]:
        """Each part's share of total."""
        names = ("host", "cache_write", "cache_read", "attention", "mlp", "other")
        return {n: getattr(self, n) / self.total if self.total > 0 else 0.0 for n in names}


@contextlib.contextmanager
def _timing(targets: list[tuple[object, str, str]], clock, acc: dict[str, float]):
    """Replace each (owner, attribute) function by one that adds its time to acc[part], then
    restore it. Probes only: a decode never runs instrumented."""
    saved = []

    def timed(fn, part):
        def wrapper(*a, **k):
            t0 = clock()
            try:
                return fn(*a, **k)
            finally:
                acc[part] += clock() - t0

        return wrapper

    try:
        for owner, attr, part in targets:
            own = attr in vars(owner)  # a module's function; else an instance's method (from its class)
            saved.append((owner, attr, getattr(owner, attr) if own else None))
            setattr(owner, attr, timed(getattr(owner, attr), part))
        yield acc
    finally:
        for owner, attr, fn in reversed(saved):
            if fn is not None:
                setattr(owner, attr, fn)
            else:
                delattr(owner, attr)


def call_parts(engine: Engine, context: int, width: int, clock: str = "cpu", calls: int = 16) -> CallParts:
    """Where one recurrence call of `width` lanes around `context` goes (CallParts), by `clock`
    ("cpu": process time, "wall"), each figure the mean over `calls` calls. Writes cache rows,
    as step_costs does."""
    now = time.process_time if clock == "cpu" else time.perf_counter
    total = step_costs(engine, context, [("recur", width)], calls)[("recur", width)][CLOCK_INDEX[clock]]
    gen = torch.Generator().manual_seed(0)
    lanes = probe_lanes(engine, "recur", width, max(0, context - width // 2), gen)
    with torch.inference_mode():
        t0 = now()
        for _ in range(calls):
            engine.phase_inputs("recur", lanes)
        host = (now() - t0) / calls
        tl = engine.timeline("recur")
        acc = dict.fromkeys(("cache_write", "cache_read", "attention", "mlp"), 0.0)
        targets = [
            (tl, "write_index", "cache_write"),
            (tl, "write_at", "cache_write"),
            (tl, "run_view", "cache_read"),
            (tl, "side_view", "cache_read"),
            (tl, "gather", "cache_read"),
            (fastdec.engine, "attention", "attention"),
            (refdec.layers, "mlp", "mlp"),
        ]
        with _timing(targets, now, acc):
            engine.run_phase("recur", lanes)  # warm-up
            for k in acc:
                acc[k] = 0.0
            for _ in range(calls):
                engine.run_phase("recur", lanes)
        sync(engine.device)
    parts = {k: v / calls for k, v in acc.items()}
    return CallParts(width, context, total, host, **parts, other=total - host - sum(parts.values()))
