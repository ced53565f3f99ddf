"""A greedy speculative decoder over refdec with bugs that live at positions: the boundary
mutants of the mutant library (proofs/checks/mutation.py; docs/design.md section 6, "Coverage,
next to power").

Each round drafts k tokens one by one at depth d1, verifies them with one forward at depth R,
emits the longest verified prefix and the reference's token after it (or a bonus token when all k
pass), and rolls the context back. The context is an explicit list of (token, position) pairs, the
state a real engine keeps in its caches; every logit is refdec's uncached forward over that list
(`forward_at`: depth_logits with the positions given), so with no bug switched on the decoder emits
refdec's greedy tokens exactly. Each bug corrupts that state only where an engine's does:

window_untrimmable  once the context holds more than the model's loop window, a rejection trims
                    nothing: the first rejected draft stays in the context before the correction
                    (mlx-lm 0.32.2's RotatingKVCache under trim_prompt_cache keeps them all, in
                    its window layers only)
block               after a rejection whose drafts crossed a multiple of `block`, the positions of
                    later tokens are not rewound (they continue from the last rejected draft's)
k1_prompt_verify    a prompt of exactly k + 1 tokens is routed as a verify step: the first token
                    emitted is the verify row of the prompt's last-but-one position (vLLM #53051)
page                a cache page of `page` slots: the last slot of each page is written one slot
                    late, so the model reads the token after it there (an off-by-one at the edge)
lossy_after         past this position the drafts are committed unverified (a position nobody
                    declares: the decoder's `boundaries` leave it out)
window_per_call     the loop window's cache is trimmed as if one token came per call: before a
                    call it keeps the last W - 1 keys, so row j of a multi-token verify sees W + j
                    keys of its own pass instead of W (the drafts, one token a call, see W), and
                    the accepted drafts' keys keep that wider view (mlx-lm #1914, transformers
                    PR #48280)

The decoder declares its speculation width, its page and block sizes and the model's window in
`boundaries` (proofs/boundaries.py), never `lossy_after`. Greedy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from proofs.decoders.protocol import SeededDecoder
from refdec.errors import LoopcertError
from refdec.layers import causal_attention, loop_gate, mix
from refdec.model import LoopedLM, LoopPasses, rope_tables
from refdec.sampling import SamplingParams
from refdec.validate import is_int


@dataclass(frozen=True)
class EdgeBugs:
    window_untrimmable: bool = False
    block: int = 0
    k1_prompt_verify: bool = False
    page: int = 0
    lossy_after: int = 0
    window_per_call: bool = False

    def __post_init__(self):
        for name in ("block", "page", "lossy_after"):
            if not is_int(getattr(self, name), 0):
                raise LoopcertError(f"EdgeBugs.{name} must be an integer >= 0, got {getattr(self, name)!r}")


@torch.no_grad()
def forward_at(
    model: LoopedLM,
    ids: Sequence[int],
    positions: Sequence[int],
    depths: Sequence[int],
    windows: Sequence[int] | None = None,
) -> torch.Tensor:
    """refdec's uncached forward (LoopedLM.depth_logits) with each token at the position given
    instead of its index: (len(depths), T, V). `windows` (LoopCoder): each row's own loop window
    (WidenedPasses) instead of the model's."""
    ids_t = model.check_ids(ids)
    pos = torch.tensor(list(positions), dtype=torch.long)
    cos, sin = rope_tables(model.cfg, pos)
    net = model.net()
    e = net.embed(ids_t[None], cos, sin)  # (1, T, d)
    h = net.initial_state(e, pos)
    passes = None
    if model.cfg.family == "loopcoder":
        passes = LoopPasses(net) if windows is None else WidenedPasses(net, windows)
    out = {}
    for r in range(1, max(depths) + 1):
        h = net.recur(h, e, cos, sin) if passes is None else net.recur(h, e, cos, sin, passes.for_pass(r))
        if r in depths:
            out[r] = net.readout(h, cos, sin)[0]
    return torch.stack([out[r] for r in depths])


class WidenedPasses(LoopPasses):
    """LoopCoder's passes with a window of its own per row: row i of pass r >= 2 sees its own
    pass's keys i - windows[i] + 1 .. i (refdec.layers.window_attention at one window for all)."""

    def __init__(self, net, windows: Sequence[int]):
        super().__init__(net)
        self.windows = torch.tensor(list(windows), dtype=torch.long)

    def _mixed(self, layer: int, q, k, v):
        k1, v1 = self.first[layer]
        group = q.shape[1] // k.shape[1]
        kk, vv = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = q @ kk.transpose(-1, -2) / math.sqrt(q.shape[-1])
        i = torch.arange(q.shape[2])
        hidden = (i[None, :] > i[:, None]) | (i[None, :] <= i[:, None] - self.windows[:, None])
        own = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1) @ vv
        return mix(loop_gate(q, self.net.gates[layer]), causal_attention(q, k1, v1), own)


class EdgeSpec(SeededDecoder):
    """Greedy speculative decoding of k drafts at depth d1, verified at depth R (module docstring)."""

    def __init__(
        self, model: LoopedLM, k: int = 3, d1: int = 1, bugs: EdgeBugs = EdgeBugs(), row_windows: bool = False
    ):
        """`row_windows` (lossless, window_per_call's twin): every forward masks each row to its
        own window of W keys (WidenedPasses), as a multi-token call over a cache that keeps W - 1
        keys must."""
        self.model, self.k, self.d1, self.bugs, self.row_windows = model.eval(), k, d1, bugs, row_windows
        self.R = model.cfg.recurrence
        self.speculation_widths = (k,)

    @property
    def boundaries(self) -> tuple[tuple[int, str], ...]:
        out = []
        if self.model.cfg.loop_window_size:
            w = self.model.cfg.loop_window_size
            out.append((w, f"window cache of {w} wraps"))
        if self.bugs.page:
            out.append((self.bugs.page, f"cache page of {self.bugs.page} slots"))
        if self.bugs.block:
            out.append((self.bugs.block, f"KV block of {self.bugs.block}"))
        return tuple(out)

    def _row(self, ctx: list[tuple[int, int, int]], depth: int) -> torch.Tensor:
        """Logits (T, V) at `depth` of the context as the (buggy) caches hold it: (token,
        position, how many keys past the window its row saw) each."""
        ids = [t for t, _, _ in ctx]
        if self.bugs.page:  # the page's last slot holds the token written one slot late
            P = self.bugs.page
            ids = [ids[i + 1] if i % P == P - 1 and i + 1 < len(ids) else ids[i] for i in range(len(ids))]
        W = self.model.cfg.loop_window_size
        per_row = self.bugs.window_per_call or self.row_windows
        windows = [W + wide for _, _, wide in ctx] if per_row and W else None
        return forward_at(self.model, ids, [p for _, p, _ in ctx], [depth], windows)[0]

    def decode(self, ids, depth, max_new_tokens, sampling: SamplingParams, gen, eos_token_id) -> list[int]:
        if not sampling.greedy:
            raise LoopcertError("EdgeSpec decodes greedily only")
        b = self.bugs
        ctx = [(t, i, 0) for i, t in enumerate(ids)]
        out: list[int] = []
        if b.k1_prompt_verify and len(ids) == self.k + 1 and max_new_tokens:
            tok = int(self._row(ctx[:-1], self.R)[-1].argmax())  # the verify row of the wrong position
            out.append(tok)
            ctx.append((tok, len(ids), 0))
        while len(out) < max_new_tokens:
            start = len(ctx)
            nxt = ctx[-1][1] + 1
            drafts: list[int] = []
            c = list(ctx)
            for i in range(min(self.k, max_new_tokens - len(out))):
                t = int(self._row(c, self.d1)[-1].argmax())
                drafts.append(t)
                c.append((t, nxt + i, 0))  # drafted one token a call: the window is right
            if b.window_per_call:  # verified in one call of k + 1 rows (c[start - 1] the first)
                c[start:] = [(t, p, i + 1) for i, (t, p, _) in enumerate(c[start:])]
            rows = self._row(c, self.R)[start - 1 :]  # row i decides the token after c[start - 1 + i]
            emitted, rejected = [], 0
            for i, t in enumerate(drafts):
                target = int(rows[i].argmax())
                if b.lossy_after and nxt + i > b.lossy_after:
                    target = t  # committed unverified
                emitted.append(target)
                if t != target:
                    rejected = len(drafts) - i
                    break
            accepted = len(drafts) - rejected  # drafts the caches keep
            if not rejected and len(out) + len(emitted) < max_new_tokens:
                emitted.append(int(rows[len(drafts)].argmax()))  # the bonus token
            pos = nxt + accepted  # the position of the correction (or of the bonus token)
            W = self.model.cfg.loop_window_size
            if rejected and b.window_untrimmable and W and len(c) > W:
                ctx = c[: start + accepted + 1]  # the window wrapped: the rejected draft is not trimmed
                pos = ctx[-1][1] + 1
            else:
                ctx = c[: start + accepted]
                edge = b.block and any((nxt + i) % b.block == 0 for i in range(len(drafts)))
                if rejected and edge:
                    pos = c[-1][1] + 1  # positions not rewound past the block edge
            if len(emitted) > accepted:
                ctx.append((emitted[-1], pos, 0))
            out += emitted
        return out
