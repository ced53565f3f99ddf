"""The maths of one transformer block, once: plain functions of tensors, and the nn.Modules
that hold those tensors (their names are the checkpoint layout).

Every function here computes; none decides. These functions are the only implementation of
the block: the modules' forwards call them, and so does everything above (refdec.model's
uncached oracle, the trainer, fastdec's engine). A module's `weights()` hands out its own
parameter tensors (shared, not copied) as a frozen bundle, so a caller that runs many small
steps (the engine) gathers them once and skips nn.Module dispatch; the ops, and so the bits,
are the same whoever calls.

Attention takes its keys and values from outside: `attention` projects the new rows to
rotated q, k, v, an `attend(q, k, v) -> o` callable supplied by the caller mixes them with
whatever keys and values it keeps, and the output projection follows. refdec passes
`causal_attention` (the whole prefix, recomputed); fastdec passes its KV-cache reader; the
trainer a fused causal kernel.

Shapes: B batch, T new rows, S keys, H heads, KV key/value heads, D head dim, I MLP width.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from refdec.config import ModelConfig

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def at_least_float32(dtype: torch.dtype) -> torch.dtype:
    """Norms and RoPE run in float32 at least (docs/checkpoints.md: RMSNorm in float32, cast back)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x (..., n) normalised over its last axis in the compute dtype, cast back, then scaled."""
    xf = x.to(dtype=at_least_float32(x.dtype))
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return xf.to(dtype=x.dtype) * weight


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """(D/2,) float64 inverse frequencies, with Llama-3 scaling when configured."""
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    s = cfg.rope_scaling
    if s is not None:
        # Llama 3.1/3.2 "llama3" rope_type: long wavelengths divided by factor, short ones
        # kept, a smooth interpolation in between.
        low_wavelen = s.original_max_position_embeddings / s.low_freq_factor
        high_wavelen = s.original_max_position_embeddings / s.high_freq_factor
        wavelen = 2 * math.pi / inv
        smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
            s.high_freq_factor - s.low_freq_factor
        )
        mid = (1 - smooth) * inv / s.factor + smooth * inv
        inv = torch.where(
            wavelen > low_wavelen, inv / s.factor, torch.where(wavelen < high_wavelen, inv, mid)
        )
    return inv


def rope_tables(cfg: ModelConfig, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(T,) absolute positions -> cos, sin of shape (T, D/2), float64 (cast where applied)."""
    angles = positions.to(torch.float64)[:, None] * rope_inv_freq(cfg)[None, :]
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, style: str) -> torch.Tensor:
    """x (B, N, T, D) rotated at its rows' positions; cos, sin (T, D/2), any dtype."""
    cd = at_least_float32(x.dtype)
    xf, c, s = x.to(dtype=cd), cos.to(dtype=cd), sin.to(dtype=cd)
    if style == "interleaved":  # pairs (x[2i], x[2i+1]), Huginn
        a, b = xf[..., 0::2], xf[..., 1::2]
        out = torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)
    else:  # rotate-half: pairs (x[i], x[i + D/2]), Llama / Ouro / OLMo
        half = xf.shape[-1] // 2
        a, b = xf[..., :half], xf[..., half:]
        out = torch.cat((a * c - b * s, a * s + b * c), dim=-1)
    return out.to(dtype=x.dtype)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Plain causal softmax attention over the rows themselves. q (B,H,T,D), k/v (B,KV,T,D)."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)  # (B, H, T, D)
    v = v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    t = q.shape[2]
    future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, H, T, D)


# -- LoopCoder's mixed attention (docs/design.md section 2, docs/checkpoints.md LoopCoder) ------
@dataclass(frozen=True, eq=False)
class GateWeights:
    """One layer's LoopCoder gate: head h's gate is sigmoid(q_h . weight[h] + bias[h])."""

    weight: torch.Tensor  # (H, D)
    bias: torch.Tensor  # (H,)


def loop_gate(q: torch.Tensor, g: GateWeights) -> torch.Tensor:
    """q (B, H, T, D), rotated (the published code gates on q after RoPE) -> (B, H, T, 1) in (0, 1).
    Each query head has its own gate, whatever key head it shares (GQA)."""
    logits = (q * g.weight[None, :, None, :]).sum(-1) + g.bias[None, :, None]  # (B, H, T)
    return torch.sigmoid(logits)[..., None]


def window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    """Causal attention where row i sees rows i-window+1..i only (window keys, itself included).
    q (B,H,T,D), k/v (B,KV,T,D)."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)  # (B, H, T, D)
    v = v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    t = q.shape[2]
    i = torch.arange(t, device=q.device)
    hidden = (i[None, :] > i[:, None]) | (i[None, :] <= i[:, None] - window)  # (T, T): future or too old
    scores = scores.masked_fill(hidden, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, H, T, D)


def mix(gate: torch.Tensor, over_first: torch.Tensor, over_own: torch.Tensor) -> torch.Tensor:
    """LoopCoder's mixture: gate * (attention over pass 1's keys) + (1 - gate) * (over its own)."""
    return gate * over_first + (1 - gate) * over_own


def mixed_attention(q, k, v, k1, v1, gate: GateWeights, window: int) -> torch.Tensor:
    """Pass r >= 2 of LoopCoder, uncached: q, k, v of this pass (B, H or KV, T, D), k1, v1 pass 1's
    keys and values of the same layer at the same rows -> (B, H, T, D)."""
    return mix(loop_gate(q, gate), causal_attention(q, k1, v1), window_attention(q, k, v, window))


# -- the tensors of one block: linear weights are (out, in), as nn.Linear stores them ----------
@dataclass(frozen=True, eq=False)
class AttentionWeights:
    q: torch.Tensor  # (H*D, d)
    k: torch.Tensor  # (KV*D, d)
    v: torch.Tensor  # (KV*D, d)
    o: torch.Tensor  # (d, H*D)
    q_bias: torch.Tensor | None  # (H, D), Huginn's qk_bias
    k_bias: torch.Tensor | None  # (KV, D)
    q_norm: torch.Tensor | None  # (H*D,), OLMo-2's q/k norms
    k_norm: torch.Tensor | None  # (KV*D,)


@dataclass(frozen=True, eq=False)
class MLPWeights:
    gate: torch.Tensor  # (I, d)
    up: torch.Tensor  # (I, d)
    down: torch.Tensor  # (d, I)


@dataclass(frozen=True, eq=False)
class BlockWeights:
    attn: AttentionWeights
    mlp: MLPWeights
    norms: tuple[torch.Tensor, ...]  # (d,) each, in the order the layout applies them


# -- the block maths -------------------------------------------------------------------------
def attention(x: torch.Tensor, w: AttentionWeights, cfg: ModelConfig, cos, sin, attend: Attend):
    """x (B, T, d) -> (B, T, d): project, rotate, attend over the caller's keys, project back."""
    b, t, _ = x.shape
    q, k, v = F.linear(x, w.q), F.linear(x, w.k), F.linear(x, w.v)
    if cfg.qk_norm:  # OLMo-2: over the full projections, before the head reshape
        q, k = rms_norm(q, w.q_norm, cfg.norm_eps), rms_norm(k, w.k_norm, cfg.norm_eps)
    q = q.view(b, t, cfg.n_heads, cfg.head_dim)  # (B, T, H, D)
    k = k.view(b, t, cfg.n_kv_heads, cfg.head_dim)  # (B, T, KV, D)
    v = v.view(b, t, cfg.n_kv_heads, cfg.head_dim)
    if cfg.qk_bias:  # added before RoPE (docs/checkpoints.md, Huginn)
        q, k = q + w.q_bias, k + w.k_bias
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H or KV, T, D)
    o = attend(apply_rope(q, cos, sin, cfg.rope), apply_rope(k, cos, sin, cfg.rope), v)  # (B, H, T, D)
    return F.linear(o.transpose(1, 2).reshape(b, t, -1), w.o)  # (B, T, H*D) -> (B, T, d)


def mlp(x: torch.Tensor, w: MLPWeights) -> torch.Tensor:
    """Gated SiLU MLP: down(silu(gate(x)) * up(x))."""
    return F.linear(F.silu(F.linear(x, w.gate)) * F.linear(x, w.up), w.down)


def block(x: torch.Tensor, w: BlockWeights, cfg: ModelConfig, cos, sin, attend: Attend) -> torch.Tensor:
    """x (B, T, d) through one block in the layout cfg.block (refdec.config.BLOCKS, docs/checkpoints.md)."""
    norm = lambda y, i: rms_norm(y, w.norms[i], cfg.norm_eps)
    attn = lambda y: attention(y, w.attn, cfg, cos, sin, attend)
    if cfg.block == "ouro":  # each branch normed before and after, then added
        x = x + norm(attn(norm(x, 0)), 1)
        return x + norm(mlp(norm(x, 2), w.mlp), 3)
    if cfg.block == "sandwich":  # Huginn: the second norm of each pair after the residual add
        x = norm(attn(norm(x, 0)) + x, 1)
        return norm(mlp(norm(x, 2), w.mlp) + x, 3)
    if cfg.block == "prenorm":  # Llama
        x = x + attn(norm(x, 0))
        return x + mlp(norm(x, 1), w.mlp)
    x = x + norm(attn(x), 0)  # postnorm (OLMo-2): the branch outputs are normed
    return x + norm(mlp(x, w.mlp), 1)


# -- the modules: parameters (the state-dict layout) and a forward that calls the maths -------
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        h, kv, d = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.d_model, h * d, bias=False)
        self.k_proj = nn.Linear(cfg.d_model, kv * d, bias=False)
        self.v_proj = nn.Linear(cfg.d_model, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, cfg.d_model, bias=False)
        if cfg.qk_bias:  # Huginn's qk_bias [2, 1, H, D], split per side
            self.q_bias = nn.Parameter(torch.zeros(h, d))
            self.k_bias = nn.Parameter(torch.zeros(kv, d))
        if cfg.qk_norm:  # OLMo-2: norms over the full projections, before the head reshape
            self.q_norm = RMSNorm(h * d, cfg.norm_eps)
            self.k_norm = RMSNorm(kv * d, cfg.norm_eps)

    def weights(self) -> AttentionWeights:
        bias, norm = self.cfg.qk_bias, self.cfg.qk_norm
        return AttentionWeights(
            self.q_proj.weight,
            self.k_proj.weight,
            self.v_proj.weight,
            self.o_proj.weight,
            self.q_bias if bias else None,
            self.k_bias if bias else None,
            self.q_norm.weight if norm else None,
            self.k_norm.weight if norm else None,
        )

    def forward(self, x, cos, sin, attend: Attend):
        return attention(x, self.weights(), self.cfg, cos, sin, attend)


class LoopGate(nn.Module):
    """LoopCoder's per-layer gate (published as model.gate_projections.N)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(cfg.n_heads, cfg.head_dim))
        self.bias = nn.Parameter(torch.zeros(cfg.n_heads))

    def weights(self) -> GateWeights:
        return GateWeights(self.weight, self.bias)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.d_model, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.d_model, bias=False)

    def weights(self) -> MLPWeights:
        return MLPWeights(self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight)

    def forward(self, x):
        return mlp(x, self.weights())


class Block(nn.Module):
    """One transformer block in any of the four layouts of refdec.config.BLOCKS."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.norms = nn.ModuleList(RMSNorm(cfg.d_model, cfg.norm_eps) for _ in range(cfg.n_norms_per_block))

    def weights(self) -> BlockWeights:
        return BlockWeights(self.attn.weights(), self.mlp.weights(), tuple(n.weight for n in self.norms))

    def forward(self, x, cos, sin, attend: Attend):
        return block(x, self.weights(), self.cfg, cos, sin, attend)


def seeded_state(seed: int, positions: torch.Tensor, d_model: int, init_scale: float) -> torch.Tensor:
    """(T,) positions -> (T, d_model) float64 initial states, a function of (seed, position) only.

    Huginn draws a truncated normal of std sqrt(2/(5 d)) * init_scale, times sqrt(d), from the
    global RNG per forward; here each position gets its own generator seeded from
    (seed, position), so the state never depends on call order (docs/design.md section 2).
    """
    rows = []
    for p in positions.tolist():
        # torch's CPU generator keeps only 32 bits of its seed: (seed, position) is packed
        # injectively for seed < 2**12, position < 2**20 (both checked in ModelConfig).
        g = torch.Generator().manual_seed((seed << 20) | int(p))
        z = torch.randn(d_model, generator=g, dtype=torch.float64).clamp(-3.0, 3.0)
        rows.append(z * (math.sqrt(2.0 / 5.0) * init_scale))
    return torch.stack(rows) if rows else torch.zeros(0, d_model, dtype=torch.float64)
