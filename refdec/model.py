"""LoopedLM: prelude P, a shared block B applied r times, readout C (docs/design.md section 2).

    e      = P(tokens)                        embeddings (* embed_scale), then prelude blocks
    h(0)   = init_state(e, positions)         Ouro, LoopCoder, Nanbeige: e itself; Raven: zeros or
                                              f(seed, position)
    h(r)   = B(inject(h(r-1), e))             Raven: adapter(cat[h, e]); the others: no injection;
                                              Ouro, Nanbeige: B ends in the final norm
    p_r(t) = C(h(r)[<= t])[t]                 Ouro, Nanbeige: head(h); Raven: [ln_f], coda, ln_f, head;
                                              LoopCoder, Nanbeige with skip_loop_final_norm:
                                              head(ln_f(h))

Depth r means every position ran r recurrences: depth-r rows attend only to depth-r keys of
earlier rows, and the coda of the depth-r readout sees depth-r states only. LoopCoder's pass
r >= 2 is the one exception: each of its layers also attends to pass 1's keys of that layer and
mixes the two by a per-head gate (refdec.layers.mixed_attention; `LoopPasses` below), so its
callers hand `recur` a `PassAttendFor` that knows the pass. Nothing is
cached: `depth_logits` recomputes the whole prefix, so it is the oracle for every cache.

`Net` is P, B and C as functions of the model's tensors (its parameters themselves, shared),
built on refdec.layers' block maths; `LoopedLM.net()` makes one. It is the only
implementation: the oracle below, the trainer, proofs.decoders.naive_kv and fastdec's engine (one Net
per engine) all call it, with their own `attend_for` (where the keys and values come from).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn
from torch.nn import functional as F

from refdec.config import MAX_SIZES, ModelConfig
from refdec.errors import LoopcertError
from refdec.layers import (
    Attend,
    Block,
    BlockWeights,
    GateWeights,
    LoopGate,
    RMSNorm,
    block,
    causal_attention,
    mixed_attention,
    rms_norm,
    rope_tables,
    seeded_state,
)
from refdec.validate import check_int

AttendFor = Callable[[int], Attend]  # layer index within its stage -> attention callable


def _causal(_: int) -> Attend:
    return causal_attention


@dataclass(frozen=True)
class PassAttendFor:
    """An attend_for that implements LoopCoder's passes (pass 1 causal, pass r >= 2 mixed with
    pass 1's keys): `Net.recur` takes no other for LoopCoder, so a caller written for the
    other families (plain causal attention at every depth) fails loudly instead of computing
    another model."""

    fn: AttendFor

    def __call__(self, layer: int) -> Attend:
        return self.fn(layer)


class LoopPasses:
    """LoopCoder's attention over whole sequences, no cache (docs/design.md section 2): pass 1
    is causal and keeps each layer's rotated keys and values; pass r >= 2 attends with
    refdec.layers.mixed_attention over them and its own. One per forward; `for_pass(r)` in
    pass order. Passes past cfg.recurrence extend the same rule: each mixes with pass 1."""

    def __init__(self, net: Net):
        self.net = net
        self.first: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # layer -> (k, v) (B, KV, T, D)

    def for_pass(self, r: int) -> PassAttendFor:
        attend = self._first if r == 1 else self._mixed
        return PassAttendFor(lambda layer: partial(attend, layer))

    def _first(self, layer: int, q, k, v):
        self.first[layer] = (k, v)
        return causal_attention(q, k, v)

    def _mixed(self, layer: int, q, k, v):
        k1, v1 = self.first[layer]
        return mixed_attention(q, k, v, k1, v1, self.net.gates[layer], self.net.cfg.loop_window_size)


@dataclass(frozen=True, eq=False)
class Net:
    """The looped LM as a function of its tensors. cos, sin: RoPE tables of the rows' positions."""

    cfg: ModelConfig
    embedding: torch.Tensor  # (V, d)
    prelude: tuple[BlockWeights, ...]
    adapter: torch.Tensor | None  # (d, 2d): Raven's injection, adapter(cat[h, e])
    core: tuple[BlockWeights, ...]
    coda: tuple[BlockWeights, ...]
    norm: torch.Tensor  # (d,): Ouro's and Nanbeige's per-loop final norm; Raven's and LoopCoder's ln_f
    head: torch.Tensor  # (V, d): lm_head, or the tied embedding
    gates: tuple[GateWeights, ...] = ()  # LoopCoder: one per core layer, shared by passes >= 2

    def embed(self, ids: torch.Tensor, cos, sin, attend_for: AttendFor = _causal) -> torch.Tensor:
        """ids (B, T) -> e (B, T, d): scaled embeddings through the prelude."""
        e = F.embedding(ids, self.embedding) * self.cfg.embed_scale
        for i, w in enumerate(self.prelude):
            e = block(e, w, self.cfg, cos, sin, attend_for(i))
        return e

    def initial_state(self, e: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """h(0) for rows at absolute `positions` (T,); e (B, T, d)."""
        cfg = self.cfg
        if cfg.family in ("ouro", "loopcoder", "nanbeige"):
            return e
        if cfg.init_state == "zeros":
            return torch.zeros_like(e)
        s = seeded_state(cfg.state_seed, positions, cfg.d_model, cfg.init_scale)
        return s.to(e.dtype).unsqueeze(0).expand_as(e).contiguous()

    def recur(self, h, e, cos, sin, attend_for: AttendFor = _causal) -> torch.Tensor:
        """One recurrence: h(r-1) (B, T, d) -> h(r). LoopCoder (and Nanbeige with
        skip_loop_final_norm): pass r's output is pass r+1's input as is (no norm between passes;
        ln_f once, in the readout)."""
        cfg = self.cfg
        if cfg.family == "loopcoder" and not isinstance(attend_for, PassAttendFor):
            raise LoopcertError(
                "LoopCoder's passes >= 2 attend to pass 1's keys: Net.recur needs a PassAttendFor "
                f"(refdec.model.LoopPasses), got {attend_for!r:.80}"
            )
        x = F.linear(torch.cat([h, e], dim=-1), self.adapter) if self.adapter is not None else h
        for i, w in enumerate(self.core):
            x = block(x, w, cfg, cos, sin, attend_for(i))
        if norms_each_loop(cfg):  # the normed state is both readout and next input
            x = rms_norm(x, self.norm, cfg.norm_eps)
        return x

    def readout(self, h, cos, sin, attend_for: AttendFor = _causal) -> torch.Tensor:
        """Depth-r states (B, T, d) -> logits (B, T, V)."""
        cfg = self.cfg
        if norms_each_loop(cfg):
            return h @ self.head.t()
        x = rms_norm(h, self.norm, cfg.norm_eps) if cfg.ln_f_before_coda else h
        for i, w in enumerate(self.coda):
            x = block(x, w, cfg, cos, sin, attend_for(i))
        return rms_norm(x, self.norm, cfg.norm_eps) @ self.head.t()


class LoopedLM(nn.Module):
    """The parameters (their names are loopcert's checkpoint layout) and the uncached oracle."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.embed_tokens = nn.Embedding(cfg.vocab_size, d)
        self.prelude = nn.ModuleList(Block(cfg) for _ in range(cfg.n_prelude))
        self.adapter = nn.Linear(2 * d, d, bias=False) if cfg.family == "raven" else None
        self.core = nn.ModuleList(Block(cfg) for _ in range(cfg.n_core))
        self.coda = nn.ModuleList(Block(cfg) for _ in range(cfg.n_coda))
        self.norm = RMSNorm(d, cfg.norm_eps)  # Ouro: per-loop final norm; Raven: ln_f
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(d, cfg.vocab_size, bias=False)
        self.early_exit_gate = nn.Linear(d, 1) if cfg.early_exit_gate else None
        loop = cfg.family == "loopcoder"
        self.gates = nn.ModuleList(LoopGate(cfg) for _ in range(cfg.n_core)) if loop else None

    def net(self) -> Net:
        """The maths over this module's own parameter tensors (shared, so an in-place update is
        seen; a parameter replaced by assignment is not: build a new Net)."""
        blocks = lambda stage: tuple(b.weights() for b in stage)
        head = self.embed_tokens if self.lm_head is None else self.lm_head
        return Net(
            self.cfg,
            self.embed_tokens.weight,
            blocks(self.prelude),
            None if self.adapter is None else self.adapter.weight,
            blocks(self.core),
            blocks(self.coda),
            self.norm.weight,
            head.weight,
            () if self.gates is None else tuple(g.weights() for g in self.gates),
        )

    # -- the oracle ----------------------------------------------------------------------
    def check_ids(self, ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
        try:
            t = torch.as_tensor(ids)
        except (TypeError, ValueError, RuntimeError, OverflowError) as e:  # strings, None, ints > int64
            raise LoopcertError(
                f"token ids must be a 1-D sequence of integers, got {ids!r:.80} ({e})"
            ) from None
        if t.dim() != 1 or t.numel() == 0:
            raise LoopcertError(f"token ids must be a non-empty 1-D sequence, got shape {tuple(t.shape)}")
        if t.dtype.is_floating_point or t.dtype == torch.bool:
            raise LoopcertError(f"token ids must be integers, got dtype {t.dtype}")
        bad = (t < 0) | (t >= self.cfg.vocab_size)
        if bool(bad.any()):
            raise LoopcertError(
                f"token id {int(t[bad][0])} is outside the vocabulary [0, {self.cfg.vocab_size})"
            )
        if t.numel() > self.cfg.max_seq_len:
            raise LoopcertError(f"{t.numel()} tokens exceed max_seq_len={self.cfg.max_seq_len}")
        return t.long()

    @torch.no_grad()
    def depth_logits(self, ids, depths: Sequence[int]) -> torch.Tensor:
        """ids (T,) -> logits (len(depths), T, V) at each requested depth (any order, repeats ok).

        Depths beyond cfg.recurrence simply loop more, like Huginn's num_steps (LoopCoder: each
        further pass mixes with pass 1, as pass 2 does).
        """
        depths = [check_depth(r) for r in depths]
        ids = self.check_ids(ids).to(self.embed_tokens.weight.device)
        positions = torch.arange(ids.numel(), device=ids.device)
        cos, sin = rope_tables(self.cfg, positions)
        net = self.net()
        e = net.embed(ids[None], cos, sin)  # (1, T, d)
        h = net.initial_state(e, positions)
        wanted = set(depths)
        out: dict[int, torch.Tensor] = {}
        passes = LoopPasses(net) if self.cfg.family == "loopcoder" else None
        for r in range(1, max(depths, default=0) + 1):
            h = net.recur(h, e, cos, sin) if passes is None else net.recur(h, e, cos, sin, passes.for_pass(r))
            if r in wanted:
                out[r] = net.readout(h, cos, sin)[0]
        if not depths:
            return torch.zeros(0, ids.numel(), self.cfg.vocab_size, dtype=self.embed_tokens.weight.dtype)
        return torch.stack([out[r] for r in depths])

    def forward(self, ids) -> torch.Tensor:
        return self.depth_logits(ids, [self.cfg.recurrence])[0]

    # -- initialisation ------------------------------------------------------------------
    @torch.no_grad()
    def init_weights(self, seed: int) -> LoopedLM:
        """Deterministic random weights from `seed` (parameters in name order).

        Linear weights ~ N(0, 1/fan_in) keep activations O(1) across many loops; norm weights
        are 1 + N(0, 0.1) and biases N(0, 0.1), so a mis-mapped norm or bias changes logits
        (the checkpoint tests rely on every tensor mattering). Nanbeige then gets a trained LM's
        scales (`_trained_scales`).
        """
        g = torch.Generator().manual_seed(seed)
        for name, p in sorted(self.named_parameters()):
            z = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if name.endswith("embed_tokens.weight"):
                v = z
            elif "norm" in name:
                v = 1.0 + 0.1 * z
            elif p.dim() == 1 or name.endswith("_bias"):
                v = 0.1 * z
            else:
                v = z / math.sqrt(p.shape[1])
            p.copy_(v.to(p.dtype))
        if self.cfg.family == "nanbeige":
            self._trained_scales()
        return self

    # Nanbeige's random weights get the activation scales of a trained LM (the family's engines run
    # tiny-nanbeige: llama.cpp, mlx-lm). Each layer's residual update is ~RESIDUAL_UPDATE of the
    # residual stream it is added to (N(0, 1/fan_in) gives ~1: every layer, and every loop, would
    # rewrite the state), and the head's logits have std ~HEAD_GAIN (a random head's ~1 gives laws
    # near uniform, top-1 mass 0.05 over 256 tokens). Measured on tiny-nanbeige seed 0, 50 positions:
    # top-1 mass 0.41 / 0.44 at depth 1 / 2, depth-1 greedy agreement 0.70, TV(p1, p2) 0.21
    # (without: 0.05 / 0.05, 0.24, 0.26); so drafts from fewer loops are accepted about as often as
    # a trained looped model's, and ties are as rare.
    RESIDUAL_UPDATE, HEAD_GAIN = 0.2, 3.0

    def _trained_scales(self) -> None:
        for name, p in self.named_parameters():
            if name.endswith(("attn.o_proj.weight", "mlp.down_proj.weight")):
                p.mul_(self.RESIDUAL_UPDATE)
        if self.lm_head is not None:
            self.lm_head.weight.mul_(self.HEAD_GAIN)


def norms_each_loop(cfg: ModelConfig) -> bool:
    """Ouro, and Nanbeige unless skip_loop_final_norm: the final norm ends every loop (its output
    is the next loop's input and the readout state); the others norm once, in the readout."""
    return cfg.family == "ouro" or (cfg.family == "nanbeige" and not cfg.skip_loop_final_norm)


def check_depth(r) -> int:
    """Depths past R loop more (Huginn's num_steps); past MAX_SIZES' recurrence a depth is a typo
    that would run for hours, not an experiment."""
    most = MAX_SIZES["recurrence"]
    if check_int("depth", r, 1) > most:
        raise LoopcertError(f"depth must be <= {most}, got {r!r}")
    return int(r)
