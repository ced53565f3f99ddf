"""config.json of the published checkpoints: read strictly into a ModelConfig (and its layout),
written back from one. The layouts and what tells them apart are in refdec/checkpoints.py's
docstring; docs/checkpoints.md lists what is taken from the published code.

Config fields the architecture needs are read from config.json and never defaulted: upstream
config classes carry defaults that do not match the checkpoints (docs/checkpoints.md, Ouro).
"""

from __future__ import annotations

import json
import math
import re

from refdec import iquest_config, ouro_code
from refdec.config import ARCHITECTURES, ModelConfig, RopeScaling
from refdec.errors import LoopcertError
from refdec.validate import check_int, is_int, is_number

LOOPCODER = "iquestloopcoder"  # LoopCoder's layout and model_type
NANBEIGE = "nanbeige"  # Nanbeige4.2's layout and model_type
LAYOUTS = ("ouro", "huginn", "retro-llama", "retro-olmo", LOOPCODER, NANBEIGE)
LAYOUT_OF_BLOCK = {"ouro": "ouro", "sandwich": "huginn", "prenorm": "retro-llama", "postnorm": "retro-olmo"}
BLOCK_OF_LAYOUT = {layout: block for block, layout in LAYOUT_OF_BLOCK.items()} | {
    LOOPCODER: "prenorm",
    NANBEIGE: "prenorm",
}
MODEL_TYPES = ("ouro", "huginn_raven", LOOPCODER, NANBEIGE)
LOOPED_FAMILIES = {LOOPCODER: "loopcoder", NANBEIGE: "nanbeige"}  # layouts that hold one family each
# Nanbeige config.json flags that no released checkpoint enables and loopcert does not implement
# (the published modeling code has them; mlx-lm 0.32.2 refuses the same ones): any truthy value is
# refused by name, so a checkpoint that enables one never runs as a different model.
NANBEIGE_UNSUPPORTED = (
    "enable_double_loop_split",
    "loop_share_kv",
    "enable_depth_attention",
    "enable_hyper_connection",
    "enable_mhc",
    "enable_h_res_identity",
    "loop_middle_layers",
    "qk_layernorm",
    "emb_neighbor_num",
    "insert_ngram_layer_idx",
    "ngram_insert_all_layers",
)


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
    if model_type == NANBEIGE:
        return nanbeige_config(f, tie, recurrence, where, name), NANBEIGE
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


def nanbeige_loops(f: Fields) -> int:
    """The loop count of a Nanbeige config.json (docs/checkpoints.md, Nanbeige, "The loop count").

    `num_loops` is the count the published modeling code and llama.cpp run (GGUF
    `nanbeige.num_loops`). `loop_loss_weights`, a training field, holds one loss weight per loop
    after the first, and mlx-lm 0.32.2 runs len(loop_loss_weights) + 1 loops when the list is not
    empty. refdec runs num_loops; a non-empty list must be num_loops - 1 long, so every engine runs
    the same count, and any other length is refused naming both counts."""
    loops = f.int("num_loops")
    weights = f.raw.get("loop_loss_weights")
    if weights is None or weights == []:
        return loops
    if not isinstance(weights, list) or not all(is_number(w, 0) for w in weights):
        f.bad("loop_loss_weights", f"must be a list of finite numbers >= 0, got {weights!r}")
    if len(weights) != loops - 1:
        f.bad(
            "loop_loss_weights",
            f"has {len(weights)} entries but num_loops = {loops}: engines that read it (mlx-lm) would run "
            f"{len(weights) + 1} loops, engines that read num_loops (llama.cpp) {loops}; it must hold "
            "num_loops - 1 weights (one per loop after the first)",
        )
    return loops


def nanbeige_config(
    f: Fields, tie: bool, recurrence: int | None, where: str, name: str | None
) -> ModelConfig:
    """NanbeigeConfig's fields (docs/checkpoints.md, Nanbeige): Llama's plus num_loops and
    skip_loop_final_norm; the flags no released checkpoint enables are refused by name."""
    for flag in NANBEIGE_UNSUPPORTED:
        v = f.raw.get(flag)
        if v not in (None, False, 0, [], ""):
            f.bad(
                flag,
                f"= {v!r} is not supported (no released Nanbeige checkpoint enables it; loopcert "
                "implements the plain looped stack only)",
            )
    f.require("hidden_act", ("silu",), "Nanbeige's MLP is SwiGLU")
    f.require("attention_bias", (False,), "Nanbeige's released attention has no biases")
    f.require("mlp_bias", (False,), "Nanbeige's released MLP has no biases")
    f.require("use_sliding_window", (False,), "sliding-window attention")
    types = f.raw.get("layer_types")
    if types is not None and (not isinstance(types, list) or any(t != "full_attention" for t in types)):
        f.bad("layer_types", f"= {types!r} is not supported (only full_attention layers)")
    skip = f.flag("skip_loop_final_norm") if f.has("skip_loop_final_norm") else False
    return build(
        where,
        **ARCHITECTURES["nanbeige"],
        name=name or NANBEIGE,
        **llama_sizes(f),
        recurrence=recurrence or nanbeige_loops(f),
        skip_loop_final_norm=skip,
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
    if layout == NANBEIGE:
        return {
            "architectures": ["NanbeigeForCausalLM"],
            "model_type": NANBEIGE,
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
            "num_loops": cfg.recurrence,
            "skip_loop_final_norm": cfg.skip_loop_final_norm,
        }
    if layout == "ouro":
        return {
            "architectures": ["OuroForCausalLM"],
            "model_type": "ouro",
            "auto_map": dict(ouro_code.AUTO_MAP),
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
    for looped_layout, family in LOOPED_FAMILIES.items():
        own = cfg.family == family
        checks.append(
            ("family", own == (layout == looped_layout), f"only {family} is written as {looped_layout!r}")
        )
    if layout in LOOPED_FAMILIES:
        pass  # ModelConfig already holds LoopCoder and Nanbeige to their one layout
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


def default_layout(cfg: ModelConfig) -> str:
    """The published layout a model is written in by default: its family's, else its block's."""
    by_family = {family: layout for layout, family in LOOPED_FAMILIES.items()}
    return by_family.get(cfg.family) or LAYOUT_OF_BLOCK[cfg.block]
