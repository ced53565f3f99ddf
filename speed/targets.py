"""The speed targets, judged on a measured grid (reports/speedup.py renders them).

They are set for the default model (R = 32) on a CPU, greedy, ratios measured in one run; for
other models and devices they are reference lines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from speed.rows import GridRow, NaiveComparison

TARGETS = {  # CPU, default model, R = 32, greedy
    "pipelined": 3.0,  # pipelined (2, 8) or the best grid point, over the baseline
    "draft-verify": 1.8,  # draft-verify, draft 4, ahead 4
    "efficiency": 0.8,  # measured / ideal, every strategy
    # the best pipelined setting over proofs.decoders.naive_kv (whole calls): fastdec's speedups hold
    # against a plain KV-cached loop, machinery included (its autoregressive strategy alone is
    # slower than that loop: rows.NaiveComparison)
    "naive": 1.0,
}


@dataclass(frozen=True)
class Target:
    name: str
    measured: float
    bound: float  # met iff measured >= bound
    met: bool
    unit: str = "x"  # "x": a speedup; "": a plain number
    note: str = ""  # e.g. the tokens/s behind a ratio


def _target(name: str, measured: float, key: str, unit: str = "x", note: str = "") -> Target:
    return Target(name, measured, TARGETS[key], measured >= TARGETS[key], unit, note)


def judge(rows: Sequence[GridRow], naive: NaiveComparison | None) -> list[Target]:
    by = {r.label: r for r in rows}
    out = []
    p28 = by.get("pipelined d1=2 d2=8")
    if p28 is not None:
        out.append(_target("pipelined (2, 8) >= 3.0x", p28.speedup, "pipelined"))
    pipes = [r for r in rows if r.strategy == "pipelined"]
    if pipes:
        best = max(pipes, key=lambda r: r.speedup)
        out.append(_target(f"best pipelined ({best.label}) >= 3.0x", best.speedup, "pipelined"))
    dv = by.get("draft-verify d1=4 k=4")
    if dv is not None:
        out.append(_target("draft-verify (draft 4, ahead 4) >= 1.8x", dv.speedup, "draft-verify"))
    timed = [r for r in rows if not math.isnan(r.efficiency)]  # compiled rows have none
    if timed:
        worst = min(timed, key=lambda r: r.efficiency)
        out.append(
            _target(
                f"efficiency >= 0.8 for every setting (lowest: {worst.label})",
                worst.efficiency,
                "efficiency",
                unit="",
            )
        )
    if naive is not None and pipes and best.label in naive.over_naive:
        out.append(
            _target(
                f"best pipelined ({best.label}) over proofs.decoders.naive_kv >= 1.0x (whole calls)",
                naive.over_naive[best.label],
                "naive",
                note=f"the autoregressive strategy alone: x{naive.baseline_over_naive:.3g}",
            )
        )
    return out
