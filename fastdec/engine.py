"""The static-shape engine: one call advances L lanes by one recurrence each (DESIGN.md section 5).

A lane is one token position being deepened: (position, token, depth, state). Lanes in one
step may sit at any depths and positions. A step runs up to three phases, each one batched
call at a fixed width W from WIDTHS (rows padded; padded rows write to the cache's trash
row and are never read):

    prelude   lanes at depth 0: e = P(token), h(0) = init_state     (once per lane)
    recur     every lane: h(r) = B(inject(h(r-1), e))               (reads core level r-1)
    readout   lanes whose new depth r is a readout depth: logits     (reads coda level of r)

The block maths is refdec's (LoopedLM.embed / recur / readout / initial_state, run op for op
by fastdec.fastpath without module dispatch); this module only supplies the cached `attend`
callable. Every row of every call is computed by the same ops at the same width, whatever
else is in the batch and in whichever row it sits: that is batch invariance, and with
`fixed_width` (every call at one width, every read over the whole capacity) every strategy
reproduces the autoregressive baseline bit for bit (the matmul kernels of this CPU give equal
rows for equal widths, W a power of two; not across widths, hence the fixed-width mode). In
the normal mode a call reads keys up to its last lane's position only, not the capacity.

Attention reads the main line through strided views (no copy) in eager mode; under CUDA
graphs, where a view's offset cannot change between replays, it gathers by index tensors.

Shapes: W rows (lanes + padding), H heads, KV key/value heads, S attended positions, D head dim.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import partial

import torch

from fastdec.cache import KVCache, Timeline
from fastdec.fastpath import FastModel
from refdec.layers import compute_dtype, rope_tables

WIDTHS = (1, 2, 4, 8, 16, 32, 64)
PHASES = ("prelude", "recur", "readout")


@dataclass(eq=False)
class Lane:
    """One position being deepened. `depth` recurrences done; `h` (1, d) the state at it."""

    pos: int
    token: int
    side: int = -1  # side slot (off the main line), -1 = main line
    depth: int = 0
    h: torch.Tensor | None = None
    e: torch.Tensor | None = None  # (1, d) prelude output, injected at every recurrence
    logits: dict[int, torch.Tensor] = field(default_factory=dict)  # readout depth -> (V,)
    # strategy bookkeeping (fastdec.strategies)
    parent: Lane | None = None
    child: Lane | None = None  # first-proposal child (main line)
    side_child: Lane | None = None  # second-proposal child (side slot)
    x1: int | None = None
    q1: torch.Tensor | None = None
    x2: int | None = None
    q2: torch.Tensor | None = None


@dataclass
class Plan:
    """Host-side layout of one eager call: rows are main lanes sorted by level (split into runs
    of levels level0 + i*delta, each one strided view), then side lanes, then padding."""

    runs: list[tuple[int, int, int, int]]  # (first row, rows, level0, delta)
    side_rows: list[tuple[int, int, int]]  # (slot, level, pos), rows side_start ...
    side_start: int
    n_real: int
    read_len: int  # keys read per row: the capacity (fixed width), else the call's last position + 1
    masked: bool  # some real row sits before position read_len - 1 (else the mask hides nothing)


def width_for(n: int, fixed: int | None = None) -> int:
    if fixed is not None:
        return fixed
    for w in WIDTHS:
        if w >= n:
            return w
    raise ValueError(f"{n} lanes exceed the widest call {WIDTHS[-1]}")  # callers chunk first


def split_runs(levels: list[int]) -> list[tuple[int, int, int, int]]:
    """Sorted levels -> maximal runs in arithmetic progression: (start, n, level0, delta)."""
    runs, i, m = [], 0, len(levels)
    while i < m:
        j = i
        delta = levels[i + 1] - levels[i] if i + 1 < m else 0
        while j + 1 < m and levels[j + 1] - levels[j] == delta:
            j += 1
        runs.append((i, j - i + 1, levels[i], delta))
        i = j + 1
    return runs


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """q (n, H, 1, D), k/v (n, KV, S, D), hidden (n, S) True = masked -> (n, H, 1, D).

    One 3-D bmm per key/value head over the lanes: a 4-D matmul over a strided view takes a
    different kernel on CPU than over a contiguous tensor (other bits), a 3-D bmm does not.
    masked_fill, not an additive mask: garbage keys may score inf, and inf - inf is NaN.
    hidden None: no key is masked (the same bits as an all-False mask, one op fewer).
    """
    n, h, _, d = q.shape
    kv = k.shape[1]
    qg = q.reshape(n, kv, h // kv, d)  # (n, KV, G, D): head j*G+g uses key head j
    if kv == 1:  # MQA: no stack (a copy) around the one bmm; the same values
        scores = torch.bmm(qg[:, 0], k[:, 0].transpose(1, 2))[:, None]
    else:
        scores = torch.stack([torch.bmm(qg[:, j], k[:, j].transpose(1, 2)) for j in range(kv)], 1)
    scores = scores / math.sqrt(d)  # (n, KV, G, S)
    if hidden is not None:
        scores = scores.masked_fill(hidden[:, None, None, :], float("-inf"))
    p = torch.softmax(scores, dim=-1)
    if kv == 1:
        out = torch.bmm(p[:, 0], v[:, 0])  # (n, G, D) = (n, H, D)
    else:
        out = torch.stack([torch.bmm(p[:, j], v[:, j]) for j in range(kv)], 1)  # (n, KV, G, D)
    return out.reshape(n, h, 1, d)


@dataclass
class _Call:
    inp: dict[str, torch.Tensor]
    hidden: torch.Tensor  # (W, S) bool
    side_slot: torch.Tensor | None  # None: no side rows, skip side writes
    plan: Plan | None  # None: gather reads (graph-safe)


class Engine:
    """Owns the cache of one capacity and runs phases on lanes.

    readout_depths: every depth whose readout some strategy needs; each lane computes all of
    them on its way to `depth`, so the coda timelines of every readout depth stay complete.
    """

    def __init__(self, model, depth: int, readout_depths, capacity: int, n_side: int = 0,
                 fixed_width: int | None = None, reads: str = "view", cuda_graphs: bool = False):
        self.model, self.cfg = model, model.cfg
        self.net = FastModel(model)  # refdec's maths op for op, minus module dispatch (fastdec.fastpath)
        p = next(model.parameters())
        self.dtype, self.device = p.dtype, p.device
        self.depth = depth
        self.readout_depths = sorted(set(readout_depths) | {depth})
        self.readout_slot = {r: i for i, r in enumerate(self.readout_depths)}
        self.capacity, self.fixed_width = capacity, fixed_width
        self.reads = "gather" if cuda_graphs else reads
        self.cache = KVCache(self.cfg, depth, len(self.readout_depths), capacity, n_side, self.dtype,
                             self.device)
        cd = compute_dtype(self.dtype)
        positions = torch.arange(capacity + 1, device=self.device)
        cos, sin = rope_tables(self.cfg, positions.cpu())  # (S + 1, D/2) float64
        self.cos, self.sin = cos.to(self.device, cd), sin.to(self.device, cd)
        self.key_pos = torch.arange(capacity, device=self.device)  # (S,)
        self.init_table = None  # Raven: h(0) depends on the position only (DESIGN.md section 2)
        if self.cfg.family == "raven":
            zeros = torch.zeros(1, capacity + 1, self.cfg.d_model, dtype=self.dtype, device=self.device)
            # (S + 1, d); .to(): refdec's seeded state is built on the host whatever e's device
            self.init_table = model.initial_state(zeros, positions)[0].to(self.device)
        self._attenders = {
            tl_name: [partial(self._attend, tl, i) for i in range(tl.layers)]
            for tl_name, tl in zip(PHASES, self.cache.timelines())
        }
        self._call: _Call | None = None
        self._level_of = {"prelude": lambda ln: 0, "recur": lambda ln: ln.depth,
                          "readout": lambda ln: self.readout_slot[ln.depth]}
        self.step_hook = None  # tests: called as hook(engine, live lanes) before every step
        self.time_calls = False  # benchmarks: time every call into call_seconds (syncs CUDA per call)
        self.prefilled: tuple | None = None  # (prompt, its last position's target logits), see Run.prefill
        self.graphs = None
        if cuda_graphs:
            from fastdec.graphs import CudaGraphs

            self.graphs = CudaGraphs(self)
        self.reset_counters()

    # -- counters ---------------------------------------------------------------------------
    def reset_counters(self) -> None:
        self.steps = 0
        self.lane_steps = 0
        self.peak_lanes = 0
        self.steps_per_width: Counter = Counter()  # recur calls per width
        self.calls: Counter = Counter()  # (phase, width) -> calls
        self.call_seconds: defaultdict = defaultdict(lambda: [0.0, 0.0])  # (phase, width) -> [wall, cpu]

    def width(self, n: int) -> int:
        return width_for(n, self.fixed_width)

    # -- the step -----------------------------------------------------------------------------
    def advance(self, lanes, keep=()) -> None:
        """Every lane in `lanes` advances one recurrence. `keep`: other live lanes (hook only)."""
        lanes = list(lanes)
        if self.step_hook is not None:
            self.step_hook(self, lanes + list(keep))
        order = sorted(lanes, key=lambda ln: (ln.pos, ln.side))  # same-level readers after writers
        cap = self.fixed_width or WIDTHS[-1]
        for i in range(0, len(order), cap):
            self._advance_chunk(order[i:i + cap])
        self.steps += 1
        self.lane_steps += len(lanes)
        self.peak_lanes = max(self.peak_lanes, len(lanes))

    def _advance_chunk(self, chunk: list[Lane]) -> None:
        new = [ln for ln in chunk if ln.depth == 0]
        if new:
            order, (e, h0) = self.run_phase("prelude", new)
            for i, ln in enumerate(order):
                ln.e, ln.h = e[i], h0[i]
        order, (h,) = self.run_phase("recur", chunk)
        self.steps_per_width[h.shape[0]] += 1
        for i, ln in enumerate(order):
            ln.h = h[i]
            ln.depth += 1
        outs = [ln for ln in chunk if ln.depth in self.readout_slot]
        if outs:
            order, (logits,) = self.run_phase("readout", outs)
            for i, ln in enumerate(order):
                ln.logits[ln.depth] = logits[i]

    # -- phases -------------------------------------------------------------------------------
    def level(self, kind: str, lane: Lane) -> int:
        if kind == "prelude":
            return 0
        if kind == "recur":
            return lane.depth  # computing recurrence depth + 1, stored at level depth
        return self.readout_slot[lane.depth]

    def timeline(self, kind: str) -> Timeline:
        return self.cache.timelines()[PHASES.index(kind)]

    @torch.inference_mode()
    def run_phase(self, kind: str, lanes: list[Lane], width: int | None = None):
        """-> (lanes in row order, outputs with W rows each).

        Inference mode, not just no_grad: the parameters require grad, and under no_grad every
        op still passes the autograd dispatch keys; skipping them saves ~1/4 of a small model's
        step (the same kernels, the same bits). Outputs are inference tensors: the engine and
        the strategies never update them in place, and Run.commit hands out clones.
        """
        if self.time_calls:
            t0, c0 = time.perf_counter(), time.process_time()
        inp, order, plan = self.phase_inputs(kind, lanes, width)
        w = inp["pos"].shape[0]
        self.calls[(kind, w)] += 1
        if self.graphs is not None:
            outs = self.graphs.run(kind, inp)
        else:
            outs = self.phase_fn(kind, inp, None if self.reads == "gather" else plan)
        if self.time_calls:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            acc = self.call_seconds[(kind, w)]
            acc[0] += time.perf_counter() - t0
            acc[1] += time.process_time() - c0
        return order, outs

    def phase_inputs(self, kind: str, lanes: list[Lane], width: int | None = None):
        """Static-shape inputs (index tensors, states) of one call, and its eager Plan.

        The integer inputs travel as one (4 or 5, W) host tensor, one copy to the device.
        """
        n = len(lanes)
        w = width if width is not None else self.width(n)
        if n > w:
            raise ValueError(f"{n} lanes in a call of width {w}")
        tl = self.timeline(kind)
        level = self._level_of[kind]
        main = sorted((ln for ln in lanes if ln.side < 0), key=lambda ln: (level(ln), ln.pos))
        side = [ln for ln in lanes if ln.side >= 0]
        order = main + side if side else main
        levels = [level(ln) for ln in order]
        pad = w - n
        trash_pos, trash_slot = tl.trash_pos, tl.trash_slot
        pos = [ln.pos for ln in order]
        rows = [pos + [0] * pad, levels + [0] * pad,
                [ln.pos if ln.side < 0 else trash_pos for ln in order] + [trash_pos] * pad,
                [ln.side if ln.side >= 0 else trash_slot for ln in order] + [trash_slot] * pad]
        if kind == "prelude":
            rows.append([ln.token for ln in order] + [0] * pad)
        ints = torch.tensor(rows, dtype=torch.long, device=self.device).unbind(0)  # (4 or 5, W)
        inp = dict(zip(("pos", "level", "write_pos", "side_slot", "ids"), ints))
        if self.reads == "gather":
            inp["is_side"] = inp["side_slot"] != trash_slot
        if kind != "prelude":
            inp["h"] = self._stack([ln.h for ln in order], pad)
            if kind == "recur":
                inp["e"] = self._stack([ln.e for ln in order], pad)
        if self.fixed_width is not None or self.reads == "gather":
            read_len = self.capacity  # one key length for every call: bitwise batch invariance
        else:
            read_len = max(pos) + 1 if pos else 1
        nm = len(main)
        plan = Plan(split_runs(levels[:nm]), [(ln.side, lv, ln.pos) for ln, lv in zip(side, levels[nm:])],
                    nm, n, read_len, any(p < read_len - 1 for p in pos))
        return inp, order, plan

    def _stack(self, rows: list[torch.Tensor], pad: int) -> torch.Tensor:
        x = torch.stack(rows)  # (n, 1, d)
        if pad:
            x = torch.cat([x, x.new_zeros(pad, *x.shape[1:])])
        return x

    def phase_fn(self, kind: str, inp: dict[str, torch.Tensor], plan: Plan | None = None):
        """The computation of one call: tensors in, tensors out (W rows). With plan None it is
        free of host syncs and data-dependent shapes, so fastdec.graphs can capture it."""
        model = self.net
        pos = inp["pos"]
        cos = self.cos.index_select(0, pos)[:, None, None, :]  # (W, 1, 1, D/2): T=1 row per lane
        sin = self.sin.index_select(0, pos)[:, None, None, :]
        if plan is None:
            hidden = self.key_pos[None, :] > pos[:, None]  # (W, S)
        elif plan.masked:
            hidden = self.key_pos[None, :plan.read_len] > pos[:, None]  # (W, read_len)
        else:
            hidden = None
        side_slot = inp["side_slot"] if plan is None or plan.side_rows else None
        self._call = _Call(inp, hidden, side_slot, plan)
        attend_for = self._attenders[kind].__getitem__
        try:
            if kind == "prelude":
                e = model.embed(inp["ids"][:, None], cos, sin, attend_for)  # (W, 1, d)
                if self.init_table is None:
                    h0 = model.initial_state(e, pos)  # Ouro: h(0) = e
                else:
                    h0 = self.init_table.index_select(0, pos)[:, None, :]
                return e, h0
            if kind == "recur":
                return (model.recur(inp["h"], inp["e"], cos, sin, attend_for),)
            return (model.readout(inp["h"], cos, sin, attend_for)[:, 0],)  # (W, V)
        finally:
            self._call = None

    def _attend(self, tl: Timeline, layer: int, q, k, v):
        """The attend callable of refdec.layers.Attention: write this call's rows, then read.

        q (W, H, 1, D), k/v (W, KV, 1, D) -> (W, H, 1, D). All rows write before any reads,
        so lanes at one level in one call see each other causally (prefill, verify batches).
        """
        c = self._call
        inp = c.inp
        tl.write(layer, k[:, :, 0], v[:, :, 0], inp["level"], inp["write_pos"], c.side_slot)
        if c.plan is None:
            kk, vv = tl.gather(layer, inp["level"], inp["pos"], inp["side_slot"], inp["is_side"],
                               self.key_pos)
            return attention(q, kk, vv, c.hidden)
        plan, hidden = c.plan, c.hidden
        s = plan.read_len
        if len(plan.runs) == 1 and not plan.side_rows and plan.n_real == q.shape[0]:  # the common case
            kk, vv = tl.run_view(layer, plan.runs[0][2], plan.runs[0][3], plan.n_real, s)
            return attention(q, kk, vv, hidden)
        pieces = []
        for start, n, level0, delta in plan.runs:
            kk, vv = tl.run_view(layer, level0, delta, n, s)
            rows = slice(start, start + n)
            pieces.append(attention(q[rows], kk, vv, None if hidden is None else hidden[rows]))
        if plan.side_rows:
            a, b = plan.side_start, plan.side_start + len(plan.side_rows)
            kk, vv = tl.side_view(layer, plan.side_rows, s)
            pieces.append(attention(q[a:b], kk, vv, None if hidden is None else hidden[a:b]))
        if plan.n_real < q.shape[0]:  # padded rows: their output is never used
            pieces.append(q.new_zeros(q.shape[0] - plan.n_real, *q.shape[1:]))
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces)

    # -- invariant checking -------------------------------------------------------------------
    def poison(self, gen: torch.Generator, scale: float, lanes) -> None:
        """Fill every cache slot that no live lane or committed position owns with garbage
        (cache INVARIANT): results must not change by a single bit."""
        c = self.cache
        for kind, tl in zip(PHASES, c.timelines()):
            if not tl.layers:
                continue
            keep_main = torch.zeros(tl.levels, tl.capacity + 1, dtype=torch.bool)
            keep_main[:, :c.length] = True
            keep_side = torch.zeros(tl.n_side + 1, tl.levels, dtype=torch.bool)
            for ln in lanes:
                if kind == "prelude":
                    done = [0] if ln.depth >= 1 else []
                elif kind == "recur":
                    done = list(range(ln.depth))
                else:
                    done = [i for r, i in self.readout_slot.items() if r <= ln.depth]
                if ln.side < 0:
                    keep_main[done, ln.pos] = True
                else:
                    keep_side[ln.side, done] = True
            tl.poison(gen, scale, keep_main, keep_side)
