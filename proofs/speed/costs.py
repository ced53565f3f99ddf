"""The cost of one engine call, and the ideal speedup it implies (DESIGN.md section 5).

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

`step_costs` times calls outside a decode, at a chosen context length (the context sweep).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fastdec import Engine, Lane
from proofs.speed.timing import sync
from refdec.errors import LoopcertError

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


def probe_lanes(engine: Engine, kind: str, w: int, pos0: int, gen: torch.Generator,
                spread: bool = True) -> list[Lane]:
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
