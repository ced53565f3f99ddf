"""refdec's block maths, op for op, without nn.Module dispatch (issue 6: Python overhead per step).

On a small model the engine's step is dominated by host overhead, not arithmetic: a width-1
recurrence of the default model runs ~60 tensor ops, and nn.Module.__call__ (hooks, attribute
lookups) plus no-op `.to()` casts cost about a sixth of the step. `FastModel` runs the same
ops, in the same order, on the same parameter tensors (shared, not copied), calling the
functional kernels directly and skipping only casts to the dtype a tensor already has. Same
kernels on the same inputs give the same bits, so everything the engine computes stays
bitwise what refdec's modules compute (tests/test_fastdec_fastpath.py checks every tiny preset,
every phase, float32 and float64). If refdec's layers change, that test fails until this
mirror follows.

Interface: the engine's subset of refdec.LoopedLM (embed, initial_state, recur, readout), with
the same arguments (cos/sin already in the compute dtype, attend_for(layer) -> attend).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from refdec.layers import compute_dtype


def _norm(x: torch.Tensor, norm) -> torch.Tensor:
    """refdec.layers.RMSNorm.forward."""
    cd = compute_dtype(x.dtype)
    xf = x if x.dtype == cd else x.to(cd)
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + norm.eps)
    return (xf if xf.dtype == x.dtype else xf.to(x.dtype)) * norm.weight


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, style: str) -> torch.Tensor:
    """refdec.layers.apply_rope."""
    cd = compute_dtype(x.dtype)
    xf = x if x.dtype == cd else x.to(cd)
    c = cos if cos.dtype == cd else cos.to(cd)
    s = sin if sin.dtype == cd else sin.to(cd)
    if style == "interleaved":
        a, b = xf[..., 0::2], xf[..., 1::2]
        out = torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)
    else:
        half = xf.shape[-1] // 2
        a, b = xf[..., :half], xf[..., half:]
        out = torch.cat((a * c - b * s, a * s + b * c), dim=-1)
    return out if out.dtype == x.dtype else out.to(x.dtype)


class _Block:
    """refdec.layers.Block (with its Attention and MLP) as plain functions of shared tensors."""

    def __init__(self, blk, cfg):
        a, m = blk.attn, blk.mlp
        self.kind, self.cfg = blk.kind, cfg
        self.wq, self.wk, self.wv = a.q_proj.weight, a.k_proj.weight, a.v_proj.weight
        self.wo = a.o_proj.weight
        self.q_bias = a.q_bias if cfg.qk_bias else None
        self.k_bias = a.k_bias if cfg.qk_bias else None
        self.q_norm = a.q_norm if cfg.qk_norm else None
        self.k_norm = a.k_norm if cfg.qk_norm else None
        self.wg, self.wu, self.wd = m.gate_proj.weight, m.up_proj.weight, m.down_proj.weight
        self.norms = list(blk.norms)

    def attn(self, x, cos, sin, attend):
        cfg = self.cfg
        b, t, _ = x.shape
        q, k, v = F.linear(x, self.wq), F.linear(x, self.wk), F.linear(x, self.wv)
        if self.q_norm is not None:
            q, k = _norm(q, self.q_norm), _norm(k, self.k_norm)
        q = q.view(b, t, cfg.n_heads, cfg.head_dim)  # (B, T, H, D)
        k = k.view(b, t, cfg.n_kv_heads, cfg.head_dim)
        v = v.view(b, t, cfg.n_kv_heads, cfg.head_dim)
        if self.q_bias is not None:
            q, k = q + self.q_bias, k + self.k_bias
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, N, T, D)
        o = attend(_rope(q, cos, sin, cfg.rope), _rope(k, cos, sin, cfg.rope), v)
        return F.linear(o.transpose(1, 2).reshape(b, t, -1), self.wo)  # (B, T, H*D) -> (B, T, d)

    def mlp(self, x):
        return F.linear(F.silu(F.linear(x, self.wg)) * F.linear(x, self.wu), self.wd)

    def __call__(self, x, cos, sin, attend):
        n = self.norms
        if self.kind == "ouro":
            x = x + _norm(self.attn(_norm(x, n[0]), cos, sin, attend), n[1])
            return x + _norm(self.mlp(_norm(x, n[2])), n[3])
        if self.kind == "sandwich":
            x = _norm(self.attn(_norm(x, n[0]), cos, sin, attend) + x, n[1])
            return _norm(self.mlp(_norm(x, n[2])) + x, n[3])
        if self.kind == "prenorm":
            x = x + self.attn(_norm(x, n[0]), cos, sin, attend)
            return x + self.mlp(_norm(x, n[1]))
        x = x + _norm(self.attn(x, cos, sin, attend), n[0])  # postnorm (OLMo-2)
        return x + _norm(self.mlp(x), n[1])


class FastModel:
    """The engine's view of a refdec.LoopedLM: embed, initial_state, recur, readout."""

    def __init__(self, model):
        cfg = self.cfg = model.cfg
        self.model = model
        self.embed_w = model.embed_tokens.weight
        self.prelude = [_Block(b, cfg) for b in model.prelude]
        self.core = [_Block(b, cfg) for b in model.core]
        self.coda = [_Block(b, cfg) for b in model.coda]
        self.adapter = None if model.adapter is None else model.adapter.weight
        self.norm = model.norm
        self.head_w = model.embed_tokens.weight if model.lm_head is None else model.lm_head.weight

    def embed(self, ids, cos, sin, attend_for):
        e = F.embedding(ids, self.embed_w) * self.cfg.embed_scale
        for i, blk in enumerate(self.prelude):
            e = blk(e, cos, sin, attend_for(i))
        return e

    def initial_state(self, e, positions):
        return self.model.initial_state(e, positions)

    def recur(self, h, e, cos, sin, attend_for):
        x = F.linear(torch.cat([h, e], dim=-1), self.adapter) if self.adapter is not None else h
        for i, blk in enumerate(self.core):
            x = blk(x, cos, sin, attend_for(i))
        if self.cfg.family == "ouro":
            x = _norm(x, self.norm)
        return x

    def readout(self, h, cos, sin, attend_for):
        if self.cfg.family == "ouro":
            return h @ self.head_w.t()
        x = _norm(h, self.norm) if self.cfg.ln_f_before_coda else h
        for i, blk in enumerate(self.coda):
            x = blk(x, cos, sin, attend_for(i))
        return _norm(x, self.norm) @ self.head_w.t()
