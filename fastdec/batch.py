"""The batch driver: the Steps of every live sequence advance in one engine call (docs/design.md section 5).

Each sequence (fastdec.strategies.Sequence) is a generator of Steps over its own cache row.
One round: collect the pending Step of every sequence, advance all their lanes together
(Engine.advance chunks them into calls of at most the widest width), then resume every
sequence. A sequence that finishes (EOS, max_new_tokens) simply stops yielding, and its row
goes to the next waiting sequence, which joins the next round: a batch of more sequences
than rows keeps every row busy instead of waiting for its slowest sequence. Sequences may
also be queued between rounds (`Driver.add`: continuous batching, fastdec.continuous) and
dropped. The driver never looks inside a sequence, and a sequence never sees another's lanes,
RNG or rows (a new occupant's row holds its predecessor's garbage, which the cache INVARIANT
makes harmless): that is why each sequence's law (and, in fixed-width mode, its bits) is the
one it has decoded alone, whenever it joined. `generate()` is a batch of one.

Per-sequence Stats count the steps and calls the sequence took part in (a call shared by
several sequences counts once for each); the prefill's are kept apart (`prefill_steps`); its
clocks run from the round it started in.
"""

from __future__ import annotations

import time
from collections import deque

from fastdec.engine import Engine
from fastdec.strategies import Prefills, Sequence, Step


class Driver:
    """The sequences of one engine: at most `rows` live (one per cache row), the others
    waiting in order, advanced one round at a time.

    timed: time each engine call into Stats.call_seconds.
    hook (tests): hook(engine, live lanes, {row: committed length}) before every step; a
    row whose sequence ended counts its held prefill (Prefills) as committed."""

    def __init__(self, engine: Engine, prefills: Prefills, rows: int, timed: bool = False, hook=None):
        self.engine, self.prefills, self.rows = engine, prefills, rows
        self.timed, self.hook = timed, hook
        self.waiting: deque[Sequence] = deque()
        self.active: dict[int, tuple] = {}  # row -> (sequence, generator, pending Step)
        self.ended: list[Sequence] = []  # ended before their first step (returned by the next round)

    def add(self, s: Sequence) -> None:
        """Queue a sequence; it starts in the first free row (now, if one is free)."""
        self.waiting.append(s)
        for row in range(self.rows):
            if row not in self.active:
                self._start(row)
                if not self.waiting:
                    break

    def drop(self, s: Sequence) -> None:
        """Stop decoding s, waiting or live (its row goes to the next waiting sequence)."""
        if s in self.waiting:
            self.waiting.remove(s)
            return
        row = next((r for r, (q, _, _) in self.active.items() if q is s), None)
        if row is not None:
            self.active.pop(row)[1].close()  # GeneratorExit: an unfinished prefill stops being awaited
            self._start(row)

    def _start(self, row: int) -> None:
        """The next waiting sequence that has a step to take goes into `row`."""
        while self.waiting:
            s = self.waiting.popleft()
            s.row = row
            self.engine.span[row] = s.span
            s.t0, s.c0 = time.perf_counter(), time.process_time()
            gen = s.decode()
            try:
                self.active[row] = (s, gen, next(gen))
                return
            except StopIteration:
                self.ended.append(s)

    def step(self) -> list[Sequence]:
        """One round of every live sequence; -> the sequences that ended since the last round."""
        engine, active = self.engine, self.active
        lanes = [ln for _, _, step in active.values() for ln in step.lanes]
        if self.hook is not None:
            keep = [ln for _, _, step in active.values() for ln in step.keep]
            lengths = {r: len(key[0]) for r, (key, _) in self.prefills.held.items()}
            lengths.update({r: s.length for r, (s, _, _) in active.items()})
            self.hook(engine, lanes + keep, lengths)
        chained = self._chained()
        if chained is not None:  # one sequence's greedy chain: its tokens' recurrences this round
            chained.ahead, calls = engine.chain(lanes[0])
            n = (len(chained.ahead) + 1) * engine.depth
        else:
            to = self._fused_to([step for _, _, step in active.values()], lanes)
            n = to - lanes[0].depth if to is not None else 1  # recurrences this round
            calls = engine.advance(lanes, self.timed, to)
        for s, _, step in active.values():
            st = s.stats
            if s.prefilling:
                st.prefill_steps += n
            else:
                st.steps += n
                st.lane_steps += n * len(step.lanes)
                st.peak_lanes = max(st.peak_lanes, len(step.lanes))
        for rec in calls:
            for row in {ln.row for ln in rec.lanes}:
                s = active[row][0]
                if s.prefilling:
                    continue
                st = s.stats
                per = st.calls.setdefault(rec.kind, {})
                per[rec.width] = per.get(rec.width, 0) + rec.count
                if rec.kind == "recur":
                    st.steps_per_width[rec.width] = st.steps_per_width.get(rec.width, 0) + rec.count
                if self.timed:
                    acc = st.call_seconds.setdefault(rec.kind, {}).setdefault(rec.width, [0.0, 0.0])
                    acc[0] += rec.wall
                    acc[1] += rec.cpu
        ended, self.ended = self.ended, []
        for row in list(active):
            s, gen, step = active[row]
            if not step.done:  # lanes still on their way to the step's depth
                continue
            try:
                active[row] = (s, gen, gen.send(None))
            except StopIteration:
                del active[row]
                ended.append(s)
                self._start(row)
        return ended

    def _chained(self) -> Step | None:
        """The step to run as a greedy chain this round (Engine.chain): the only live sequence's, when
        it asks for one; never under a step hook or timing (they see every call)."""
        if self.hook is not None or self.timed or len(self.active) != 1:
            return None
        ((_, _, step),) = self.active.values()
        return step if step.chain and step.lanes[0].depth == 0 else None

    def _fused_to(self, steps: list[Step], lanes: list) -> int | None:
        """The depth every live step's lanes advance to in one fused call this round, or None (one
        recurrence): fused when every step with lanes asks for the same depth and the engine can
        fuse them (Engine.fusable); never under a step hook (it sees every recurrence) or timing."""
        if self.hook is not None or self.timed or not lanes:
            return None
        tos = {step.to for step in steps if step.lanes}
        to = tos.pop() if len(tos) == 1 else None
        return to if to is not None and self.engine.fusable(lanes, to) else None


def run_batch(
    engine: Engine,
    seqs: list[Sequence],
    prefills: Prefills,
    rows: int | None = None,
    timed: bool = False,
    hook=None,
) -> None:
    """Decode every sequence to its end, at most `rows` (default: all) at once, in order."""
    driver = Driver(engine, prefills, min(len(seqs), rows or len(seqs)), timed, hook)
    for s in seqs:
        driver.add(s)
    while driver.active:
        driver.step()
