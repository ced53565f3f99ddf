"""A minimal, straightforward KV-cached autoregressive decoder over refdec's layers.

It is the "honest baseline" of the speed report. It runs refdec.model.Net, the very
maths the engine runs (no nn.Module dispatch either), so fastdec's autoregressive strategy
beside it weighs only the engine's own machinery (lanes, static shapes, cache reads by plan)
against a plain loop. That machinery costs: the autoregressive strategy is slower than this
loop (R + 1 engine calls per token, each planned, against one forward per token here), so the
report gives each setting's speedup over this loop too, and its target is that the best
pipelined setting beats it (speed.targets); the regression gate holds the baseline's
ratio to this loop at its recorded value (proofs.gates.baseline).
It is also a second, independent cache implementation: in float64 it must agree with
refdec token for token, greedy and sampling alike (it consumes the sampling generator
exactly as refdec.decode does: one uniform per sampled token).

Cache: one preallocated (K, V) pair of shape (1, KV, S, D) per (stage, depth, layer):
prelude layers once, core layers per recurrence depth 1..R, coda layers at the readout
depth R only. Rows at or past `length` are never read. LoopCoder (docs/design.md section 2):
pass 1's timelines are read causally as any other; pass r >= 2 reads pass 1's timeline of the
same layer at every earlier row and its own at the last `loop_window_size` rows only, and the
layer's gate mixes the two.
"""

from __future__ import annotations

import torch

from proofs.decoders.protocol import SeededDecoder
from refdec.layers import GateWeights, loop_gate, mix, rope_tables
from refdec.model import LoopedLM, PassAttendFor
from refdec.sampling import greedy_token, sample, transform


class _Timeline:
    """K/V buffers of one attention layer at one depth, written by absolute position."""

    def __init__(self, cfg, capacity, dtype, device):
        shape = (1, cfg.n_kv_heads, capacity, cfg.head_dim)  # (1, KV, S, D)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)

    def write(self, start: int, k, v) -> None:  # k, v (1, KV, T, D) for rows start..start+T-1
        self.k[:, :, start : start + k.shape[2]] = k
        self.v[:, :, start : start + k.shape[2]] = v

    def read(self, q, start: int, window: int | None = None):
        """q (1, H, T, D) of rows start..start+T-1 over the written keys at positions <= the row's
        (and > row - window, given a window) -> (1, H, T, D)."""
        t = q.shape[2]
        end = start + t
        kv_heads = self.k.shape[1]
        group = q.shape[1] // kv_heads
        # GQA without copying keys: fold each KV head's query group into the row axis.
        qg = q.reshape(1, kv_heads, group * t, q.shape[-1])  # (1, KV, G*T, D)
        lo = 0 if window is None else max(0, start - window + 1)  # the first row's first key
        keys, vals = self.k[:, :, lo:end], self.v[:, :, lo:end]  # (1, KV, end - lo, D)
        mask = None
        if t > 1:  # one row reads exactly lo..end: no mask
            rows = torch.arange(start, end, device=q.device).repeat(group)[:, None]  # (G*T, 1)
            key_pos = torch.arange(lo, end, device=q.device)[None, :]
            mask = key_pos <= rows if window is None else (key_pos <= rows) & (key_pos > rows - window)
        o = torch.nn.functional.scaled_dot_product_attention(qg, keys, vals, attn_mask=mask)
        return o.reshape(q.shape)

    def attend_at(self, start: int):
        def attend(q, k, v):  # q (1, H, T, D); k, v (1, KV, T, D) for rows start..start+T-1
            self.write(start, k, v)
            return self.read(q, start)

        return attend

    def attend_loop_at(self, start: int, first: _Timeline, gate: GateWeights, window: int):
        """LoopCoder's pass r >= 2 (this timeline its own): pass 1's keys `first` (written by pass 1
        of the same forward) at every earlier row, its own within the window, mixed by the gate."""

        def attend(q, k, v):
            self.write(start, k, v)
            return mix(loop_gate(q, gate), first.read(q, start), self.read(q, start, window))

        return attend


class NaiveKVDecoder(SeededDecoder):
    def __init__(self, model: LoopedLM, depth: int | None = None):
        self.model = model
        self.depth = depth

    @torch.no_grad()
    def decode(self, ids, depth, max_new_tokens, sampling, gen, eos_token_id) -> list[int]:
        m = self.model
        cfg = m.cfg
        w = m.embed_tokens.weight
        capacity = len(ids) + max_new_tokens
        tl = lambda: _Timeline(cfg, capacity, w.dtype, w.device)
        prelude = [tl() for _ in m.prelude]
        core = [[tl() for _ in m.core] for _ in range(depth)]
        coda = [tl() for _ in m.coda]
        net = m.net()
        loop, W = cfg.family == "loopcoder", cfg.loop_window_size

        def pass_for(r: int, start: int):
            """The attend_for of recurrence r + 1 (Net.recur takes LoopCoder's only as a PassAttendFor)."""
            if not loop:
                return lambda i: core[r][i].attend_at(start)
            if r == 0:
                return PassAttendFor(lambda i: core[0][i].attend_at(start))
            return PassAttendFor(lambda i: core[r][i].attend_loop_at(start, core[0][i], net.gates[i], W))

        def forward(rows: list[int], start: int) -> torch.Tensor:
            """Run new rows at positions start.. through every depth; logits of the last row."""
            positions = torch.arange(start, start + len(rows), device=w.device)
            cos, sin = rope_tables(cfg, positions)
            x = torch.tensor([rows], device=w.device)
            e = net.embed(x, cos, sin, lambda i: prelude[i].attend_at(start))
            h = net.initial_state(e, positions)
            for r in range(depth):
                h = net.recur(h, e, cos, sin, pass_for(r, start))
            # Every row goes through the readout: the coda keys of depth R are needed later.
            return net.readout(h, cos, sin, lambda i: coda[i].attend_at(start))[0, -1]

        new: list[int] = []
        if max_new_tokens == 0:
            return new
        logits = forward(ids, 0)  # prefill: the whole prompt, one batched pass per depth
        for step in range(max_new_tokens):
            tok = greedy_token(logits) if sampling.greedy else sample(transform(logits, sampling), gen)
            new.append(tok)
            if tok == eos_token_id or step == max_new_tokens - 1:
                break
            logits = forward([tok], len(ids) + len(new) - 1)
        return new
