"""The batch driver: the Steps of every live sequence advance in one engine call (DESIGN.md 5).

Each sequence (fastdec.strategies.Sequence) is a generator of Steps over its own cache row.
One round: collect the pending Step of every sequence, advance all their lanes together
(Engine.advance chunks them into calls of at most the widest width), then resume every
sequence. A sequence that finishes (EOS, max_new_tokens) simply stops yielding: its row is
unowned from then on and the others go on. The driver never looks inside a sequence, and a
sequence never sees another's lanes, RNG or rows: that is why each sequence's law (and, in
fixed-width mode, its bits) is the one it has decoded alone. `generate()` is a batch of one.

Per-sequence Stats count the steps and calls the sequence took part in (a call shared by
several sequences counts once for each); the prefill's are kept apart (`prefill_steps`).
"""

from __future__ import annotations

import time

from fastdec.engine import Engine
from fastdec.strategies import Sequence


def run_batch(engine: Engine, seqs: list[Sequence], timed: bool = False, hook=None) -> None:
    """Decode every sequence to its end. timed: time each engine call into Stats.call_seconds.
    hook (tests): hook(engine, live lanes, {row: committed length}) before every step."""
    t0, c0 = time.perf_counter(), time.process_time()
    by_row = {s.row: s for s in seqs}
    active = {}  # sequence -> (generator, pending Step)
    for s in seqs:
        s.t0, s.c0 = t0, c0
        gen = s.decode()
        try:
            active[s] = (gen, next(gen))
        except StopIteration:
            pass
    while active:
        lanes = [ln for _, step in active.values() for ln in step.lanes]
        if hook is not None:
            keep = [ln for _, step in active.values() for ln in step.keep]
            hook(engine, lanes + keep, {s.row: s.length for s in active})
        calls = engine.advance(lanes, timed)
        for s, (_, step) in active.items():
            st = s.stats
            if s.prefilling:
                st.prefill_steps += 1
            else:
                st.steps += 1
                st.lane_steps += len(step.lanes)
                st.peak_lanes = max(st.peak_lanes, len(step.lanes))
        for rec in calls:
            for row in {ln.row for ln in rec.lanes}:
                s = by_row[row]
                if s.prefilling:
                    continue
                st = s.stats
                per = st.calls.setdefault(rec.kind, {})
                per[rec.width] = per.get(rec.width, 0) + 1
                if rec.kind == "recur":
                    st.steps_per_width[rec.width] = st.steps_per_width.get(rec.width, 0) + 1
                if timed:
                    acc = st.call_seconds.setdefault(rec.kind, {}).setdefault(rec.width, [0.0, 0.0])
                    acc[0] += rec.wall
                    acc[1] += rec.cpu
        for s in list(active):
            gen = active[s][0]
            try:
                active[s] = (gen, gen.send(None))
            except StopIteration:
                del active[s]
