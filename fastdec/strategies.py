"""The decoding strategies, all on one Engine (docs/design.md section 5).

Positions: the prompt fills 0..P-1; the lane at position p reads token t_p and its readout at
depth r is p_r( . | t_<=p), the law of t_{p+1}. The prefill runs positions 0..P-1 to the target
depth R (every readout depth in use included); the first new token t_P is drawn from p_R and
counts as a restart (no proposal). Only lanes at positions <= last_pos - 1 are ever needed,
last_pos = P + max_new_tokens - 1.

- autoregressive: one lane, R steps of width 1, then commit.
- draft-verify: draft k = draft_ahead tokens one after another at d1 (d1 steps each), deepen
  the k drafted lanes d1 -> R together (R - d1 steps of width k, shallow depths reused), accept
  the longest verified prefix (rejection sampling, residual on rejection), forget the rest.
- pipelined (LoopSpec): a lane drafts x1 ~ p_d1 at d1 and spawns a child lane at p+1 while it
  keeps deepening; at d2 a gated residual second proposal x2 ~ p_d2 (-) p_d1 spawns a side
  child; at R the cascade decides t_{p+1}; the losing subtrees are pruned, a won side child is
  promoted to the main line, a restart refills the pipeline from depth 0.
- adaptive-verify (LOSSY, opt-in): draft-verify that verifies at an intermediate depth V and
  goes on to R only for the lanes from the first disagreement on; accepted lanes never run
  depths V+1..R: their deeper keys are copies of depth V's (Huginn-style KV reuse). It does
  NOT sample from p_R, and certification must say so.

Rewind telemetry (any strategy with rewind_depth): at each rejected first proposal, compare
argmax p_rewind with argmax p_R at that lane.

Each strategy is a generator, `Sequence.decode()`: it yields a `Step` (the lanes to advance by
one recurrence, or to a depth, and the other lanes it keeps alive) and resumes once they have advanced. The
driver (fastdec.batch) advances the steps of every live sequence of a batch in one engine call;
a sequence never sees its neighbours. Lanes (fastdec.engine) hold engine state only; what a
strategy knows about a lane (its proposals, its children) is a `Node` of that strategy.

Sampling parameters that follow the prefix (penalties, min_tokens: refdec.sampling): the law of
a lane is computed with the tokens before its position on its own branch: the committed tokens
and, for a drafted lane, the drafts of its ancestors (`context`). A target law is computed when
the lane is verified, after every token before it was committed, so it uses exactly the tokens
accepted before it. A stop token (the stop ids and the EOS unless ignore_eos) that is committed
ends the sequence there: the drafts after it are never committed.

RNG: one torch.Generator(seed) per sequence, on the host; all uniforms are drawn there
(refdec.sampling / fastdec.accept), never inside the engine, so CUDA graphs never touch it.
autoregressive uses exactly one uniform per token, like refdec.generate.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from fastdec.accept import Source, gated_residual, greedy_verify, loopspec_verify
from fastdec.config import DecodeConfig
from fastdec.engine import FUSE_MAX, Lane, LaneLogits
from fastdec.telemetry import Stats
from refdec.sampling import Context, SamplingParams, greedy_token, sample


class Prefills:
    """Which cache rows hold which prompt's prefill: positions [0, P) at every level, and the
    logits at P-1. key = (prompt, span): in fixed-width mode a prefill's bits depend on the
    span it read. A row's entry stays valid after its sequence ends (decoding writes positions
    >= P only) until the row's next sequence takes it over (`release`). The cache INVARIANT
    counts held prefixes as owned (fastdec.batch passes them to the poisoning hook).

    held: {row: (key, the LaneLogits of position P-1)} (the sequences that take a held prefill
    share its first law, computed once); across calls only for benchmarks (Decoder.reuse_prefill:
    the model must not change in between). running: keys being prefilled now.
    """

    def __init__(self, held: dict | None = None):
        self.held = {} if held is None else held
        self.running: set = set()

    def holder(self, key, row: int) -> int | None:
        """A row holding `key` (`row` itself first), or None."""
        if self.held.get(row, (None,))[0] == key:
            return row
        return next((r for r, (k, _) in self.held.items() if k == key), None)

    def release(self, row: int) -> None:
        self.held.pop(row, None)


@dataclass
class Step:
    """One request to the driver: advance `lanes` by one recurrence, or, with `to`, lanes all at
    one depth to depth `to` (the sequence resumes once they are there: a compiled engine runs
    the recurrences as one fused graph, an eager one step by step as before); `keep` are this
    sequence's other live lanes (they own cache slots: see the cache INVARIANT)."""

    lanes: list[Lane]
    keep: list[Lane]
    to: int | None = None
    # a greedy chain may follow the one lane (Engine.chain): the driver runs it when it can and
    # puts the lanes after it here, each with its proposal as token and its logits at `to`
    chain: bool = False
    ahead: list[Lane] | None = None

    @property
    def done(self) -> bool:
        return self.to is None or not self.lanes or self.lanes[0].depth >= self.to


@dataclass(eq=False)
class Node:
    """A strategy's view of one lane: its proposals and, in the pipeline, its children."""

    lane: Lane
    parent: Node | None = None
    child: Node | None = None  # first-proposal child (main line)
    side_child: Node | None = None  # second-proposal child (side slot)
    x1: int | None = None
    q1: torch.Tensor | None = None
    x2: int | None = None
    q2: torch.Tensor | None = None


class Sequence:
    """One sequence being decoded: its prompt, tokens, RNG, stats and committed length.

    Subclasses are the strategies; `decode()` is the whole run as a generator of Steps.
    row: the cache row (sequence slot) this sequence owns in the engine, given by the driver
    when the sequence starts (fastdec.batch: a finished sequence's row goes to the next one).
    span: the capacity this sequence would decode in alone (its reads in fixed-width mode).
    prefills: which rows hold which prompt's prefill (Prefills): certification samples one
    prompt thousands of times, and each sequence takes the prompt's rows instead of recomputing
    them. The rows and logits are the ones this sequence would compute.
    """

    def __init__(
        self,
        config: DecodeConfig,
        cache,
        prompt: list[int],
        max_new_tokens: int,
        sampling: SamplingParams,
        seed: int,
        eos_token_id: int | None,
        keep_logits: bool,
        readout_slot: dict[int, int],
        prefills: Prefills,
        span: int,
    ):
        self.cfg, self.cache, self.row = config, cache, -1
        self.prompt, self.max_new, self.eos = prompt, max_new_tokens, eos_token_id
        self.readout_slot = readout_slot
        self.prefills, self.span = prefills, span
        self.prefill_logits: torch.Tensor | None = None  # (V,) at P-1, once prefilled
        self.sampling = sampling
        unfiltered = SamplingParams(temperature=sampling.temperature)
        self.draft_params = sampling if config.draft_filter else unfiltered
        self.greedy = sampling.greedy
        self.stops = sampling.stop_ids(eos_token_id)
        self.plain = sampling.plain  # the law of the logits alone (no prefix, no processing)
        self.gen = torch.Generator().manual_seed(seed)
        self.R, self.d1 = config.depth, config.draft_depth
        self.d2, self.rw = config.second_depth, config.rewind_depth
        self.last_pos = len(prompt) + max_new_tokens - 1
        self.tokens: list[int] = []
        self.target_logits: list[torch.Tensor] | None = [] if keep_logits else None
        self.stats = Stats(config.strategy, config.depth, config.draft_depth, config.second_depth)
        self.length = 0  # committed positions [0, length) in this sequence's cache row
        self.free_slots = list(range(config.n_side))  # this sequence's side slots
        self.prefilling = True
        self.done = False
        self.t0 = self.c0 = 0.0

    # -- laws and draws -------------------------------------------------------------------------
    def context(self, drafted: list[int] = ()) -> Context | None:
        """The prefix of the next position: the committed tokens, then `drafted` (a lane's
        speculative ancestors); None when the sampling law does not depend on it."""
        if not self.sampling.needs_context:
            return None
        return Context(tuple(self.prompt), tuple(self.tokens) + tuple(drafted), self.eos)

    def target_law(self, logits: LaneLogits, depth: int, context: Context | None = None) -> torch.Tensor:
        """transform(logits[depth], sampling, context), computed with its readout call's rows
        (Readout.law); context: the committed tokens when None."""
        return logits.law(depth, self.sampling, self.context() if context is None else context)

    def draft_law(self, logits: LaneLogits, depth: int, context: Context | None = None) -> torch.Tensor:
        if not self.draft_params.needs_context:
            return logits.law(depth, self.draft_params)
        return logits.law(depth, self.draft_params, self.context() if context is None else context)

    def target_argmax(self, logits: LaneLogits, depth: int) -> int:
        """Greedy's target token: argmax of the processed logits (refdec.generate's)."""
        if self.plain:
            return logits.argmax(depth)  # greedy_token(logits[depth]), found for its call's rows at once
        return int(torch.argmax(self.target_law(logits, depth)))

    def target_draw(self, logits: LaneLogits, depth: int) -> int:
        """draw(target_law(logits, depth)) with the committed tokens' context: greedy takes the
        argmax without building the one-hot law (the same token: the first maximal index)."""
        if self.greedy:
            return self.target_argmax(logits, depth)
        return self.draw(self.target_law(logits, depth))

    def draw(self, law: torch.Tensor) -> int:
        return int(torch.argmax(law)) if self.greedy else sample(law, self.gen)

    def lane(self, pos: int, token: int, side: int = -1) -> Lane:
        return Lane(pos, token, row=self.row, side=side)

    def commit(self, token: int, source: Source, logits: LaneLogits, depth: int) -> bool:
        """Append a token decided on logits[depth]; True when generation is over (max_new_tokens
        or EOS)."""
        self.tokens.append(token)
        s = self.stats
        s.tokens += 1
        if source == Source.FIRST:
            s.from_first += 1
        elif source == Source.SECOND:
            s.from_second += 1
        else:
            s.from_restart += 1
        if self.target_logits is not None:
            self.target_logits.append(
                logits[depth].detach().cpu().clone()
            )  # a normal tensor (Engine.run_phase)
        return len(self.tokens) >= self.max_new or token in self.stops

    def verify(self, node: Node) -> tuple[int, Source]:
        """Cascade verification of node's proposals (x1, then x2 if any) against depth R."""
        s = self.stats
        lg = node.lane.logits
        if self.greedy:
            props = (node.x1,) if node.x2 is None else (node.x1, node.x2)
            tok, src = greedy_verify(self.target_argmax(lg, self.R), props)
        else:
            tok, src = loopspec_verify(
                self.target_law(lg, self.R), node.x1, node.q1, node.x2, node.q2, rng=self.gen, check=False
            )  # laws from transform, drawn here
        s.proposals += 1
        if src == Source.FIRST:
            s.accepted += 1
        else:
            if self.rw is not None:
                s.rewind_checks += 1
                s.rewind_hits += int(greedy_token(lg[self.rw]) == greedy_token(lg[self.R]))
            if self.cfg.telemetry_depths:
                target = greedy_token(lg[self.R])
                for d in self.cfg.telemetry_depths:
                    c = s.rewind_at.setdefault(d, [0, 0])
                    c[0] += 1
                    c[1] += int(greedy_token(lg[d]) == target)
        return tok, src

    def take_slot(self) -> int | None:
        return self.free_slots.pop(0) if self.free_slots else None

    def free_slot(self, slot: int) -> None:
        if slot >= 0:
            self.free_slots.append(slot)
            self.free_slots.sort()

    # -- the whole call ---------------------------------------------------------------------------
    def decode(self) -> Iterator[Step]:
        """Prefill, then the strategy, until max_new_tokens or EOS; `done` is set at the end."""
        if self.max_new > 0:
            first = yield from self.prefill()
            self.prefilling = False
            s = self.stats
            s.prefill_seconds = time.perf_counter() - self.t0
            s.prefill_cpu_seconds = time.process_time() - self.c0
            if not first:
                yield from self.run()
        self.prefilling = False
        self.finish()

    def finish(self) -> None:
        s = self.stats
        if self.cfg.strategy == "pipelined":  # runs of accepted proposals between rejections
            s.rounds = s.rejections + 1 if s.proposals else 0
        s.steps_per_width = dict(sorted(s.steps_per_width.items()))
        s.calls = {p: dict(sorted(per.items())) for p, per in sorted(s.calls.items())}
        s.call_seconds = {p: dict(sorted(per.items())) for p, per in sorted(s.call_seconds.items())}
        s.seconds, s.cpu_seconds = time.perf_counter() - self.t0, time.process_time() - self.c0
        self.done = True

    def prefill(self) -> Iterator[Step]:
        """Positions 0..P-1 to depth R; the first token from p_R at P-1. Returns True when done.

        Decoding writes positions >= P only, so a row that prefilled this prompt (at this span)
        still holds it after its sequence ended: take it from there (this row: nothing to do;
        another: copy its rows), or wait for a sequence that is prefilling it right now.
        """
        pre, key = self.prefills, (tuple(self.prompt), self.span)
        src = pre.holder(key, self.row)
        if src is None and key in pre.running:
            while (src := pre.holder(key, self.row)) is None and key in pre.running:
                yield Step([], [])
        if src is not None:
            lg = pre.held[src][1]
            if src != self.row:
                pre.release(self.row)
                self.cache.copy_prefix(src, self.row, len(self.prompt))
        else:
            pre.release(self.row)
            pre.running.add(key)
            lanes = [self.lane(p, t) for p, t in enumerate(self.prompt)]
            try:
                yield Step(lanes, [], to=self.R)
            finally:  # also when dropped mid-prefill (fastdec.continuous): nobody waits for it then
                pre.running.discard(key)
            lg = lanes[-1].logits
        pre.held[self.row] = (key, lg)
        self.prefill_logits = lg[self.R]
        self.length = len(self.prompt)
        return self.commit(self.target_draw(lg, self.R), Source.RESTART, lg, self.R)

    def run(self) -> Iterator[Step]:
        raise NotImplementedError  # each strategy below

    def last_committed_pos(self) -> int:
        return len(self.prompt) + len(self.tokens) - 1


class Autoregressive(Sequence):
    # tokens a greedy chain decodes at once where the engine has them (Engine.chain_length, set by
    # the Decoder for plain greedy sequences): asked for while two or more tokens are to come
    chain = 0

    def run(self) -> Iterator[Step]:
        pos = self.last_committed_pos()
        while True:
            chain = bool(self.chain) and self.max_new - len(self.tokens) >= 2  # the rest are never read
            step = Step([self.lane(pos, self.tokens[-1])], [], to=self.R, chain=chain)
            yield step
            for lane in step.lanes + (step.ahead or []):
                if lane.token != self.tokens[-1]:  # a chain's proposal the host did not draw
                    break
                lg = lane.logits
                self.length = lane.pos + 1
                if self.commit(self.target_draw(lg, self.R), Source.RESTART, lg, self.R):
                    return
            pos = self.last_committed_pos()


class DraftVerify(Sequence):
    def draft_round(self, pos: int) -> Iterator[Step]:
        """Draft k tokens one after another at d1: nodes pos .. pos+k-1, each with x1/q1 set."""
        k = min(self.cfg.draft_ahead, self.last_pos - pos)
        nodes: list[Node] = []
        token = self.tokens[-1]
        for j in range(k):
            node = Node(self.lane(pos + j, token))
            yield Step([node.lane], [n.lane for n in nodes], to=self.d1)
            nodes.append(node)
            node.q1 = self.draft_law(node.lane.logits, self.d1, self.context([n.x1 for n in nodes[:-1]]))
            node.x1 = token = self.draw(node.q1)
        return nodes

    def deepen(self, nodes: list[Node], to: int) -> Iterator[Step]:
        lanes = [n.lane for n in nodes]
        if lanes and lanes[0].depth < to:
            yield Step(lanes, [], to=to)

    def verify_in_order(self, nodes: list[Node]) -> bool:
        """Verify nodes (all at depth R) first to last, stopping at the first rejection."""
        for node in nodes:
            tok, src = self.verify(node)
            self.length = node.lane.pos + 1
            if self.commit(tok, src, node.lane.logits, self.R):
                return True
            if src != Source.FIRST:
                return False
        return False

    def run(self) -> Iterator[Step]:
        while True:
            nodes = yield from self.draft_round(self.last_committed_pos())
            yield from self.deepen(nodes, self.R)
            self.stats.rounds += 1
            if self.verify_in_order(nodes):
                return


class AdaptiveVerify(DraftVerify):
    """LOSSY (module docstring): accept at depth V, go on to R only after a disagreement."""

    def run(self) -> Iterator[Step]:
        v = self.cfg.verify_depth
        readouts = self.readout_slot
        for_core = list(range(v, self.R))  # levels of depths v+1 .. R
        for_coda = [readouts[r] for r in readouts if r > v]
        while True:
            nodes = yield from self.draft_round(self.last_committed_pos())
            yield from self.deepen(nodes, v)
            self.stats.rounds += 1
            j = 0
            for j, node in enumerate(nodes):  # noqa: B007 (j is where escalation starts)
                lg = node.lane.logits
                if self.greedy:
                    ok = self.target_argmax(lg, v) == node.x1
                else:
                    _, src = loopspec_verify(
                        self.target_law(lg, v), node.x1, node.q1, rng=self.gen, check=False
                    )
                    ok = src == Source.FIRST
                if not ok:
                    break
                self.stats.proposals += 1
                self.stats.accepted += 1
                pos = node.lane.pos
                self.cache.core.fill_forward(self.row, pos, v - 1, for_core)
                if self.cache.coda.layers:
                    self.cache.coda.fill_forward(self.row, pos, readouts[v], for_coda)
                self.length = pos + 1
                if self.commit(node.x1, Source.FIRST, lg, v):
                    return
            else:
                continue
            self.stats.escalations += 1
            rest = nodes[j:]
            yield from self.deepen(rest, self.R)
            if self.verify_in_order(rest):
                return


class Pipelined(Sequence):
    """LoopSpec: the live tree of nodes; `front` is the oldest, the next to be verified."""

    def run(self) -> Iterator[Step]:
        self.front = Node(self.lane(self.last_committed_pos(), self.tokens[-1]))
        self.live: list[Node] = [self.front]
        while True:
            yield Step([n.lane for n in self.live], [])
            # main-line nodes that reached d1 or d2, proposing in position order (the RNG's order)
            due = [n for n in self.live if n.lane.side < 0 and n.lane.depth in (self.d1, self.d2)]
            for node in sorted(due, key=lambda n: n.lane.pos) if len(due) > 1 else due:
                if node.lane.depth == self.d1:
                    self.propose_first(node)
                if self.d2 is not None and node.lane.depth == self.d2:
                    self.propose_second(node)
            if self.front.lane.depth == self.R and self.verify_front():
                return

    def drafted(self, node: Node) -> list[int]:
        """The tokens of node's branch past the committed ones, its own lane's included (positions
        last committed + 1 .. node's): what its drafts are conditioned on."""
        last, out = self.last_committed_pos(), []
        n = node
        while n is not None and n.lane.pos > last:
            out.append(n.lane.token)
            n = n.parent
        return out[::-1]

    def propose_first(self, node: Node) -> None:
        node.q1 = self.draft_law(node.lane.logits, self.d1, self.context(self.drafted(node)))
        node.x1 = self.draw(node.q1)
        pos = node.lane.pos
        if pos + 1 < self.last_pos:  # a child at pos+1 is needed iff pos+1 <= last_pos-1
            node.child = Node(self.lane(pos + 1, node.x1), parent=node)
            self.live.append(node.child)

    def propose_second(self, node: Node) -> None:
        """LoopSpec's gated residual second proposal (docs/design.md section 4)."""
        p2 = self.draft_law(node.lane.logits, self.d2, self.context(self.drafted(node)))
        self.stats.gate_checks += 1
        q2 = gated_residual(p2, node.q1, node.x1, self.cfg.gate)  # None: the gate is closed
        if q2 is None:
            return
        self.stats.gate_opens += 1
        node.q2 = q2
        node.x2 = self.draw(q2)
        pos = node.lane.pos
        if pos + 1 < self.last_pos:
            slot = self.take_slot()
            if slot is not None:
                node.side_child = Node(self.lane(pos + 1, node.x2, side=slot), parent=node)
                self.live.append(node.side_child)

    def prune(self, node: Node | None) -> None:
        """Drop a node and its subtree: pointer work only (cache INVARIANT)."""
        stack = [node]
        while stack:
            n = stack.pop()
            if n is None:
                continue
            self.live.remove(n)
            self.free_slot(n.lane.side)
            stack += [n.child, n.side_child]

    def verify_front(self) -> bool:
        front = self.front
        tok, src = self.verify(front)
        self.live.remove(front)
        self.length = front.lane.pos + 1
        if self.commit(tok, src, front.lane.logits, self.R):
            return True
        first, second = front.child, front.side_child
        new = None
        if src == Source.FIRST:
            self.prune(second)
            new = first
        elif src == Source.SECOND:
            self.prune(first)
            new = second
            if new is not None:
                self.cache.promote(self.row, new.lane.side, new.lane.pos)
                self.free_slot(new.lane.side)
                new.lane.side = -1
        else:
            self.prune(first)
            self.prune(second)
        if new is None:  # restart (or a proposal that had no lane): refill from depth 0
            new = Node(self.lane(front.lane.pos + 1, tok))
            self.live.append(new)
        new.parent = None
        self.front = new
        depth = new.lane.depth
        if src == Source.SECOND and depth > 0:  # catch up on proposals made while on the side
            if depth >= self.d1:
                self.propose_first(new)
            if self.d2 is not None and depth >= self.d2:
                self.propose_second(new)
        return False


def fused_spans(config: DecodeConfig) -> set[tuple[int, int]]:
    """The (from depth, to depth) of the Steps with `to` a strategy yields (the prefill's 0 -> R,
    autoregressive's, draft-verify's drafts and deepening), cut in pieces of at most FUSE_MAX
    recurrences as Engine.advance runs them: the fused graphs a compiled engine compiles ahead."""
    R, d1 = config.depth, config.draft_depth
    spans = {(0, R)}
    if config.strategy in ("draft-verify", "adaptive-verify"):
        spans |= {(0, d1), (d1, R)}
    if config.strategy == "adaptive-verify":
        spans |= {(d1, config.verify_depth), (config.verify_depth, R)}
    out = set()
    for a, b in spans:
        while a < b:
            out.add((a, min(b, a + FUSE_MAX)))
            a += FUSE_MAX
    return out


STRATEGY = {
    "autoregressive": Autoregressive,
    "draft-verify": DraftVerify,
    "pipelined": Pipelined,
    "adaptive-verify": AdaptiveVerify,
}
