"""The static-shape engine: one call advances L lanes by one recurrence each (docs/design.md section 5).

A lane is one token position being deepened: (position, token, depth, state). Lanes in one
step may sit at any depths and positions. A step runs up to three phases, each one batched
call at a fixed width W from WIDTHS (rows padded; padded rows write to the cache's trash
row and are never read):

    prelude   lanes at depth 0: e = P(token), h(0) = init_state     (once per lane)
    recur     every lane: h(r) = B(inject(h(r-1), e))               (reads core level r-1)
    readout   lanes whose new depth r is a readout depth: logits     (reads coda level of r)

The block maths is refdec's: the engine builds one refdec.model.Net (embed / initial_state /
recur / readout over refdec.layers' functions, on the model's own parameter tensors) and
calls it every step, which skips nn.Module dispatch; this module only supplies the cached
`attend` callable. Every row of every call is computed by the same ops at the same width, whatever
else is in the batch and in whichever row it sits: that is batch invariance, and with
`fixed_width` (every call at one width, every read over the whole capacity) every strategy
reproduces the autoregressive baseline bit for bit (the matmul kernels of this CPU give equal
rows for equal widths, W a power of two; not across widths, hence the fixed-width mode). In
the normal mode a call reads keys up to its last lane's position only, not the capacity.

Sequences. A lane belongs to one sequence (its cache `row`); the lanes of many sequences
advance in one call and each reads only its own row, so a row's results do not depend on the
other sequences either. In fixed-width mode every read of a sequence spans its own `span`
(the capacity it would have decoding alone), so a sequence decoded inside any batch equals
itself decoded alone, bit for bit (needle-in-batch).

Attention reads the main line through strided views (no copy) in eager mode; under CUDA
graphs, where a view's offset cannot change between replays, it gathers by index tensors.

LoopCoder (docs/design.md sections 2 and 5). Its core level r-1 holds pass r's keys, as for the
other families; what differs is which keys a query reads, and that is data (`LoopReads`): a lane
at level 0 (pass 1) reads level 0 causally, a lane at level l >= 1 reads level 0 causally *and*
level l within the window, and mixes the two by its layer's gate. Those reads are index gathers
(one per block of rows with one key length, like a fragmented call's), masked to the lane's
positions, so the cache INVARIANT and fixed-width bit-exactness hold as for any other read.

Shapes: W rows (lanes + padding), H heads, KV key/value heads, S attended positions, D head dim.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import cache, partial

import torch

from fastdec.cache import KVCache, Timeline
from refdec.layers import GateWeights, at_least_float32, loop_gate, mix, rope_tables
from refdec.model import PassAttendFor
from refdec.sampling import TEMPERATURE_FIRST, Context, SamplingParams, filter_probs, transform

WIDTHS = (1, 2, 4, 8, 16, 32, 64)  # the widths of calls of one sequence (fixed_width: one of these)
# a batch engine also runs wider calls, up to 64 lanes per cache row: on a CPU a call's fixed
# overhead dominates, and the sequences of a batch are what fill the wider calls. Past 64 the
# widths step by 1.5x and 2x alternately, not 2x: a wide call of a big model costs about its
# width, so padding a batch to the next power of two could nearly double what it pays.
BATCH_WIDTHS = (96, 128, 192, 256, 384, 512, 768, 1024)
PHASES = ("prelude", "recur", "readout")
# an eager call whose rows need more than GATHER_PIECES views (runs of cells, side groups)
# reads by one index gather per key length instead, when copying its keys and values costs
# less than the views' fixed overhead: on a CPU each view's attention is about ten small ops,
# which PIECE_ELEMS prices as elements copied, and a batch of sequences at scattered depths
# makes dozens of runs. So small models (short keys) gather; a model with long keys keeps its views.
GATHER_PIECES = 2
PIECE_ELEMS = 32768
# a compiled engine (fastdec/compiled.py) compiles one graph per (phase, width): it pads to these
# fewer widths, each 4x the last (on a CPU a small model's padded rows cost less than the seconds
# each further graph takes to compile; certify builds many engines)
COMPILED_WIDTHS = (1, 4, 16, 64, 256, 1024)
# a fused compiled call (Engine.advance with `to`) runs at most this many recurrences: a graph's
# compile time grows with its length, and a deep model's step is long enough to pay a few calls
FUSE_MAX = 8
# a fused call's fixed cost in lanes (fused_chunks): the tiny Nanbeige's prefill graph took 134,
# 378 and 1,461 us at widths 4, 16 and 64 on one core (~50 us + 22 us a lane), and the host's
# inputs and outputs of a call ~30 us more: ~80 us a call, about 4 lanes
CALL_LANES = 4
# and takes at most this many lanes: every row of a graph-safe call gathers the whole capacity, so a
# batch's prefill padded to a width of 1,024 cost 2.5x its 384 rows (the tiny Nanbeige, 16 prompts)
FUSE_WIDTH = 64
# an unfused step of a compiled engine (a batch's pipelined round: new lanes beside deeper ones) is
# split the same way, a chunk paying up to three calls (prelude, recur, readout): 26 lanes run as
# 16 + 16, not as one call padded to 64. tiny-loopcoder's compiled pipelined decoding at batch 16
# gained 1.07x (median of 30 rounds in turns, quartiles 1.06-1.09; 4 and 24 lanes a chunk no worse),
# tiny Nanbeige's (half the width) nothing
STEP_LANES = 3 * CALL_LANES
# a greedy chain (Engine.chain) decodes one sequence's next tokens in one compiled graph, each token
# the argmax of the last, as many tokens as fit in this many recurrences (2 or more, else none): the
# host's Python per token (a third of a tiny model's token once the graph was compiled) is paid once
# per chain, and the host still decides every token (a proposal it does not draw is thrown away)
CHAIN_RECURRENCES = 16
LAW_BATCH_ELEMS = 1 << 20  # a readout call's laws computed together up to this many (8 MiB float64)


class Readout:
    """The logits of one readout call, (n, V) for its n lanes, and their sampling laws.

    A lane's law at some temperature is computed for every row of its call at once, the first
    time a lane asks (`law`): on a CPU each small op costs a few microseconds, and a batch's
    readout call holds hundreds of lanes. Row i of that transform is bitwise the transform of
    row i alone (a row-wise softmax of the same values: tests/refdec/test_sampling.py), so a lane's
    law never depends on its neighbours; top-k / top-p apply to the asking row only. A call whose
    laws would exceed LAW_BATCH_ELEMS (a real vocabulary in a wide call: 1,024 x 65,536 float64 is
    512 MiB, held while any of its rows is) transforms each row alone, as before; so does a
    filters-first law with top-k or top-p (its filters judge the temperature-1 law, which the
    tempered rows do not give back bit for bit: refdec.sampling.filter_probs)."""

    __slots__ = ("logits", "_laws", "_argmax")

    def __init__(self, logits: torch.Tensor):
        self.logits = logits  # (n, V)
        self._laws: dict[float, torch.Tensor] = {}  # temperature -> (n, V) float64 on the host
        self._argmax: list[int] | None = None

    def argmax(self, i: int) -> int:
        """refdec.sampling.greedy_token(logits[i]): every row's first maximal index, found for
        all rows at the first ask (one call instead of one per lane: a greedy chain's rows are
        committed one after another)."""
        if self._argmax is None:
            self._argmax = torch.argmax(self.logits, -1).tolist()
        return self._argmax[i]

    def law(self, i: int, params: SamplingParams, context: Context | None = None) -> torch.Tensor:
        """(V,) float64: refdec.sampling.transform(logits[i], params, context), bit for bit."""
        if not params.plain:  # the engines' other parameters: this row's own law, given its prefix
            return transform(self.logits[i].detach().cpu(), params, context)
        filtered = params.top_k is not None or params.top_p is not None
        if self.logits.numel() > LAW_BATCH_ELEMS or (filtered and params.order != TEMPERATURE_FIRST):
            return transform(self.logits[i].detach().cpu(), params)
        t = params.temperature
        laws = self._laws.get(t)
        if laws is None:
            laws = self._laws[t] = transform(self.logits.detach().cpu(), SamplingParams(temperature=t))
        return filter_probs(laws[i], params)


class LaneLogits:
    """A lane's readouts: depth -> (V,) logits, each a row of its readout call (no view is made
    until one is asked for); `law(depth, params)` its sampling law (Readout.law)."""

    __slots__ = ("at",)

    def __init__(self):
        self.at: dict[int, tuple[Readout, int]] = {}

    def __getitem__(self, depth: int) -> torch.Tensor:
        out, i = self.at[depth]
        return out.logits[i]

    def __contains__(self, depth: int) -> bool:
        return depth in self.at

    def argmax(self, depth: int) -> int:
        """greedy_token(self[depth]) (Readout.argmax)."""
        out, i = self.at[depth]
        return out.argmax(i)

    def law(self, depth: int, params: SamplingParams, context: Context | None = None) -> torch.Tensor:
        out, i = self.at[depth]
        return out.law(i, params, context)


@dataclass(eq=False)
class Lane:
    """One position of one sequence being deepened (engine state only: what a strategy knows
    about a lane is its own, fastdec.strategies.Node). `depth` recurrences done; `h` the state
    at it."""

    pos: int
    token: int
    row: int = 0  # the sequence's cache row
    side: int = -1  # side slot (off the main line), -1 = main line
    depth: int = 0
    # (output, i): row i of the call that computed it, (1, d) each: the next call selects its
    # rows from the few outputs its lanes come from, instead of one view per lane and a stack
    h: tuple[torch.Tensor, int] | None = None
    e: tuple[torch.Tensor, int] | None = None  # the prelude output, injected at every recurrence
    logits: LaneLogits = field(default_factory=LaneLogits)  # readout depth -> (V,)


@dataclass
class Plan:
    """Host-side layout of one eager call: rows are main lanes sorted by (span, cell) (split
    into runs of cells cell0 + i*delta, each one strided view), then side lanes grouped by
    span, then padding."""

    runs: list[tuple[int, int, int, int, int]]  # (first row, rows, cell0, delta, keys read)
    side_groups: list[tuple[int, list, int]]  # (first row, [(row, slot, level, pos)], keys read)
    n_real: int
    read_len: int  # the most keys any row reads (fixed width: a span, else the call's last position + 1)
    masked: bool  # some real row sits before position read_len - 1 (else the mask hides nothing)
    gathers: list[tuple[int, int, int]] | None = None  # fragmented call: (first row, rows, keys read)
    first_side: int = 0  # rows from here on are side lanes (gathers: main rows need no overlay)


@dataclass
class CallRecord:
    """What one engine call was: its phase, padded width, lanes (row order) and, when the
    caller asked for timing, its wall and CPU seconds. count: how many such calls the record
    stands for (a fused graph's recurrences, a chain's tokens: one record each, not one per call,
    the driver's accounting being per record)."""

    kind: str
    width: int
    lanes: list[Lane]
    wall: float = 0.0
    cpu: float = 0.0
    count: int = 1


@cache  # a pure function of few arguments, asked for every fused step
def fused_chunks(n: int, widths: tuple[int, ...], call_lanes: int = CALL_LANES) -> tuple[int, ...]:
    """How many lanes each fused call of `n` takes (in order), each call padded to the next of
    `widths`: the split that costs least when a call costs its width plus `call_lanes`. A compiled
    engine's widths are 4x apart, so one call can pay mostly padding: a 24-token prefill padded
    to 64 lanes costs twice the calls of 16 + 4 + 4 (every row of such a call copies its keys)."""
    best = [(0, 0)] * (n + 1)  # best[m]: (cost of m lanes, lanes of its first call)
    for m in range(1, n + 1):
        best[m] = min((w + call_lanes + best[max(0, m - w)][0], min(w, m)) for w in widths)
    sizes = []
    while n:
        sizes.append(best[n][1])
        n -= best[n][1]
    return tuple(sorted(sizes, reverse=True))


def width_for(n: int, fixed: int | None = None, widths: tuple[int, ...] = WIDTHS) -> int:
    if fixed is not None:
        return fixed
    for w in widths:
        if w >= n:
            return w
    raise ValueError(f"{n} lanes exceed the widest call {widths[-1]}")  # callers chunk first


def split_runs(levels: list[int]) -> list[tuple[int, int, int, int]]:
    """Sorted levels (or cells) -> maximal runs in arithmetic progression: (start, n, level0, delta)."""
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


@dataclass(frozen=True)
class LoopReads:
    """What a LoopCoder core query reads (docs/design.md section 5): level 0 (pass 1's keys) at
    positions <= its own, and, past pass 1, its own level at positions pos-window+1..pos; the
    layer's gate mixes the two. Level-0 rows take the first read alone (plain causal)."""

    window: int
    gates: tuple[GateWeights, ...]  # one per core layer


@dataclass
class _Call:
    inp: dict[str, torch.Tensor]
    hidden: torch.Tensor  # (W, S) bool
    side_slot: torch.Tensor | None  # None: no side rows, skip side writes
    plan: Plan | None  # None: gather reads (graph-safe)
    at: tuple  # the call's write places (Timeline.write_index), shared by its layers
    key_pos: torch.Tensor  # (S,) arange of the keys a graph-safe call reads


class Engine:
    """Owns the cache of one capacity and runs phases on lanes.

    readout_depths: every depth whose readout some strategy needs; each lane computes all of
    them on its way to `depth`, so the coda timelines of every readout depth stay complete.
    """

    def __init__(
        self,
        model,
        depth: int,
        readout_depths,
        capacity: int,
        n_side: int = 0,
        fixed_width: int | None = None,
        reads: str = "view",
        cuda_graphs: bool = False,
        rows: int = 1,
        compiled: bool = False,
    ):
        self.model, self.cfg = model, model.cfg
        self.net = model.net()  # refdec's maths on the shared parameters, built once
        p = next(model.parameters())
        self.dtype, self.device = p.dtype, p.device
        self.depth = depth
        self.readout_depths = sorted(set(readout_depths) | {depth})
        self.readout_slot = {r: i for i, r in enumerate(self.readout_depths)}
        self.capacity, self.fixed_width = capacity, fixed_width
        self.reads = "gather" if cuda_graphs or compiled else reads
        self.rows = rows
        self.widths = WIDTHS + tuple(w for w in BATCH_WIDTHS if w <= WIDTHS[-1] * rows)
        if compiled:
            self.widths = tuple(w for w in COMPILED_WIDTHS if w <= WIDTHS[-1] * rows)
        self.cache = KVCache(
            self.cfg, depth, len(self.readout_depths), capacity, n_side, self.dtype, self.device, rows
        )
        # fixed width: keys read by each row's lanes (the capacity its sequence would decode in
        # alone; set by the driver), so no sequence's bits depend on another's length
        self.span = [capacity] * rows
        cd = at_least_float32(self.dtype)
        positions = torch.arange(capacity + 1, device=self.device)
        cos, sin = rope_tables(self.cfg, positions.cpu())  # (S + 1, D/2) float64
        self.cos, self.sin = cos.to(self.device, cd), sin.to(self.device, cd)
        self.key_pos = torch.arange(capacity, device=self.device)  # (S,)
        self.init_table = None  # Raven: h(0) depends on the position only (docs/design.md section 2)
        if self.cfg.family == "raven":
            zeros = torch.zeros(1, capacity + 1, self.cfg.d_model, dtype=self.dtype, device=self.device)
            # (S + 1, d); .to(): refdec's seeded state is built on the host whatever e's device
            self.init_table = self.net.initial_state(zeros, positions)[0].to(self.device)
        loop = self.cfg.family == "loopcoder"
        self.loop = LoopReads(self.cfg.loop_window_size, self.net.gates) if loop else None
        self._attenders = {
            tl_name: [partial(self._attend, tl, i) for i in range(tl.layers)]
            for tl_name, tl in zip(PHASES, self.cache.timelines())
        }
        if self.loop is not None:  # the core's reads are LoopReads' (Net.recur asks for a PassAttendFor)
            core = self.cache.core
            self._attenders["recur"] = [partial(self._attend_loop, core, i) for i in range(core.layers)]
        self._attend_for = {
            kind: PassAttendFor(a.__getitem__) if self.loop is not None and kind == "recur" else a.__getitem__
            for kind, a in self._attenders.items()
        }
        self._call: _Call | None = None
        self._level_of = {
            "prelude": lambda ln: 0,
            "recur": lambda ln: ln.depth,
            "readout": lambda ln: self.readout_slot[ln.depth],
        }
        self.graphs = None
        if cuda_graphs:
            from fastdec.graphs import CudaGraphs

            self.graphs = CudaGraphs(self)
        # the (from depth, to depth) spans of the fused calls a compiled engine compiles ahead
        # (Decoder sets its strategy's: fastdec.strategies.fused_spans; FUSE_MAX-long pieces)
        self.fused_spans: set[tuple[int, int]] = set()
        # tokens a greedy chain decodes (0: none): a compiled engine outside fixed-width mode whose
        # only readout is the full depth (what autoregressive decoding reads)
        k = CHAIN_RECURRENCES // depth
        chains = compiled and fixed_width is None and self.readout_depths == [depth] and k >= 2
        self.chain_length = k if chains else 0
        self.compiled = None  # fastdec.compiled.CompiledPhases: phase_fn compiled per (phase, width)
        if compiled:
            from fastdec.compiled import CompiledPhases

            self.compiled = CompiledPhases(self)

    phases = PHASES
    fuse_width = FUSE_WIDTH  # read by fastdec.compiled (which the engine imports: no import back)

    def width(self, n: int) -> int:
        return width_for(n, self.fixed_width, self.widths)

    def placeholder_lanes(self, kind: str, width: int) -> list[Lane]:
        """`width` lanes a call of `kind` may hold, to compile it (fastdec.compiled): positions and
        rows spread over the engine, states zero, depths each phase accepts (recur: levels 0 ..
        R-1; readout: the full depth)."""
        zeros = torch.zeros(width, 1, self.cfg.d_model, dtype=self.dtype, device=self.device)
        lanes = []
        for i in range(width):
            depth = {"prelude": 0, "recur": i % self.depth, "readout": self.depth}[kind]
            lane = Lane(pos=i % self.capacity, token=0, row=i % self.rows, depth=depth)
            if kind != "prelude":
                lane.h, lane.e = (zeros, i), (zeros, i)
            lanes.append(lane)
        return lanes

    def fused_placeholder(self, width: int, d0: int, to: int) -> None:
        """One fused call of `width` placeholder lanes (zero states, main line) from depth d0 to
        `to`, to compile its graph (fastdec.compiled.CompiledPhases.warm)."""
        lanes = self.placeholder_lanes("prelude" if d0 == 0 else "recur", width)
        for ln in lanes:
            ln.depth = d0
        self._advance_fused(lanes, to, [])

    def chain_placeholder(self) -> None:
        """One greedy chain from position 0 of row 0, to compile its graph (CompiledPhases.warm)."""
        self.chain(Lane(pos=0, token=0, row=0))

    @property
    def cache_bytes(self) -> int:
        """Bytes of its KV cache (fastdec.cache.kv_cache_bytes of its shape): what a Decoder's
        limit counts (the rope and Raven init tables beside it are (S + 1) x d, no rows)."""
        return self.cache.nbytes

    # -- the step -----------------------------------------------------------------------------
    def fusable(self, lanes: list[Lane], to: int) -> bool:
        """Whether `advance(lanes, to=to)` runs fused graphs (a compiled engine outside
        fixed-width mode, lanes all on the main line at one depth below `to`)."""
        if self.compiled is None or self.fixed_width is not None or not lanes:
            return False
        d0 = lanes[0].depth
        return d0 < to and all(ln.depth == d0 and ln.side < 0 for ln in lanes)

    def advance(self, lanes, timed: bool = False, to: int | None = None) -> list[CallRecord]:
        """Every lane in `lanes` advances one recurrence -> the calls it took. timed: time each
        call (syncs CUDA per call; benchmarks).

        to: the lanes (all at one depth) advance to depth `to`: a compiled engine runs one fused
        graph per (width, from-depth, to-depth) (at most FUSE_MAX recurrences each; fastdec/
        compiled.py), an eager one the calls of each recurrence in turn, the same calls as
        `advance` called that many times. The records are the calls the unfused steps make."""
        if to is not None:
            calls: list[CallRecord] = []
            if not timed and self.fusable(lanes, to):
                order = sorted(lanes, key=lambda ln: (ln.row, ln.pos))
                sizes = fused_chunks(len(order), tuple(w for w in self.widths if w <= FUSE_WIDTH))
                while order[0].depth < to:
                    stop = min(to, order[0].depth + FUSE_MAX)
                    i = 0
                    for n in sizes:  # in (row, pos) order: a chunk's keys are written by then
                        self._advance_fused(order[i : i + n], stop, calls)
                        i += n
                return calls
            while lanes and lanes[0].depth < to:
                calls += self.advance(lanes, timed)
            return calls
        # a sequence's lanes stay together (few runs per call) and, within it, same-level
        # readers come after (or with) their writers
        order = sorted(lanes, key=lambda ln: (ln.row, ln.pos, ln.side))
        calls: list[CallRecord] = []
        if self.compiled is not None and self.fixed_width is None:
            sizes = fused_chunks(len(order), self.widths, STEP_LANES)
        else:
            cap = self.fixed_width or self.widths[-1]
            sizes = (cap,) * -(-len(order) // cap)
        i = 0
        for n in sizes:
            self._advance_chunk(order[i : i + n], calls, timed)
            i += n
        return calls

    def _advance_chunk(self, chunk: list[Lane], calls: list[CallRecord], timed: bool) -> None:
        new = [ln for ln in chunk if ln.depth == 0]
        if new:
            order, (e, h0) = self._timed("prelude", new, calls, timed)
            for i, ln in enumerate(order):
                ln.e, ln.h = (e, i), (h0, i)
        order, (h,) = self._timed("recur", chunk, calls, timed)
        for i, ln in enumerate(order):
            ln.h = (h, i)
            ln.depth += 1
        outs = [ln for ln in chunk if ln.depth in self.readout_slot]
        if outs:
            order, (logits,) = self._timed("readout", outs, calls, timed)
            out = Readout(logits[: len(order)])
            for i, ln in enumerate(order):
                ln.logits.at[ln.depth] = (out, i)

    @torch.inference_mode()
    def _advance_fused(self, chunk: list[Lane], to: int, calls: list[CallRecord]) -> None:
        """One fused compiled call (fused_fn) for main-line lanes at one depth, sorted by (row, pos);
        in inference mode, as run_phase (the mode is part of what a graph was traced for)."""
        n, d0 = len(chunk), chunk[0].depth
        w = self.width(n)
        pad = w - n
        trash = self.capacity  # every timeline's trash position
        pos = [ln.pos for ln in chunk]
        rows = [pos + [0] * pad, pos + [trash] * pad, [ln.row for ln in chunk] + [0] * pad]
        if d0 == 0:
            rows.append([ln.token for ln in chunk] + [0] * pad)
        ints = torch.tensor(rows, dtype=torch.long, device=self.device).unbind(0)
        inp = dict(zip(("pos", "write_pos", "row", "ids"), ints))
        if d0:
            inp["h"] = self._stack([ln.h for ln in chunk], pad)
            inp["e"] = self._stack([ln.e for ln in chunk], pad)
        e, h, *logits = self.compiled.run_fused(d0, to, inp)
        depths = [r for r in range(d0 + 1, to + 1) if r in self.readout_slot]
        outs = [Readout(lg if n == w else lg[:n]) for lg in logits]
        for i, ln in enumerate(chunk):
            ln.e, ln.h, ln.depth = (e, i), (h, i), to
            for r, out in zip(depths, outs):
                ln.logits.at[r] = (out, i)
        if d0 == 0:
            calls.append(CallRecord("prelude", w, chunk))
        calls.append(CallRecord("recur", w, chunk, count=to - d0))
        if depths:
            calls.append(CallRecord("readout", w, chunk, count=len(depths)))

    @torch.inference_mode()
    def chain(self, lane: Lane) -> tuple[list[Lane], list[CallRecord]]:
        """A greedy chain from `lane` (depth 0, its token known): the lane and chain_length - 1 lanes
        after it go to the full depth in one compiled graph (chain_fn), each lane's token the argmax
        of the one before's logits. -> (the lanes after `lane`, their tokens those proposals, their
        logits set; the calls, as chain_length fused calls). The host decides whether they stand:
        a lane is worth its logits only if its token is the one committed before it."""
        k, R = self.chain_length, self.depth
        inp = {
            name: torch.tensor([v], dtype=torch.long, device=self.device)
            for name, v in (("pos", lane.pos), ("row", lane.row), ("ids", lane.token))
        }
        tokens, logits = self.compiled.run_chain(k, inp)  # (1, k), (1, k, V)
        out = Readout(logits[0])
        proposals = tokens[0, : k - 1].tolist()
        lanes = [lane] + [Lane(lane.pos + j, t, row=lane.row) for j, t in enumerate(proposals, 1)]
        for j, ln in enumerate(lanes):
            ln.depth = R
            ln.logits.at[R] = (out, j)
        per_token = (("prelude", 1), ("recur", R), ("readout", 1))
        return lanes[1:], [CallRecord(kind, 1, [lane], count=k * n) for kind, n in per_token]

    def chain_fn(self, k: int, inp: dict[str, torch.Tensor]):
        """k tokens of greedy decoding as one computation: fused_fn from depth 0 to R at positions
        pos .. pos+k-1, the token read at each the argmax of the logits before it (the first
        maximal index, as refdec.sampling.greedy_token).

        inp: pos, row, ids (W,) -> (argmax tokens (W, k), logits (W, k, V))."""
        pos, ids = inp["pos"], inp["ids"]
        tokens, logits = [], []
        for j in range(k):
            # past the capacity (a chain's last lanes at the end of a sequence, never committed):
            # the trash position, which every timeline has and no lane reads
            at = (pos + j).clamp(max=self.capacity)
            step = {"pos": at, "write_pos": at, "row": inp["row"], "ids": ids}
            _, _, lg = self.fused_fn(0, self.depth, step)
            ids = lg.argmax(-1)
            tokens.append(ids)
            logits.append(lg)
        return torch.stack(tokens, 1), torch.stack(logits, 1)

    def _timed(self, kind: str, lanes: list[Lane], calls: list[CallRecord], timed: bool):
        if not timed:
            order, outs = self.run_phase(kind, lanes)
            calls.append(CallRecord(kind, outs[0].shape[0], order))
            return order, outs
        t0, c0 = time.perf_counter(), time.process_time()
        order, outs = self.run_phase(kind, lanes)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        calls.append(
            CallRecord(kind, outs[0].shape[0], order, time.perf_counter() - t0, time.process_time() - c0)
        )
        return order, outs

    # -- phases -------------------------------------------------------------------------------
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
        inp, order, plan = self.phase_inputs(kind, lanes, width)
        if self.graphs is not None:
            outs = self.graphs.run(kind, inp)
        elif self.compiled is not None:
            outs = self.compiled.run(kind, inp)
        else:
            outs = self.phase_fn(kind, inp, None if self.reads == "gather" else plan)
        return order, outs

    def phase_inputs(self, kind: str, lanes: list[Lane], width: int | None = None):
        """Static-shape inputs (index tensors, states) of one call, and its eager Plan.

        The integer inputs travel as one (5 or 6, W) host tensor, one copy to the device.
        """
        n = len(lanes)
        w = width if width is not None else self.width(n)
        if n > w:
            raise ValueError(f"{n} lanes in a call of width {w}")
        tl = self.timeline(kind)
        level = self._level_of[kind]
        nl = tl.levels
        if self.reads == "gather":  # one key length for every call (graphs)
            span = None
            fixed_len = self.capacity
        elif self.fixed_width is not None:  # each sequence reads its own span: bitwise batch invariance
            span = self.span.__getitem__
            fixed_len = None
        else:
            span = fixed_len = None
        if span is None:
            main = sorted(
                (ln for ln in lanes if ln.side < 0), key=lambda ln: (ln.row * nl + level(ln), ln.pos)
            )
            side = [ln for ln in lanes if ln.side >= 0]
        else:
            main = sorted(
                (ln for ln in lanes if ln.side < 0),
                key=lambda ln: (span(ln.row), ln.row * nl + level(ln), ln.pos),
            )
            side = sorted((ln for ln in lanes if ln.side >= 0), key=lambda ln: span(ln.row))
        order = main + side if side else main
        levels = [level(ln) for ln in order]
        pad = w - n
        trash_pos, trash_slot = tl.trash_pos, tl.trash_slot
        pos = [ln.pos for ln in order]
        rows = [
            pos + [0] * pad,
            levels + [0] * pad,
            [ln.pos if ln.side < 0 else trash_pos for ln in order] + [trash_pos] * pad,
            [ln.side if ln.side >= 0 else trash_slot for ln in order] + [trash_slot] * pad,
            [ln.row for ln in order] + [0] * pad,
        ]
        if kind == "prelude":
            rows.append([ln.token for ln in order] + [0] * pad)
        ints = torch.tensor(rows, dtype=torch.long, device=self.device).unbind(0)  # (5 or 6, W)
        inp = dict(zip(("pos", "level", "write_pos", "side_slot", "row", "ids"), ints))
        if self.reads == "gather" and self.cache.n_side:  # no side slots: graphs skip the side work
            inp["is_side"] = inp["side_slot"] != trash_slot
        if kind != "prelude":
            inp["h"] = self._stack([ln.h for ln in order], pad)
            if kind == "recur":
                inp["e"] = self._stack([ln.e for ln in order], pad)
        nm = len(main)
        cells = [ln.row * nl + lv for ln, lv in zip(main, levels)]
        sides = [(ln.row, ln.side, lv, ln.pos) for ln, lv in zip(side, levels[nm:])]
        if span is None:
            read_len = fixed_len or (max(pos) + 1 if pos else 1)
            runs = [(a, k, c0, d, read_len) for a, k, c0, d in split_runs(cells)]
            side_groups = [(nm, sides, read_len)] if sides else []
        else:
            runs, side_groups = [], []
            for a, b, s in _groups([span(ln.row) for ln in main]):
                runs += [(a + i, k, c0, d, s) for i, k, c0, d in split_runs(cells[a:b])]
            for a, b, s in _groups([span(ln.row) for ln in side]):
                side_groups.append((nm + a, sides[a:b], s))
            read_len = max([r[4] for r in runs] + [g[2] for g in side_groups] + [1])
        plan = Plan(runs, side_groups, n, read_len, any(p < read_len - 1 for p in pos), first_side=nm)
        pieces = len(runs) + len(side_groups)
        if pieces > GATHER_PIECES and pieces * PIECE_ELEMS > 2 * n * read_len * tl.k.shape[3] * tl.k.shape[5]:
            if span is None:
                plan.gathers = [(0, nm, read_len)] if nm else []
                plan.gathers += [(nm, n - nm, read_len)] if side else []
            else:
                plan.gathers = [(a, b - a, s) for a, b, s in _groups([span(ln.row) for ln in main])]
                plan.gathers += [(nm + a, b - a, s) for a, b, s in _groups([span(ln.row) for ln in side])]
            if side:
                inp["is_side"] = inp["side_slot"] != trash_slot
        return inp, order, plan

    def _stack(self, rows: list[tuple[torch.Tensor, int]], pad: int) -> torch.Tensor:
        """(output, i) rows of earlier calls -> (n + pad, 1, d), one index_select; padded rows
        repeat a real row (finite, and their outputs are never read)."""
        srcs: dict[int, int] = {}  # id(output) -> its first row in the concatenation
        parts, idx, at = [], [], 0
        for t, i in rows:
            off = srcs.get(id(t))
            if off is None:
                off = srcs[id(t)] = at
                parts.append(t)
                at += t.shape[0]
            idx.append(off + i)
        src = parts[0] if len(parts) == 1 else torch.cat(parts)
        idx += [idx[0]] * pad
        return src.index_select(0, torch.tensor(idx, device=src.device))

    def phase_fn(self, kind: str, inp: dict[str, torch.Tensor], plan: Plan | None = None, keys=None):
        """The computation of one call: tensors in, tensors out (W rows). With plan None it is
        free of host syncs and data-dependent shapes, so fastdec.graphs can capture it; it reads
        `keys` positions (a static int; None: the capacity), which must pass every lane's."""
        model = self.net
        pos = inp["pos"]
        cos = self.cos.index_select(0, pos)[:, None, None, :]  # (W, 1, 1, D/2): T=1 row per lane
        sin = self.sin.index_select(0, pos)[:, None, None, :]
        key_pos = self.key_pos if keys is None else self.key_pos[:keys]
        if plan is None:
            hidden = key_pos[None, :] > pos[:, None]  # (W, S)
        elif plan.masked:
            hidden = self.key_pos[None, : plan.read_len] > pos[:, None]  # (W, read_len)
        else:
            hidden = None
        if plan is None:  # graph-safe: side rows may exist iff the inputs say which ("is_side")
            side_slot = inp["side_slot"] if "is_side" in inp else None
        else:
            side_slot = inp["side_slot"] if plan.side_groups else None
        rows = None if plan is None else (slice(0, plan.first_side), slice(plan.first_side, plan.n_real))
        at = self.timeline(kind).write_index(inp["row"], inp["level"], inp["write_pos"], side_slot, rows)
        self._call = _Call(inp, hidden, side_slot, plan, at, key_pos)
        attend_for = self._attend_for[kind]
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

    def fused_fn(self, d0: int, to: int, inp: dict[str, torch.Tensor], keys=None):
        """Main-line lanes all at depth d0 advanced to depth `to` in one computation: the phases
        `advance` would call one by one (the prelude when d0 = 0, recurrences d0+1 .. to, the
        readout at each readout depth passed), with the levels as constants and no side work.

        inp: pos, write_pos, row (W,), and ids (W,) when d0 = 0, else h and e (W, 1, d)
        -> (e, h, logits at each readout depth in (d0, to], (W, V) each)."""
        base = {name: inp[name] for name in ("pos", "write_pos", "row")}
        pos = inp["pos"]

        def phase(kind, level, **extra):
            return self.phase_fn(kind, dict(base, level=torch.full_like(pos, level), **extra), None, keys)

        if d0 == 0:
            e, h = phase("prelude", 0, ids=inp["ids"])
        else:
            e, h = inp["e"], inp["h"]
        logits = []
        for r in range(d0, to):
            (h,) = phase("recur", r, h=h, e=e)
            if r + 1 in self.readout_slot:
                logits += phase("readout", self.readout_slot[r + 1], h=h)
        return (e, h, *logits)

    def _attend(self, tl: Timeline, layer: int, q, k, v):
        """The attend callable of refdec.layers.Attention: write this call's rows, then read.

        q (W, H, 1, D), k/v (W, KV, 1, D) -> (W, H, 1, D). All rows write before any reads,
        so lanes at one level in one call see each other causally (prefill, verify batches).
        """
        c = self._call
        inp = c.inp
        tl.write_at(layer, k[:, :, 0], v[:, :, 0], c.at)
        if c.plan is None:
            kk, vv = tl.gather(
                layer, inp["row"], inp["level"], inp["pos"], c.side_slot, inp.get("is_side"), c.key_pos
            )
            return attention(q, kk, vv, c.hidden)
        plan, hidden = c.plan, c.hidden
        if plan.gathers is not None:
            return self._attend_gathered(tl, layer, q, plan, hidden)
        if len(plan.runs) == 1 and not plan.side_groups and plan.n_real == q.shape[0]:  # the common case
            _, n, cell0, delta, s = plan.runs[0]
            kk, vv = tl.run_view(layer, cell0, delta, n, s)
            return attention(q, kk, vv, hidden)
        pieces = []
        for start, n, cell0, delta, s in plan.runs:
            kk, vv = tl.run_view(layer, cell0, delta, n, s)
            rows = slice(start, start + n)
            pieces.append(attention(q[rows], kk, vv, None if hidden is None else hidden[rows, :s]))
        for a, group, s in plan.side_groups:
            b = a + len(group)
            kk, vv = tl.side_view(layer, group, s)
            pieces.append(attention(q[a:b], kk, vv, None if hidden is None else hidden[a:b, :s]))
        if plan.n_real < q.shape[0]:  # padded rows: their output is never used
            pieces.append(q.new_zeros(q.shape[0] - plan.n_real, *q.shape[1:]))
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces)

    def _attend_gathered(self, tl: Timeline, layer: int, q, plan: Plan, hidden):
        """A fragmented call (many runs of cells, side lanes): one index gather per block of
        rows with one key length, then one attention, instead of one per run (GATHER_PIECES)."""
        inp = self._call.inp
        pieces = []
        for a, n, s in plan.gathers:
            rows = slice(a, a + n)
            is_side = inp["is_side"][rows] if a >= plan.first_side else None
            kk, vv = tl.gather(
                layer,
                inp["row"][rows],
                inp["level"][rows],
                inp["pos"][rows],
                inp["side_slot"][rows],
                is_side,
                self.key_pos[:s],
            )
            pieces.append(attention(q[rows], kk, vv, None if hidden is None else hidden[rows, :s]))
        if plan.n_real < q.shape[0]:
            pieces.append(q.new_zeros(q.shape[0] - plan.n_real, *q.shape[1:]))
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces)

    def _attend_loop(self, tl: Timeline, layer: int, q, k, v):
        """LoopCoder's core attention (LoopReads): write this call's rows, then per block of rows
        with one key length gather level 0 and the rows' own levels, and mix.

        q (W, H, 1, D), k/v (W, KV, 1, D) -> (W, H, 1, D)."""
        c = self._call
        inp, plan = c.inp, c.plan
        tl.write_at(layer, k[:, :, 0], v[:, :, 0], c.at)
        if plan is None:  # graph-safe: every row reads the call's key length (the capacity, or a bucket)
            blocks = [(0, q.shape[0], c.key_pos.shape[0], "is_side" in inp)]
            n_real = q.shape[0]
        else:
            if plan.gathers is not None:
                blocks = [(a, n, s, a >= plan.first_side) for a, n, s in plan.gathers]
            else:
                blocks = [(a, n, s, False) for a, n, _, _, s in plan.runs]
                blocks += [(a, len(group), s, True) for a, group, s in plan.side_groups]
            n_real = plan.n_real
        window = self.loop.window
        firsts, owns = [], []
        for a, n, s, side in blocks:
            rows = slice(a, a + n)
            row, level, pos = (inp[name][rows] for name in ("row", "level", "pos"))
            slot = inp["side_slot"][rows] if side else None
            is_side = slot != tl.trash_slot if side else None
            key_pos = self.key_pos[:s]
            k1, v1 = tl.gather(layer, row, torch.zeros_like(level), pos, slot, is_side, key_pos)
            kk, vv = tl.gather(layer, row, level, pos, slot, is_side, key_pos)
            future = key_pos[None, :] > pos[:, None]  # (n, s)
            outside = future | (key_pos[None, :] <= pos[:, None] - window)
            firsts.append(attention(q[rows], k1, v1, future))
            owns.append(attention(q[rows], kk, vv, outside))
        if n_real < q.shape[0]:  # padded rows: their output is never used
            pad = q.new_zeros(q.shape[0] - n_real, *q.shape[1:])
            firsts.append(pad)
            owns.append(pad)
        first = firsts[0] if len(firsts) == 1 else torch.cat(firsts)  # (W, H, 1, D)
        own = owns[0] if len(owns) == 1 else torch.cat(owns)
        # the gate and the mixture over all W rows at once: at a fixed width their bits do not
        # depend on how the call's rows split into blocks (a reduction's kernel depends on its shape)
        mixed = mix(loop_gate(q, self.loop.gates[layer]), first, own)
        return torch.where((inp["level"] == 0)[:, None, None, None], first, mixed)

    # -- invariant checking -------------------------------------------------------------------
    def poison(self, gen: torch.Generator, scale: float, lanes, lengths: dict[int, int]) -> None:
        """Fill every cache slot that no live lane or committed position owns with garbage
        (cache INVARIANT): results must not change by a single bit.

        lengths: row -> committed length of each running sequence; other rows are all garbage.
        """
        for kind, tl in zip(PHASES, self.cache.timelines()):
            if not tl.layers:
                continue
            keep_main = torch.zeros(tl.rows, tl.levels, tl.capacity + 1, dtype=torch.bool)
            for row, length in lengths.items():
                keep_main[row, :, :length] = True
            keep_side = torch.zeros(tl.rows, tl.n_side + 1, tl.levels, dtype=torch.bool)
            for ln in lanes:
                if kind == "prelude":
                    done = [0] if ln.depth >= 1 else []
                elif kind == "recur":
                    done = list(range(ln.depth))
                else:
                    done = [i for r, i in self.readout_slot.items() if r <= ln.depth]
                if ln.side < 0:
                    keep_main[ln.row, done, ln.pos] = True
                else:
                    keep_side[ln.row, ln.side, done] = True
            tl.poison(gen, scale, keep_main, keep_side)


def _groups(keys: list[int]) -> list[tuple[int, int, int]]:
    """Sorted keys -> (start, end, key) of each block of equal keys."""
    out, i = [], 0
    while i < len(keys):
        j = i
        while j < len(keys) and keys[j] == keys[i]:
            j += 1
        out.append((i, j, keys[i]))
        i = j
    return out
