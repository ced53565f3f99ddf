"""Building blocks shared by refdec (uncached) and fastdec (cached).

Every module here computes; none decides. Attention is split in two so that the cache
can live outside the block: `Attention.project` gives rotated q, k, v for the new rows,
an `attend(q, k, v) -> o` callable supplied by the caller mixes them with whatever keys
and values it keeps, and `Attention.output` projects back. refdec passes
`causal_attention` (the whole prefix, recomputed); fastdec passes its KV-cache reader.

Shapes: B batch, T new rows, S keys, H heads, KV key/value heads, D head dim.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from refdec.config import ModelConfig

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Norms and RoPE run in float32 at least (MODELS.md: RMSNorm in float32, cast back)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.to(compute_dtype(x.dtype))
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * self.weight


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
        inv = torch.where(wavelen > low_wavelen, inv / s.factor,
                          torch.where(wavelen < high_wavelen, inv, mid))
    return inv


def rope_tables(cfg: ModelConfig, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(T,) absolute positions -> cos, sin of shape (T, D/2), float64 (cast where applied)."""
    angles = positions.to(torch.float64)[:, None] * rope_inv_freq(cfg)[None, :]
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, style: str) -> torch.Tensor:
    """x (B, N, T, D) rotated at its rows' positions; cos, sin (T, D/2)."""
    cd = compute_dtype(x.dtype)
    xf, c, s = x.to(cd), cos.to(cd), sin.to(cd)
    if style == "interleaved":  # pairs (x[2i], x[2i+1]), Huginn
        a, b = xf[..., 0::2], xf[..., 1::2]
        out = torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)
    else:  # rotate-half: pairs (x[i], x[i + D/2]), Llama / Ouro / OLMo
        half = xf.shape[-1] // 2
        a, b = xf[..., :half], xf[..., half:]
        out = torch.cat((a * c - b * s, a * s + b * c), dim=-1)
    return out.to(x.dtype)


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

    def project(self, x, cos, sin):
        """x (B, T, d_model) -> q (B, H, T, D), k and v (B, KV, T, D), RoPE applied."""
        cfg = self.cfg
        b, t, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(b, t, cfg.n_heads, cfg.head_dim)  # (B, T, H, D)
        k = k.view(b, t, cfg.n_kv_heads, cfg.head_dim)
        v = v.view(b, t, cfg.n_kv_heads, cfg.head_dim)
        if cfg.qk_bias:  # added before RoPE (MODELS.md, Huginn)
            q, k = q + self.q_bias, k + self.k_bias
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, N, T, D)
        return apply_rope(q, cos, sin, cfg.rope), apply_rope(k, cos, sin, cfg.rope), v

    def output(self, o: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))  # (B, T, H*D) -> (B, T, d)

    def forward(self, x, cos, sin, attend: Attend):
        return self.output(attend(*self.project(x, cos, sin)))


class MLP(nn.Module):
    """Gated SiLU MLP: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.d_model, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.d_model, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """One transformer block in any of the four layouts of refdec.config.BLOCKS."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.kind = cfg.block
        self.attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.norms = nn.ModuleList(RMSNorm(cfg.d_model, cfg.norm_eps) for _ in range(cfg.n_norms_per_block))

    def forward(self, x, cos, sin, attend: Attend):
        n = self.norms
        if self.kind == "ouro":
            x = x + n[1](self.attn(n[0](x), cos, sin, attend))
            return x + n[3](self.mlp(n[2](x)))
        if self.kind == "sandwich":
            x = n[1](self.attn(n[0](x), cos, sin, attend) + x)
            return n[3](self.mlp(n[2](x)) + x)
        if self.kind == "prenorm":
            x = x + self.attn(n[0](x), cos, sin, attend)
            return x + self.mlp(n[1](x))
        x = x + n[0](self.attn(x, cos, sin, attend))  # postnorm (OLMo-2)
        return x + n[1](self.mlp(x))


def seeded_state(seed: int, positions: torch.Tensor, d_model: int, init_scale: float) -> torch.Tensor:
    """(T,) positions -> (T, d_model) float64 initial states, a function of (seed, position) only.

    Huginn draws a truncated normal of std sqrt(2/(5 d)) * init_scale, times sqrt(d), from the
    global RNG per forward; here each position gets its own generator seeded from
    (seed, position), so the state never depends on call order (DESIGN.md section 2).
    """
    rows = []
    for p in positions.tolist():
        # torch's CPU generator keeps only 32 bits of its seed: (seed, position) is packed
        # injectively for seed < 2**12, position < 2**20 (both checked in ModelConfig).
        g = torch.Generator().manual_seed((seed << 20) | int(p))
        z = torch.randn(d_model, generator=g, dtype=torch.float64).clamp(-3.0, 3.0)
        rows.append(z * (math.sqrt(2.0 / 5.0) * init_scale))
    return torch.stack(rows) if rows else torch.zeros(0, d_model, dtype=torch.float64)
