"""Published checkpoints: Ouro, Huginn-0125, the retrofitted-recurrence Llama / OLMo-2 models and
LoopCoder (IQuest-Coder-V1-Loop).

Reads config.json and safetensors (one `model.safetensors`, or shards listed by
`model.safetensors.index.json`) in the key layouts the upstream code writes, and maps them onto
LoopedLM (docs/checkpoints.md lists what it takes from the published code); `write_published`
writes the same layouts.
Nothing is executed: `auto_map` / remote code in config.json is ignored, and refdec.load refuses
pickles before this module is reached.

Five layouts, told apart by model_type, then (huginn_raven) by the keys of the first block:

    layout           model_type       block     norms per block              rope         embed scale
    ouro             ouro             ouro      input_layernorm{,_2},        rotate-half  1
                                                post_attention_layernorm{,_2}
    huginn           huginn_raven     sandwich  norm_1..norm_4               interleaved  sqrt(n_embd)
    retro-llama      huginn_raven     prenorm   norm_1, norm_2               rotate-half  init_values
    retro-olmo       huginn_raven     postnorm  norm_1, norm_2 + attn.q_norm rotate-half  init_values
    iquestloopcoder  iquestloopcoder  prenorm   input_layernorm,             rotate-half  1
                                                post_attention_layernorm (+ gate_projections)

Config fields the architecture needs are read from config.json and never defaulted: upstream
config classes carry defaults that do not match the checkpoints (docs/checkpoints.md, Ouro).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from refdec import iquest_config
from refdec.config import ARCHITECTURES, PRESETS, ModelConfig, RopeScaling
from refdec.errors import LoopcertError
from refdec.files import FORMAT, parse_dtype, read_config, refuse_pickles, write_atomic
from refdec.model import LoopedLM
from refdec.validate import check_int, is_int, is_number
from refdec.values import dtype_name

LOOPCODER = "iquestloopcoder"  # LoopCoder's layout and model_type
LAYOUTS = ("ouro", "huginn", "retro-llama", "retro-olmo", LOOPCODER)
LAYOUT_OF_BLOCK = {"ouro": "ouro", "sandwich": "huginn", "prenorm": "retro-llama", "postnorm": "retro-olmo"}
BLOCK_OF_LAYOUT = {layout: block for block, layout in LAYOUT_OF_BLOCK.items()} | {LOOPCODER: "prenorm"}
MODEL_TYPES = ("ouro", "huginn_raven", LOOPCODER)
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
# Buffers some exports carry; recomputed from the config instead (docs/checkpoints.md).
SKIPPED = re.compile(r"(^|\.)(rotary_emb\.inv_freq|freqs_cis)$")
FLOAT_DTYPES = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}
DTYPE_NAMES = {v: k for k, v in FLOAT_DTYPES.items()}
OURO_NORMS = (
    "input_layernorm",
    "input_layernorm_2",
    "post_attention_layernorm",
    "post_attention_layernorm_2",
)  # Block.norms[0..3], in the order the block applies them
LOOPCODER_NORMS = ("input_layernorm", "post_attention_layernorm")  # Block.norms[0, 1]
RAVEN_STAGES = (
    ("prelude", "transformer.prelude"),
    ("core", "transformer.core_block"),
    ("coda", "transformer.coda"),
)


# -- reading config.json ------------------------------------------------------------------
class Fields:
    """config.json fields, read strictly: a needed field that is absent is an error naming it."""

    def __init__(self, raw: dict, where: str):
        self.raw, self.where = raw, where

    def bad(self, name: str, why: str):
        raise LoopcertError(f"{self.where}: field {name!r} {why}")

    def has(self, name: str) -> bool:
        return self.raw.get(name) is not None

    def first(self, *names: str):
        """The value of the first present alias; all present aliases must agree."""
        present = [n for n in names if self.has(n)]
        if not present:
            self.bad(" / ".join(names), "is missing (needed by this architecture)")
        values = {json.dumps(self.raw[n]) for n in present}
        if len(values) > 1:
            self.bad(" / ".join(present), f"disagree: {[self.raw[n] for n in present]}")
        return present[0], self.raw[present[0]]

    def int(self, *names: str, min_value: int = 1) -> int:
        name, v = self.first(*names)
        if not is_int(v, min_value):
            self.bad(name, f"must be an integer >= {min_value}, got {v!r}")
        return v

    def num(self, *names: str) -> float:
        name, v = self.first(*names)
        if not is_number(v, 0, low_open=True):
            self.bad(name, f"must be a finite number > 0, got {v!r}")
        return float(v)

    def flag(self, *names: str) -> bool:
        name, v = self.first(*names)
        if not isinstance(v, bool):
            self.bad(name, f"must be true or false, got {v!r}")
        return v

    def require(self, name: str, allowed, why: str) -> None:
        """An optional field that, when present, must hold one of `allowed` (else unsupported)."""
        if self.has(name) and self.raw[name] not in allowed:
            self.bad(name, f"= {self.raw[name]!r} is not supported ({why})")


def rope_scaling_from(f: Fields) -> RopeScaling | None:
    """`rope_scaling`: absent or null means none; only Llama-3's "llama3" type is published."""
    if not f.has("rope_scaling"):
        return None
    s = f.raw["rope_scaling"]
    kind = s.get("rope_type", s.get("type")) if isinstance(s, dict) else None
    if kind == "default":  # transformers' spelling of "no scaling"
        return None
    if kind != "llama3":
        f.bad("rope_scaling", f"= {s!r} is not supported (only rope_type 'llama3')")
    sub = Fields(s, f"{f.where}: rope_scaling")
    return RopeScaling(
        factor=sub.num("factor"),
        low_freq_factor=sub.num("low_freq_factor"),
        high_freq_factor=sub.num("high_freq_factor"),
        original_max_position_embeddings=sub.int("original_max_position_embeddings"),
    )


def llama_sizes(f: Fields) -> dict:
    """The sizes every HF Llama-style config.json names alike (Ouro, LoopCoder)."""
    return {
        "vocab_size": f.int("vocab_size"),
        "d_model": f.int("hidden_size"),
        "n_heads": f.int("num_attention_heads"),
        "n_kv_heads": f.int("num_key_value_heads"),
        "head_dim": f.int("head_dim"),
        "intermediate_size": f.int("intermediate_size"),
        "n_core": f.int("num_hidden_layers"),
    }


def check_recurrence(recurrence) -> int | None:
    return None if recurrence is None else check_int("recurrence", recurrence, 1)


def raven_block(keys) -> str:
    """huginn_raven covers three block layouts; their norm keys tell them apart."""
    sandwich = sorted(k for k in keys if re.search(r"\.norm_[34]\.weight$", k))
    qk_norm = sorted(k for k in keys if re.search(r"\.attn\.[qk]_norm\.weight$", k))
    if sandwich and qk_norm:
        raise LoopcertError(
            f"huginn_raven checkpoint mixes Huginn sandwich norms ({sandwich[0]!r}) with OLMo-2 "
            f"q/k norms ({qk_norm[0]!r}): not a published layout"
        )
    return "sandwich" if sandwich else "postnorm" if qk_norm else "prenorm"


def build(where: str, **fields) -> ModelConfig:
    try:
        return ModelConfig(**fields)
    except LoopcertError as e:
        raise LoopcertError(f"{where}: {e}") from None


def config_from_published(
    raw: dict, keys, *, recurrence: int | None = None, where: str = "config.json", name: str | None = None
) -> tuple[ModelConfig, str]:
    """(ModelConfig, layout) from a published config.json and the stored tensor names."""
    if not isinstance(raw, dict):
        raise LoopcertError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    recurrence = check_recurrence(recurrence)
    f = Fields(raw, where)
    model_type = raw.get("model_type")
    if model_type is None:
        raise LoopcertError(
            f'{where}: no \'model_type\' (nor "format": "loopcert"); loopcert reads model_type '
            f"{list(MODEL_TYPES)} and its own format"
        )
    if model_type not in MODEL_TYPES:
        raise LoopcertError(
            f"{where}: unknown model_type {model_type!r}; loopcert reads {list(MODEL_TYPES)} "
            "and its own format"
        )
    keys = set(keys)
    tie_names = ("tie_embeddings",) if model_type == "huginn_raven" else ("tie_word_embeddings",)
    # Tied when the config says so; a config silent on it is read from the file (no lm_head).
    tie = f.flag(*tie_names) if f.has(tie_names[0]) else "lm_head.weight" not in keys
    if model_type == LOOPCODER:
        return loopcoder_config(f, tie, recurrence, where, name), LOOPCODER
    if model_type == "ouro":
        f.require("hidden_act", ("silu",), "Ouro's MLP is SwiGLU")
        f.require("attention_bias", (False,), "Ouro's attention has no biases")
        f.require("mlp_bias", (False,), "Ouro's MLP has no biases")
        f.require("use_sliding_window", (False,), "sliding-window attention")
        cfg = build(
            where,
            family="ouro",
            block="ouro",
            rope="half",
            name=name or "ouro",
            **llama_sizes(f),
            recurrence=recurrence or f.int("total_ut_steps"),
            rope_theta=f.num("rope_theta"),
            rope_scaling=rope_scaling_from(f),
            norm_eps=f.num("rms_norm_eps"),
            max_seq_len=f.int("max_position_embeddings"),
            tie_embeddings=tie,
            early_exit_gate="model.early_exit_gate.weight" in keys,
        )
        return cfg, "ouro"

    block = raven_block(keys)
    layout = LAYOUT_OF_BLOCK[block]
    f.require("injection_type", ("linear",), "the adapter is Linear(2 n_embd -> n_embd)")
    f.require("bias", (False,), "linear layers have no biases")
    f.require("nonlin_name", ("SiLU",), "the MLP is gated SiLU")
    d = f.int("n_embd")
    split_sum = sum(f.int(n, min_value=0) for n in ("n_layers_in_prelude", "n_layers_in_coda")) + f.int(
        "n_layers_in_recurrent_block"
    )
    if f.has("n_layers") and f.raw["n_layers"] != split_sum:
        f.bad("n_layers", f"= {f.raw['n_layers']!r} but prelude + recurrent block + coda = {split_sum}")
    common = dict(
        family="raven",
        block=block,
        name=name or layout,
        d_model=d,
        n_heads=f.int("n_heads", "num_attention_heads"),
        n_kv_heads=f.int("num_key_value_heads"),
        head_dim=f.int("head_dim"),
        intermediate_size=f.int("intermediate_size"),
        # Embedding rows: upstream pads the vocabulary and the head emits every padded row.
        vocab_size=f.int("padded_vocab_size") if f.has("padded_vocab_size") else f.int("vocab_size"),
        n_prelude=f.int("n_layers_in_prelude", min_value=0),
        n_core=f.int("n_layers_in_recurrent_block"),
        n_coda=f.int("n_layers_in_coda", min_value=0),
        recurrence=recurrence or f.int("mean_recurrence"),
        qk_bias=f.flag("qk_bias"),
        qk_norm=block == "postnorm",
        tie_embeddings=tie,
        norm_eps=f.num("norm_eps"),
        init_state="zeros",  # upstream's init_scale=0 (docs/checkpoints.md): reproducible
    )
    if common["qk_bias"] and common["n_kv_heads"] != common["n_heads"]:
        f.bad(
            "num_key_value_heads",
            f"= {common['n_kv_heads']} must equal n_heads="
            f"{common['n_heads']} when qk_bias is true (qk_bias is [2, 1, H, head_dim])",
        )
    if block == "sandwich":  # Huginn-0125
        if f.has("rope_scaling"):
            f.bad("rope_scaling", "is not supported for the Huginn sandwich layout")
        embed_scale = math.sqrt(d)
        init_values = raw.get("init_values")
        stated = init_values.get("embed_scale") if isinstance(init_values, dict) else None
        if stated is not None and not (
            isinstance(stated, (int, float)) and math.isclose(stated, embed_scale, rel_tol=1e-6)
        ):
            f.bad(
                "init_values.embed_scale", f"= {stated!r} contradicts Huginn's sqrt(n_embd)={embed_scale!r}"
            )
        cfg = build(
            where,
            **common,
            rope="interleaved",
            rope_theta=f.num("rope_base"),
            embed_scale=embed_scale,
            ln_f_before_coda=True,
            max_seq_len=f.int("block_size"),
        )
        return cfg, layout
    init_values = raw.get("init_values")
    if not isinstance(init_values, dict) or "embed_scale" not in init_values:
        f.bad("init_values.embed_scale", "is missing (needed by the retrofitted layout)")
    embed_scale = Fields(init_values, f"{where}: init_values").num("embed_scale")
    # Retrofitted configs keep Huginn's rope_base next to the source model's rope_theta; the
    # source model's rope_theta is the one that drives RoPE (docs/checkpoints.md).
    theta = f.num("rope_theta") if f.has("rope_theta") else f.num("rope_base")
    max_len = f.int("max_position_embeddings") if f.has("max_position_embeddings") else f.int("block_size")
    cfg = build(
        where,
        **common,
        rope="half",
        rope_theta=theta,
        rope_scaling=rope_scaling_from(f),
        embed_scale=embed_scale,
        ln_f_before_coda=False,
        max_seq_len=max_len,
    )
    return cfg, layout


def loopcoder_config(
    f: Fields, tie: bool, recurrence: int | None, where: str, name: str | None
) -> ModelConfig:
    """IQuestLoopCoderConfig's fields (docs/checkpoints.md, LoopCoder). head_dim is read, never
    derived: the published modeling uses config.head_dim (vLLM derives hidden_size // heads)."""
    f.require("hidden_act", ("silu",), "LoopCoder's MLP is SwiGLU")
    f.require("attention_bias", (False,), "LoopCoder's attention has no biases")
    f.require("mlp_bias", (False,), "LoopCoder's MLP has no biases")
    return build(
        where,
        **ARCHITECTURES["loopcoder"],
        name=name or LOOPCODER,
        **llama_sizes(f),
        recurrence=recurrence or f.int("loop_num"),
        loop_window_size=f.int("loop_window_size"),
        rope_theta=f.num("rope_theta"),
        rope_scaling=rope_scaling_from(f),
        norm_eps=f.num("rms_norm_eps"),
        max_seq_len=f.int("max_position_embeddings"),
        tie_embeddings=tie,
    )


def published_config(cfg: ModelConfig, layout: str) -> dict:
    """The config.json fields `config_from_published` reads back to `cfg` (up to the state init)."""
    check_layout(cfg, layout)
    scaling = (
        None
        if cfg.rope_scaling is None
        else {
            "rope_type": "llama3",
            "factor": cfg.rope_scaling.factor,
            "low_freq_factor": cfg.rope_scaling.low_freq_factor,
            "high_freq_factor": cfg.rope_scaling.high_freq_factor,
            "original_max_position_embeddings": cfg.rope_scaling.original_max_position_embeddings,
        }
    )
    if layout == LOOPCODER:
        return {
            "architectures": ["IQuestLoopCoderForCausalLM"],
            "model_type": LOOPCODER,
            "auto_map": dict(iquest_config.AUTO_MAP),
            "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.d_model,
            "intermediate_size": cfg.intermediate_size,
            "num_hidden_layers": cfg.n_core,
            "num_attention_heads": cfg.n_heads,
            "num_key_value_heads": cfg.n_kv_heads,
            "head_dim": cfg.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": cfg.max_seq_len,
            "rms_norm_eps": cfg.norm_eps,
            "rope_theta": cfg.rope_theta,
            "rope_scaling": scaling,
            "attention_bias": False,
            "mlp_bias": False,
            "tie_word_embeddings": cfg.tie_embeddings,
            "loop_num": cfg.recurrence,
            "loop_window_size": cfg.loop_window_size,
        }
    if layout == "ouro":
        return {
            "architectures": ["OuroForCausalLM"],
            "model_type": "ouro",
            "hidden_size": cfg.d_model,
            "num_hidden_layers": cfg.n_core,
            "num_attention_heads": cfg.n_heads,
            "num_key_value_heads": cfg.n_kv_heads,
            "head_dim": cfg.head_dim,
            "intermediate_size": cfg.intermediate_size,
            "hidden_act": "silu",
            "vocab_size": cfg.vocab_size,
            "rope_theta": cfg.rope_theta,
            "rope_scaling": scaling,
            "rms_norm_eps": cfg.norm_eps,
            "max_position_embeddings": cfg.max_seq_len,
            "tie_word_embeddings": cfg.tie_embeddings,
            "total_ut_steps": cfg.recurrence,
            "early_exit_threshold": 1.0,
        }
    out = {
        "architectures": ["RavenForCausalLM"],
        "model_type": "huginn_raven",
        "n_embd": cfg.d_model,
        "n_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.intermediate_size,
        "vocab_size": cfg.vocab_size,
        "padded_vocab_size": cfg.vocab_size,
        "n_layers": cfg.n_prelude + cfg.n_core + cfg.n_coda,
        "n_layers_in_prelude": cfg.n_prelude,
        "n_layers_in_recurrent_block": cfg.n_core,
        "n_layers_in_coda": cfg.n_coda,
        "norm_eps": cfg.norm_eps,
        "bias": False,
        "qk_bias": cfg.qk_bias,
        "tie_embeddings": cfg.tie_embeddings,
        "mean_recurrence": cfg.recurrence,
        "injection_type": "linear",
        "block_size": cfg.max_seq_len,
        "init_values": {"embed_scale": cfg.embed_scale},
    }
    if layout == "huginn":
        out["rope_base"] = cfg.rope_theta
    else:
        out.update(
            rope_base=cfg.rope_theta,
            rope_theta=cfg.rope_theta,
            rope_scaling=scaling,
            max_position_embeddings=cfg.max_seq_len,
        )
    return out


def check_layout(cfg: ModelConfig, layout: str) -> None:
    """`cfg` must be expressible in `layout`, or writing it would change the model."""
    if layout not in LAYOUTS:
        raise LoopcertError(f"unknown layout {layout!r}; choose one of {list(LAYOUTS)}")
    block = BLOCK_OF_LAYOUT[layout]
    checks = [("block", cfg.block == block, f"layout {layout!r} holds block={block!r}")]
    loop = cfg.family == "loopcoder"
    checks.append(("family", loop == (layout == LOOPCODER), f"only LoopCoder is written as {LOOPCODER!r}"))
    if layout == LOOPCODER:
        pass  # ModelConfig already holds LoopCoder to its one layout
    elif layout == "ouro":
        checks += [
            ("rope", cfg.rope == "half", "Ouro uses rotate-half RoPE"),
            ("embed_scale", cfg.embed_scale == 1.0, "Ouro does not scale embeddings"),
        ]
    elif layout == "huginn":
        checks += [
            ("rope", cfg.rope == "interleaved", "Huginn uses interleaved RoPE"),
            ("rope_scaling", cfg.rope_scaling is None, "Huginn has no RoPE scaling"),
            (
                "embed_scale",
                cfg.embed_scale == math.sqrt(cfg.d_model),
                "Huginn scales embeddings by sqrt(d_model)",
            ),
            ("ln_f_before_coda", cfg.ln_f_before_coda, "Huginn applies ln_f before the coda"),
        ]
    else:
        checks += [
            ("rope", cfg.rope == "half", "retrofitted models use rotate-half RoPE"),
            ("ln_f_before_coda", not cfg.ln_f_before_coda, "retrofitted models have no ln_f before the coda"),
        ]
    if cfg.qk_bias:
        checks.append(
            (
                "n_kv_heads",
                cfg.n_kv_heads == cfg.n_heads,
                "the published qk_bias [2, 1, H, D] needs n_kv_heads == n_heads",
            )
        )
    for name, ok, why in checks:
        if not ok:
            raise LoopcertError(
                f"ModelConfig.{name}={getattr(cfg, name)!r} cannot be written in the {layout!r} layout: {why}"
            )


# -- the key map ----------------------------------------------------------------------------
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


# -- the files ------------------------------------------------------------------------------
@dataclass
class Stored:
    """What a folder's safetensors hold, from their headers alone (nothing loaded)."""

    file_of: dict[str, Path]  # key -> the file holding it
    dtype: dict[str, str]  # key -> safetensors dtype name ("BF16", "F32", "I64", ...)
    shape: dict[str, tuple[int, ...]]

    @property
    def files(self) -> list[Path]:
        return sorted(set(self.file_of.values()))


def read_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """key -> (dtype name, shape) from a safetensors header: 8-byte length, then JSON."""
    try:
        with open(path, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            if not 2 <= n <= 100_000_000:
                raise ValueError(f"implausible header length {n}")
            header = json.loads(fh.read(n))
        header.pop("__metadata__", None)
        return {k: (str(v["dtype"]), tuple(int(s) for s in v["shape"])) for k, v in header.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise LoopcertError(f"{path}: not a readable safetensors file ({e})") from None


def scan(folder: Path) -> Stored:
    single, index = folder / SINGLE, folder / INDEX
    where: dict[str, Path] = {}
    if single.is_file():
        files = {single: None}
    elif index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (ValueError, KeyError, TypeError) as e:
            raise LoopcertError(f"{index}: not a valid safetensors index ({e!r})") from None
        if not isinstance(weight_map, dict) or not weight_map:
            raise LoopcertError(f"{index}: 'weight_map' must be a non-empty object")
        files = {}
        for key, name in weight_map.items():
            if not isinstance(name, str) or Path(name).name != name or not name.endswith(".safetensors"):
                raise LoopcertError(
                    f"{index}: tensor {key!r} maps to {name!r}, not a .safetensors file name in this folder"
                )
            path = folder / name
            if not path.is_file():
                raise LoopcertError(f"{index}: shard {name!r} (holding {key!r}) is missing")
            files.setdefault(path, set()).add(key)
    else:
        raise LoopcertError(f"{folder}: no {SINGLE} or {INDEX}")
    dtype, shape = {}, {}
    for path, listed in files.items():
        header = read_header(path)
        if listed is not None:
            absent, unlisted = sorted(listed - set(header)), sorted(set(header) - listed)
            if absent:
                raise LoopcertError(
                    f"{index}: tensor {absent[0]!r} is listed in shard {path.name!r} but not stored there"
                )
            if unlisted:
                raise LoopcertError(f"{path}: tensor {unlisted[0]!r} is not listed in {INDEX}")
        for key, (dt, sh) in header.items():
            where[key], dtype[key], shape[key] = path, dt, sh
    return Stored(where, dtype, shape)


def check_stored(entries: list[Entry], stored: Stored, cfg: ModelConfig, layout: str) -> None:
    """Missing, unexpected, mis-shaped or non-float tensors, each named."""
    expected = {e.published: e for e in entries}
    present = {k for k in stored.file_of if not SKIPPED.search(k)}
    if cfg.tie_embeddings and "lm_head.weight" in present:
        present.discard("lm_head.weight")  # tied: checked equal to the embedding when loaded
    missing = sorted(set(expected) - present)
    unexpected = sorted(present - set(expected))
    what = f"{stored.files[0].parent} ({layout} layout)"
    if missing:
        hint = " (the config does not tie the head to the embedding)" if missing == ["lm_head.weight"] else ""
        raise LoopcertError(
            f"{what}: missing tensor(s) {missing[:8]}{' ...' if len(missing) > 8 else ''}{hint}"
        )
    if unexpected:
        raise LoopcertError(
            f"{what}: unexpected tensor(s) {unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}"
        )
    for k in sorted(expected):
        if stored.shape[k] != expected[k].shape:
            raise LoopcertError(
                f"{what}: tensor {k!r} has shape {list(stored.shape[k])}, expected "
                f"{list(expected[k].shape)} from config.json"
            )
    for k in sorted(present | ({"lm_head.weight"} & set(stored.file_of))):
        if stored.dtype[k] not in FLOAT_DTYPES:
            raise LoopcertError(
                f"{what}: tensor {k!r} has dtype {stored.dtype[k]}; weights must be "
                f"one of {sorted(FLOAT_DTYPES)}"
            )
    if cfg.tie_embeddings and "lm_head.weight" in stored.file_of:
        emb = entries[0].published
        if stored.shape["lm_head.weight"] != stored.shape[emb]:
            raise LoopcertError(
                f"{what}: tied lm_head.weight has shape "
                f"{list(stored.shape['lm_head.weight'])}, {emb!r} has "
                f"{list(stored.shape[emb])}"
            )


def check_finite(key: str, t: torch.Tensor, source) -> None:
    """A NaN or infinite weight would decode garbage without a word: refuse it, naming it."""
    if t.dtype.is_floating_point and not bool(torch.isfinite(t).all()):
        bad = (~torch.isfinite(t)).nonzero()[0].tolist()
        raise LoopcertError(
            f"{source}: tensor {key!r} holds a non-finite value ({float(t[tuple(bad)])} at index {bad})"
        )


def check_representable(key: str, cast: torch.Tensor, dtype: torch.dtype, source) -> None:
    """A finite weight too large for the requested dtype (1e6 in float16) becomes inf."""
    if not bool(torch.isfinite(cast).all()):
        raise LoopcertError(
            f"{source}: tensor {key!r} overflows {dtype_name(dtype)} "
            "(a finite weight beyond its range); load it in a wider dtype"
        )


def check_header(
    model_shapes: dict[str, tuple[int, ...]], header: dict[str, tuple[str, tuple]], source
) -> None:
    """Missing, unexpected, mis-shaped or non-float tensors, named from the safetensors header,
    before anything the size of the config is allocated (config.json may claim absurd sizes)."""
    missing = sorted(set(model_shapes) - set(header))
    unexpected = sorted(set(header) - set(model_shapes))
    if missing:
        raise LoopcertError(f"{source}: missing tensor(s) {missing}")
    if unexpected:
        raise LoopcertError(f"{source}: unexpected tensor(s) {unexpected}")
    for k, (dt, shape) in sorted(header.items()):
        if tuple(shape) != tuple(model_shapes[k]):
            raise LoopcertError(
                f"{source}: tensor {k!r} has shape {tuple(shape)}, expected {tuple(model_shapes[k])}"
            )
        if dt not in FLOAT_DTYPES:
            raise LoopcertError(f"{source}: tensor {k!r} has non-float dtype {dt}")


class Reader:
    """Tensors by key from the folder's files, each file opened once (no pickle anywhere)."""

    def __init__(self, stored: Stored):
        self.stored = stored
        self.stack = contextlib.ExitStack()
        self.handles: dict[Path, object] = {}

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc) -> None:
        self.stack.close()

    def __call__(self, key: str) -> torch.Tensor:
        path = self.stored.file_of[key]
        try:
            if path not in self.handles:
                self.handles[path] = self.stack.enter_context(
                    safe_open(str(path), framework="pt", device="cpu")
                )
            return self.handles[path].get_tensor(key)
        except (SafetensorError, OSError, ValueError, RuntimeError) as e:
            raise LoopcertError(f"{path}: cannot read tensor {key!r} ({e})") from None


# -- the public entry points ------------------------------------------------------------------
def load_published(folder, raw: dict, dtype: torch.dtype, *, recurrence: int | None = None) -> LoopedLM:
    """A LoopedLM from a published checkpoint folder; `recurrence` overrides the config's R.

    The model gets `tokenizer` (refdec.tokenizer.Tokenizer, or None without tokenizer.json),
    `eos_token_ids` (tuple of the config's eos_token_id values) and `eos_token_id` (the first
    of them, or None).
    """
    folder = Path(folder)
    stored = scan(folder)
    cfg, layout = config_from_published(
        raw, stored.file_of, recurrence=recurrence, where=str(folder / "config.json"), name=folder.name
    )
    model = meta_model(cfg)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    entries = key_map(cfg, layout, shapes)
    check_stored(entries, stored, cfg, layout)
    state: dict[str, torch.Tensor] = {}
    with Reader(stored) as read:
        for e in entries:
            # copy=True: pieces of a fused tensor must not share storage with each other.
            stored_t = read(e.published)
            check_finite(e.published, stored_t, folder)
            pieces = {k: v.to(dtype=dtype, copy=True) for k, v in split(e, stored_t, shapes).items()}
            for v in pieces.values():
                check_representable(e.published, v, dtype, folder)
            state.update(pieces)
        if cfg.tie_embeddings and "lm_head.weight" in stored.file_of:
            if not torch.equal(read("lm_head.weight"), read(entries[0].published)):
                raise LoopcertError(
                    f"{folder}: lm_head.weight differs from {entries[0].published!r} but the config ties them"
                )
    model.load_state_dict(state, strict=True, assign=True)
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    assert not left, f"LoopedLM tensors outside its state_dict were never materialised: {left}"
    model.eval()
    attach_extras(model, folder, raw)
    return model


def attach_extras(model: LoopedLM, folder: Path, raw: dict) -> None:
    from refdec.tokenizer import load_tokenizer

    model.tokenizer = load_tokenizer(folder)
    model.eos_token_ids = eos_ids(folder, raw)
    model.eos_token_id = model.eos_token_ids[0] if model.eos_token_ids else None


def eos_ids(folder: Path, raw: dict) -> tuple[int, ...]:
    """config.json's eos_token_id (an int or a list), else generation_config.json's."""
    source, v = "config.json", raw.get("eos_token_id")
    gen = folder / "generation_config.json"
    if v is None and gen.is_file():
        try:
            source, v = gen.name, json.loads(gen.read_text()).get("eos_token_id")
        except (ValueError, AttributeError) as e:
            raise LoopcertError(f"{gen}: not valid JSON ({e})") from None
    if v is None:
        return ()
    ids = v if isinstance(v, list) else [v]
    if not ids or any(not is_int(i, 0) for i in ids):
        raise LoopcertError(
            f"{folder / source}: eos_token_id must be an integer >= 0 or a non-empty list of them, got {v!r}"
        )
    return tuple(ids)


def load_checkpoint(folder, *, dtype=torch.float32, recurrence: int | None = None) -> LoopedLM:
    """refdec.load_model for a published folder, with R overridable (retrofitted configs'
    mean_recurrence may be stale: docs/checkpoints.md)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise LoopcertError(f"{folder}: not a folder")
    refuse_pickles(folder)
    raw = read_config(folder)
    if isinstance(raw, dict) and raw.get("format") == FORMAT:
        raise LoopcertError(f"{folder}: a loopcert folder (R is in its config.json); use refdec.load_model")
    return load_published(folder, raw, parse_dtype(dtype), recurrence=recurrence)


def write_published(
    model: LoopedLM, folder, layout: str | None = None, shard_size: int | None = None, *, dtype=None
) -> Path:
    """Write config.json and safetensors in a published layout (default: the one matching the
    model's block). `shard_size` (bytes) splits the tensors into model-0000i-of-0000n.safetensors
    shards with a model.safetensors.index.json. The state init (init_state, state_seed,
    init_scale) and `name` have no published field; loading gives zeros."""
    cfg = model.cfg
    layout = layout or default_layout(cfg)
    raw = published_config(cfg, layout)
    folder = Path(folder)
    for name in (SINGLE, INDEX):
        if (folder / name).exists():
            raise LoopcertError(f"{folder / name} exists; write_published writes into a fresh folder")
    if shard_size is not None and not is_int(shard_size, 1):
        raise LoopcertError(f"shard_size must be a positive number of bytes, got {shard_size!r}")
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    cast = (lambda t: t) if dtype is None else (lambda t: t.to(parse_dtype(dtype)))
    tensors = {e.published: cast(join(e, state)).contiguous() for e in key_map(cfg, layout, shapes)}
    eos = getattr(model, "eos_token_ids", ())
    if eos:
        raw["eos_token_id"] = eos[0] if len(eos) == 1 else list(eos)
    meta = {"format": "pt"}
    if shard_size is None:
        write_atomic(folder / SINGLE, lambda p: save_file(tensors, p, metadata=meta))
    else:
        shards: list[dict[str, torch.Tensor]] = [{}]
        size = 0
        for k, t in tensors.items():
            nbytes = t.numel() * t.element_size()
            if shards[-1] and size + nbytes > shard_size:
                shards.append({})
                size = 0
            shards[-1][k] = t
            size += nbytes
        n = len(shards)
        weight_map = {}
        for i, shard in enumerate(shards, 1):
            name = f"model-{i:05d}-of-{n:05d}.safetensors"
            write_atomic(folder / name, lambda p, s=shard: save_file(s, p, metadata=meta))
            weight_map.update(dict.fromkeys(shard, name))
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        write_atomic(folder / INDEX, lambda p: Path(p).write_text(json.dumps(index, indent=2) + "\n"))
    if layout == LOOPCODER:  # the AutoConfig class config.json's auto_map names (vLLM --trust-remote-code)
        write_atomic(folder / iquest_config.FILE, lambda p: Path(p).write_text(iquest_config.SOURCE))
    write_atomic(folder / "config.json", lambda p: Path(p).write_text(json.dumps(raw, indent=2) + "\n"))
    return folder


def default_layout(cfg: ModelConfig) -> str:
    """The published layout a model is written in by default: its family's, else its block's."""
    return LOOPCODER if cfg.family == "loopcoder" else LAYOUT_OF_BLOCK[cfg.block]


def describe(name_or_path) -> dict:
    """What a preset or model folder is recognised as, from config.json and the safetensors
    headers (no weights loaded); the folder is checked as strictly as loading it would be."""
    name = str(name_or_path)
    folder = Path(name_or_path)
    stored_dtypes: dict[str, int] = {}
    tokenizer = None
    if name in PRESETS:
        cfg, source, files = PRESETS[name], "preset (random weights)", 0
    elif folder.is_dir():
        refuse_pickles(folder)
        raw = read_config(folder)
        if isinstance(raw, dict) and raw.get("format") == FORMAT:
            try:
                cfg = ModelConfig.from_dict({k: v for k, v in raw.items() if k != "format"})
            except LoopcertError as e:  # name the file the bad field is in
                raise LoopcertError(f"{folder / 'config.json'}: {e}") from None
            source = "loopcert"
            path = folder / SINGLE
            if not path.is_file():
                raise LoopcertError(f"{folder}: no {SINGLE}")
            header = read_header(path)
            stored = Stored(
                dict.fromkeys(header, path),
                {k: v[0] for k, v in header.items()},
                {k: v[1] for k, v in header.items()},
            )
        else:
            stored = scan(folder)
            cfg, source = config_from_published(
                raw, stored.file_of, where=str(folder / "config.json"), name=folder.name
            )
            shapes = {k: tuple(v.shape) for k, v in meta_model(cfg).state_dict().items()}
            check_stored(key_map(cfg, source, shapes), stored, cfg, source)
        for dt in stored.dtype.values():
            stored_dtypes[dt] = stored_dtypes.get(dt, 0) + 1
        files = len(stored.files)
        tokenizer = (folder / "tokenizer.json").is_file()
    else:
        raise LoopcertError(f"{name!r} is neither a preset ({sorted(PRESETS)}) nor a model folder")
    return {
        "source": source,
        "family": cfg.family,
        "block": cfg.block,
        "recurrence": cfg.recurrence,
        "layers": f"{cfg.n_prelude} prelude / {cfg.n_core} core / {cfg.n_coda} coda",
        "d_model": cfg.d_model,
        "n_heads": cfg.n_heads,
        "n_kv_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.intermediate_size,
        "vocab_size": cfg.vocab_size,
        "max_seq_len": cfg.max_seq_len,
        "rope": cfg.rope,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": cfg.rope_scaling,
        "qk_bias": cfg.qk_bias,
        "qk_norm": cfg.qk_norm,
        "embed_scale": cfg.embed_scale,
        "tie_embeddings": cfg.tie_embeddings,
        "ln_f_before_coda": cfg.ln_f_before_coda,
        "early_exit_gate": cfg.early_exit_gate,
        "init_state": cfg.init_state,
        "loop_window_size": cfg.loop_window_size,  # LoopCoder's local window (0: not LoopCoder)
        "parameters": sum(p.numel() for p in meta_model(cfg).parameters()),
        "stored_dtypes": stored_dtypes,
        "files": files,
        "tokenizer": tokenizer,
    }
