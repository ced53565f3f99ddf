"""The decoding strategies, all on one Engine (DESIGN.md section 5).

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

RNG: one torch.Generator(seed) on the host; all uniforms are drawn there (refdec.sampling /
fastdec.accept), never inside the engine, so CUDA graphs never touch it. autoregressive uses
exactly one uniform per token, like refdec.generate.
"""

from __future__ import annotations

import time

import torch

from fastdec.accept import Source, gate_open, greedy_verify, loopspec_verify, residual
from fastdec.engine import Engine, Lane
from fastdec.stats import Stats
from refdec.sampling import SamplingParams, greedy_token, sample, transform


class Run:
    """State of one generate() call."""

    def __init__(self, dec, engine: Engine, prompt: list[int], max_new_tokens: int,
                 sampling: SamplingParams, seed: int, eos_token_id: int | None, keep_logits: bool,
                 reuse_prefill: bool = False):
        self.dec, self.engine, self.cache = dec, engine, engine.cache
        self.prompt, self.max_new, self.eos = prompt, max_new_tokens, eos_token_id
        self.reuse_prefill = reuse_prefill
        self.sampling = sampling
        self.draft_params = sampling if dec.draft_filter else SamplingParams(temperature=sampling.temperature)
        self.greedy = sampling.greedy
        self.gen = torch.Generator().manual_seed(seed)
        self.R, self.d1, self.d2, self.rw = dec.depth, dec.draft_depth, dec.second_depth, dec.rewind_depth
        self.telemetry = dec.telemetry_depths
        self.last_pos = len(prompt) + max_new_tokens - 1
        self.tokens: list[int] = []
        self.target_logits: list[torch.Tensor] | None = [] if keep_logits else None
        d1 = dec.draft_depth if dec.strategy != "autoregressive" else None
        self.stats = Stats(dec.strategy, dec.depth, d1, dec.second_depth)

    # -- laws and draws -------------------------------------------------------------------------
    def target_law(self, logits: torch.Tensor) -> torch.Tensor:
        return transform(logits.detach().cpu(), self.sampling)

    def draft_law(self, logits: torch.Tensor) -> torch.Tensor:
        return transform(logits.detach().cpu(), self.draft_params)

    def draw(self, law: torch.Tensor) -> int:
        return int(torch.argmax(law)) if self.greedy else sample(law, self.gen)

    def commit(self, token: int, source: Source, logits: torch.Tensor) -> bool:
        """Append a token; True when generation is over (max_new_tokens or EOS)."""
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
            self.target_logits.append(logits.detach().cpu().clone())  # a normal tensor (Engine.run_phase)
        return len(self.tokens) >= self.max_new or token == self.eos

    def verify(self, lane: Lane, logits: torch.Tensor) -> tuple[int, Source]:
        """Cascade verification of lane's proposals (x1, then x2 if any) against `logits`."""
        s = self.stats
        if self.greedy:
            props = (lane.x1,) if lane.x2 is None else (lane.x1, lane.x2)
            tok, src = greedy_verify(greedy_token(logits), props)
        else:
            tok, src = loopspec_verify(self.target_law(logits), lane.x1, lane.q1, lane.x2, lane.q2,
                                       rng=self.gen)
        s.proposals += 1
        if src == Source.FIRST:
            s.accepted += 1
        else:
            if self.rw is not None:
                s.rewind_checks += 1
                s.rewind_hits += int(greedy_token(lane.logits[self.rw]) == greedy_token(lane.logits[self.R]))
            if self.telemetry:
                target = greedy_token(lane.logits[self.R])
                for d in self.telemetry:
                    c = s.rewind_at.setdefault(d, [0, 0])
                    c[0] += 1
                    c[1] += int(greedy_token(lane.logits[d]) == target)
        return tok, src

    # -- the whole call ---------------------------------------------------------------------------
    def run(self) -> tuple[list[int], Stats]:
        t0, c0 = time.perf_counter(), time.process_time()
        s = self.stats
        self.cache.reset()
        self.engine.reset_counters()
        if self.max_new > 0:
            first = self.prefill()
            s.prefill_seconds, s.prefill_cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
            if not first:
                getattr(self, self.dec.strategy.replace("-", "_"))()
        e = self.engine
        s.steps, s.lane_steps, s.peak_lanes = e.steps, e.lane_steps, e.peak_lanes
        s.steps_per_width = dict(sorted(e.steps_per_width.items()))
        for (phase, width), n in sorted(e.calls.items()):
            s.calls.setdefault(phase, {})[width] = n
        for (phase, width), secs in sorted(e.call_seconds.items()):
            s.call_seconds.setdefault(phase, {})[width] = list(secs)
        if self.dec.strategy == "pipelined":  # runs of accepted proposals between rejections
            s.rounds = s.rejections + 1 if s.proposals else 0
        s.seconds, s.cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
        return self.tokens, s

    def prefill(self) -> bool:
        """Positions 0..P-1 to depth R; the first token from p_R at P-1.

        reuse_prefill: decoding writes positions >= P only, so after a prefill of this very
        prompt on this engine (`Engine.prefilled`, set by every prefill) rows 0..P-1 still hold
        it: skip the work (benchmarks; the model must not have changed in between).
        """
        key = tuple(self.prompt)
        if self.reuse_prefill and self.engine.prefilled is not None and self.engine.prefilled[0] == key:
            lg = self.engine.prefilled[1]
        else:
            self.engine.prefilled = None
            lanes = [Lane(p, t) for p, t in enumerate(self.prompt)]
            for _ in range(self.R):
                self.engine.advance(lanes)
            self.stats.prefill_steps = self.engine.steps
            lg = lanes[-1].logits[self.R]
            self.engine.prefilled = (key, lg)
        self.cache.length = len(self.prompt)
        self.engine.reset_counters()
        return self.commit(self.draw(self.target_law(lg)), Source.RESTART, lg)

    # -- strategies -------------------------------------------------------------------------------
    def autoregressive(self) -> None:
        pos = self.last_committed_pos()
        while True:
            lane = Lane(pos, self.tokens[-1])
            for _ in range(self.R):
                self.engine.advance([lane])
            lg = lane.logits[self.R]
            self.cache.length = pos + 1
            if self.commit(self.draw(self.target_law(lg)), Source.RESTART, lg):
                return
            pos += 1

    def last_committed_pos(self) -> int:
        return len(self.prompt) + len(self.tokens) - 1

    def draft_round(self, pos: int) -> list[Lane]:
        """Draft k tokens one after another at d1: lanes pos .. pos+k-1, each with x1/q1 set."""
        k = min(self.dec.draft_ahead, self.last_pos - pos)
        lanes: list[Lane] = []
        token = self.tokens[-1]
        for j in range(k):
            lane = Lane(pos + j, token)
            for _ in range(self.d1):
                self.engine.advance([lane], keep=lanes)
            lanes.append(lane)
            lane.q1 = self.draft_law(lane.logits[self.d1])
            lane.x1 = token = self.draw(lane.q1)
        return lanes

    def deepen(self, lanes: list[Lane], to: int) -> None:
        while lanes and lanes[0].depth < to:
            self.engine.advance(lanes)

    def verify_in_order(self, lanes: list[Lane]) -> bool:
        """Verify lanes (all at depth R) first to last, stopping at the first rejection."""
        for lane in lanes:
            lg = lane.logits[self.R]
            tok, src = self.verify(lane, lg)
            self.cache.length = lane.pos + 1
            if self.commit(tok, src, lg):
                return True
            if src != Source.FIRST:
                return False
        return False

    def draft_verify(self) -> None:
        while True:
            lanes = self.draft_round(self.last_committed_pos())
            self.deepen(lanes, self.R)
            self.stats.rounds += 1
            if self.verify_in_order(lanes):
                return

    def adaptive_verify(self) -> None:
        """LOSSY (module docstring): accept at depth V, go on to R only after a disagreement."""
        v = self.dec.verify_depth
        readouts = self.engine.readout_slot
        for_core = list(range(v, self.R))  # levels of depths v+1 .. R
        for_coda = [readouts[r] for r in readouts if r > v]
        while True:
            lanes = self.draft_round(self.last_committed_pos())
            self.deepen(lanes, v)
            self.stats.rounds += 1
            j = 0
            for j, lane in enumerate(lanes):  # noqa: B007 (j is where escalation starts)
                lg = lane.logits[v]
                if self.greedy:
                    ok = greedy_token(lg) == lane.x1
                else:
                    _, src = loopspec_verify(self.target_law(lg), lane.x1, lane.q1, rng=self.gen)
                    ok = src == Source.FIRST
                if not ok:
                    break
                self.stats.proposals += 1
                self.stats.accepted += 1
                self.cache.core.fill_forward(lane.pos, v - 1, for_core)
                if self.cache.coda.layers:
                    self.cache.coda.fill_forward(lane.pos, readouts[v], for_coda)
                self.cache.length = lane.pos + 1
                if self.commit(lane.x1, Source.FIRST, lg):
                    return
            else:
                continue
            self.stats.escalations += 1
            rest = lanes[j:]
            self.deepen(rest, self.R)
            if self.verify_in_order(rest):
                return

    def pipelined(self) -> None:
        front = Lane(self.last_committed_pos(), self.tokens[-1])
        self.live = [front]
        self.front = front
        while True:
            self.engine.advance(self.live)
            for lane in sorted((ln for ln in self.live if ln.side < 0), key=lambda ln: ln.pos):
                if lane.depth == self.d1:
                    self.propose_first(lane)
                if self.d2 is not None and lane.depth == self.d2:
                    self.propose_second(lane)
            if self.front.depth == self.R and self.verify_front():
                return

    def propose_first(self, lane: Lane) -> None:
        lane.q1 = self.draft_law(lane.logits[self.d1])
        lane.x1 = self.draw(lane.q1)
        if lane.pos + 1 < self.last_pos:  # a child at pos+1 is needed iff pos+1 <= last_pos-1
            lane.child = Lane(lane.pos + 1, lane.x1, parent=lane)
            self.live.append(lane.child)

    def propose_second(self, lane: Lane) -> None:
        """LoopSpec's gated residual second proposal (DESIGN.md section 4)."""
        p2 = self.draft_law(lane.logits[self.d2])
        self.stats.gate_checks += 1
        if not gate_open(p2, lane.q1, lane.x1, self.dec.gate):
            return
        self.stats.gate_opens += 1
        lane.q2, _ = residual(p2, lane.q1)  # not None: the gate is closed when q2 has no mass
        lane.x2 = self.draw(lane.q2)
        if lane.pos + 1 < self.last_pos:
            slot = self.cache.take_slot()
            if slot is not None:
                lane.side_child = Lane(lane.pos + 1, lane.x2, side=slot, parent=lane)
                self.live.append(lane.side_child)

    def prune(self, lane: Lane | None) -> None:
        """Drop a lane and its subtree: pointer work only (cache INVARIANT)."""
        stack = [lane]
        while stack:
            ln = stack.pop()
            if ln is None:
                continue
            self.live.remove(ln)
            self.cache.free_slot(ln.side)
            stack += [ln.child, ln.side_child]

    def verify_front(self) -> bool:
        front = self.front
        lg = front.logits[self.R]
        tok, src = self.verify(front, lg)
        self.live.remove(front)
        self.cache.length = front.pos + 1
        if self.commit(tok, src, lg):
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
                self.cache.promote(new.side, new.pos)
                self.cache.free_slot(new.side)
                new.side = -1
        else:
            self.prune(first)
            self.prune(second)
        if new is None:  # restart (or a proposal that had no lane): refill from depth 0
            new = Lane(front.pos + 1, tok)
            self.live.append(new)
        new.parent = None
        self.front = new
        if src == Source.SECOND and new.depth > 0:  # catch up on proposals made while on the side
            if new.depth >= self.d1:
                self.propose_first(new)
            if self.d2 is not None and new.depth >= self.d2:
                self.propose_second(new)
        return False
