"""The key map of the published layouts: each published tensor name and the LoopedLM tensors it
holds (copied, row-concatenated, or Raven's stacked qk_bias), and LoopedLM built without memory
for its shapes."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from refdec.checkpoint_config import LOOPCODER, NANBEIGE
from refdec.config import ModelConfig
from refdec.model import LoopedLM

OURO_NORMS = (
    "input_layernorm",
    "input_layernorm_2",
    "post_attention_layernorm",
    "post_attention_layernorm_2",
)  # Block.norms[0..3], in the order the block applies them
LOOPCODER_NORMS = ("input_layernorm", "post_attention_layernorm")  # Block.norms[0, 1]
LLAMA_NORMS = LOOPCODER_NORMS  # every Llama pre-norm layer's (LoopCoder, Nanbeige)
RAVEN_STAGES = (
    ("prelude", "transformer.prelude"),
    ("core", "transformer.core_block"),
    ("coda", "transformer.coda"),
)


@dataclass(frozen=True)
class Entry:
    """One published tensor and the LoopedLM tensors it holds.

    kind "copy": one tensor as is; "rows": the internal tensors concatenated along dim 0
    (Raven's Wqkv = [q; k; v], fc = [gate; up]); "qk_bias": stack [q_bias, k_bias] as (2, 1, H, D).
    """

    published: str
    internal: tuple[str, ...]
    shape: tuple[int, ...]
    kind: str = "copy"


def key_map(cfg: ModelConfig, layout: str, shapes: dict[str, tuple[int, ...]]) -> list[Entry]:
    """Every published tensor of `layout`; `shapes` is LoopedLM(cfg)'s state_dict shapes."""

    def copy(pub, internal):
        return Entry(pub, (internal,), shapes[internal])

    def rows(pub, *internal):
        return Entry(pub, internal, (sum(shapes[k][0] for k in internal),) + shapes[internal[0]][1:], "rows")

    out: list[Entry] = []

    def llama_layer(i: int, norms: tuple[str, ...]) -> None:
        """model.layers.i (HF Llama names) -> core.i: attention, MLP and the block's norms."""
        p, q = f"model.layers.{i}", f"core.{i}"
        for n in ("q", "k", "v", "o"):
            out.append(copy(f"{p}.self_attn.{n}_proj.weight", f"{q}.attn.{n}_proj.weight"))
        for n in ("gate", "up", "down"):
            out.append(copy(f"{p}.mlp.{n}_proj.weight", f"{q}.mlp.{n}_proj.weight"))
        for j, n in enumerate(norms):
            out.append(copy(f"{p}.{n}.weight", f"{q}.norms.{j}.weight"))

    if layout == LOOPCODER:
        out.append(copy("model.embed_tokens.weight", "embed_tokens.weight"))
        for i in range(cfg.n_core):
            llama_layer(i, LOOPCODER_NORMS)
            # one gate per layer, shared by every pass >= 2 (vLLM: make_layers(num_hidden_layers))
            out.append(copy(f"model.gate_projections.{i}.weight", f"gates.{i}.weight"))
            out.append(copy(f"model.gate_projections.{i}.bias", f"gates.{i}.bias"))
        out.append(copy("model.norm.weight", "norm.weight"))
    elif layout == NANBEIGE:  # a plain HF Llama stack, looped
        out.append(copy("model.embed_tokens.weight", "embed_tokens.weight"))
        for i in range(cfg.n_core):
            llama_layer(i, LLAMA_NORMS)
        out.append(copy("model.norm.weight", "norm.weight"))
    elif layout == "ouro":
        out.append(copy("model.embed_tokens.weight", "embed_tokens.weight"))
        for i in range(cfg.n_core):
            llama_layer(i, OURO_NORMS)
        out.append(copy("model.norm.weight", "norm.weight"))
        if cfg.early_exit_gate:  # loaded, never used at fixed depth
            out.append(copy("model.early_exit_gate.weight", "early_exit_gate.weight"))
            out.append(copy("model.early_exit_gate.bias", "early_exit_gate.bias"))
    else:
        out.append(copy("transformer.wte.weight", "embed_tokens.weight"))
        for stage, prefix in RAVEN_STAGES:
            for i in range(getattr(cfg, f"n_{stage}")):
                p, q = f"{prefix}.{i}", f"{stage}.{i}"
                for j in range(cfg.n_norms_per_block):
                    out.append(copy(f"{p}.norm_{j + 1}.weight", f"{q}.norms.{j}.weight"))
                out.append(
                    rows(
                        f"{p}.attn.Wqkv.weight",
                        f"{q}.attn.q_proj.weight",
                        f"{q}.attn.k_proj.weight",
                        f"{q}.attn.v_proj.weight",
                    )
                )
                if cfg.qk_bias:
                    out.append(
                        Entry(
                            f"{p}.attn.qk_bias",
                            (f"{q}.attn.q_bias", f"{q}.attn.k_bias"),
                            (2, 1) + shapes[f"{q}.attn.q_bias"],
                            "qk_bias",
                        )
                    )
                if cfg.qk_norm:
                    out.append(copy(f"{p}.attn.q_norm.weight", f"{q}.attn.q_norm.weight"))
                    out.append(copy(f"{p}.attn.k_norm.weight", f"{q}.attn.k_norm.weight"))
                out.append(copy(f"{p}.attn.proj.weight", f"{q}.attn.o_proj.weight"))
                out.append(rows(f"{p}.mlp.fc.weight", f"{q}.mlp.gate_proj.weight", f"{q}.mlp.up_proj.weight"))
                out.append(copy(f"{p}.mlp.proj.weight", f"{q}.mlp.down_proj.weight"))
        out.append(copy("transformer.adapter.weight", "adapter.weight"))
        out.append(copy("transformer.ln_f.weight", "norm.weight"))
    if not cfg.tie_embeddings:
        out.append(copy("lm_head.weight", "lm_head.weight"))
    covered = [k for e in out for k in e.internal]
    assert sorted(covered) == sorted(shapes), "key map must cover every LoopedLM tensor once"
    return out


def split(entry: Entry, t: torch.Tensor, shapes) -> dict[str, torch.Tensor]:
    if entry.kind == "copy":
        return {entry.internal[0]: t}
    if entry.kind == "rows":
        return dict(zip(entry.internal, t.split([shapes[k][0] for k in entry.internal], dim=0)))
    return {entry.internal[0]: t[0, 0], entry.internal[1]: t[1, 0]}  # (2, 1, H, D) -> (H, D) x 2


def join(entry: Entry, state: dict[str, torch.Tensor]) -> torch.Tensor:
    parts = [state[k] for k in entry.internal]
    if entry.kind == "copy":
        return parts[0]
    if entry.kind == "rows":
        return torch.cat(parts, dim=0)
    return torch.stack(parts)[:, None]  # (2, 1, H, D)


_INITS = (
    "normal_",
    "uniform_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "xavier_uniform_",
    "xavier_normal_",
    "trunc_normal_",
    "constant_",
    "zeros_",
    "ones_",
)


def meta_model(cfg: ModelConfig) -> LoopedLM:
    """LoopedLM(cfg) without memory: shapes and parameter counts of billion-parameter models.

    The modules' random init is skipped: on the meta device it would go through torch._refs,
    whose first use imports torch._dynamo (seconds), and every weight is replaced anyway.
    """
    saved = {name: getattr(nn.init, name) for name in _INITS}
    try:
        for name in _INITS:
            setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
        with torch.device("meta"):
            return LoopedLM(cfg)
    finally:
        for name, fn in saved.items():
            setattr(nn.init, name, fn)
