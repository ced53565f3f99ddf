"""Model configuration for the looped families (docs/design.md section 2, docs/checkpoints.md).

One frozen dataclass describes Ouro, Huginn/Raven, the retrofitted-recurrence
Llama / OLMo-2 models, LoopCoder (IQuest-Coder-V1-Loop) and Nanbeige4.2. Decode settings live elsewhere
(refdec.sampling, fastdec.Decoder).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from refdec.errors import LoopcertError
from refdec.validate import is_int, is_number

FAMILIES = ("ouro", "raven", "loopcoder", "nanbeige")
# Block layouts (docs/checkpoints.md):
#   ouro      x + n2(attn(n1(x)));  h + n4(mlp(n3(h)))          norms before the residual add
#   sandwich  n2(attn(n1(x)) + x);  n4(mlp(n3(x)) + x)          Huginn: norms after the add
#   prenorm   x + attn(n1(x));      x + mlp(n2(x))              Llama / TinyLlama
#   postnorm  x + n1(attn(x));      x + n2(mlp(x)), q/k norms   OLMo-2
BLOCKS = ("ouro", "sandwich", "prenorm", "postnorm")
ROPES = ("interleaved", "half")  # pairs (x[2i], x[2i+1]) vs rotate-half (x[i], x[i+D/2])
INIT_STATES = ("zeros", "seeded")


@dataclass(frozen=True)
class RopeScaling:
    """Llama-3 frequency scaling (rope_type "llama3")."""

    factor: float = 32.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


# Far above any published looped model (Huginn: d 5280, vocab 65536, R ~ 32; Ouro: 24 layers), far
# below sizes that would hang building the modules or overflow torch's size arithmetic.
MAX_SIZES = {
    "vocab_size": 2**22,
    "d_model": 2**17,
    "n_heads": 2**12,
    "n_kv_heads": 2**12,
    "head_dim": 2**12,
    "intermediate_size": 2**19,
    "n_core": 2**10,
    "n_prelude": 2**10,
    "n_coda": 2**10,
    "recurrence": 2**14,
}


@dataclass(frozen=True)
class ModelConfig:
    family: str  # "ouro" | "raven" | "loopcoder" | "nanbeige"
    vocab_size: int
    d_model: int
    n_heads: int
    n_kv_heads: int  # < n_heads is grouped-query attention
    head_dim: int
    intermediate_size: int  # gated SiLU MLP hidden width
    n_core: int  # layers in the shared recurrent block (Ouro: the whole stack)
    recurrence: int  # R: the default (target) depth; any depth >= 1 may still be run
    n_prelude: int = 0  # Raven only
    n_coda: int = 0  # Raven only
    block: str = "sandwich"
    rope: str = "interleaved"
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    qk_bias: bool = False  # Huginn: a learned [2, 1, H, D] bias added to q, k before RoPE
    qk_norm: bool = False  # OLMo-2: RMSNorm over the full q / k projections
    tie_embeddings: bool = False
    embed_scale: float = 1.0  # Huginn multiplies embeddings by sqrt(d_model)
    ln_f_before_coda: bool = False  # Huginn applies ln_f before the coda and again after it
    norm_eps: float = 1e-6
    max_seq_len: int = 2048  # RoPE table length / context limit
    init_state: str = "zeros"  # Raven: "zeros" or "seeded" = f(state_seed, absolute position)
    init_scale: float = 1.0  # seeded state: std sqrt(2/5) * init_scale, clipped at 3 std
    state_seed: int = 0
    early_exit_gate: bool = False  # Ouro's gate: loaded, never used at fixed depth
    # LoopCoder: pass r >= 2 mixes attention over pass 1's keys (causal) with attention over its
    # own pass's keys at positions t-W+1..t, W = loop_window_size (docs/design.md section 2);
    # 0 for the other families
    loop_window_size: int = 0
    # Nanbeige: the final norm runs after every loop (the normed state is the next loop's input and
    # the readout of that depth) unless this is set; then it runs once, in the readout
    skip_loop_final_norm: bool = False
    name: str = "custom"

    def __post_init__(self):
        def bad(field_name, why):
            raise LoopcertError(f"ModelConfig.{field_name}={getattr(self, field_name)!r}: {why}")

        if self.family not in FAMILIES:
            bad("family", f"must be one of {FAMILIES}")
        if self.block not in BLOCKS:
            bad("block", f"must be one of {BLOCKS}")
        if self.rope not in ROPES:
            bad("rope", f"must be one of {ROPES}")
        if self.init_state not in INIT_STATES:
            bad("init_state", f"must be one of {INIT_STATES}")
        for name in (
            "vocab_size",
            "d_model",
            "n_heads",
            "n_kv_heads",
            "head_dim",
            "intermediate_size",
            "n_core",
            "recurrence",
            "max_seq_len",
        ):
            v = getattr(self, name)
            if not is_int(v, 1):
                bad(name, "must be an integer >= 1")
        for name in ("n_prelude", "n_coda", "state_seed", "loop_window_size"):
            v = getattr(self, name)
            if not is_int(v, 0):
                bad(name, "must be an integer >= 0")
        for name, most in MAX_SIZES.items():
            if getattr(self, name) > most:  # a corrupt config.json, not a model: refuse before allocating
                bad(name, f"must be <= {most}")
        if self.state_seed >= 2**12:
            bad("state_seed", "must be < 4096 (it is packed with the position into 32 bits)")
        if self.max_seq_len > 2**20:
            bad("max_seq_len", "must be <= 2**20")
        if self.n_heads % self.n_kv_heads:
            bad("n_kv_heads", f"must divide n_heads={self.n_heads}")
        if self.head_dim % 2:
            bad("head_dim", "must be even (RoPE rotates pairs)")
        for name in ("rope_theta", "norm_eps", "embed_scale"):
            if not is_number(getattr(self, name), 0, low_open=True):
                bad(name, "must be a finite number > 0")
        if not is_number(self.init_scale, 0):
            bad("init_scale", "must be a finite number >= 0")
        if self.family == "loopcoder":
            self._check_loopcoder(bad)
        elif self.loop_window_size:
            bad("loop_window_size", "only LoopCoder has a local attention window: must be 0")
        if not isinstance(self.skip_loop_final_norm, bool):
            bad("skip_loop_final_norm", "must be True or False")
        if self.family == "nanbeige":
            self._check_llama_loop(bad, "Nanbeige")
        elif self.skip_loop_final_norm:
            bad("skip_loop_final_norm", "only Nanbeige has the flag: must be False")
        if self.family == "ouro":
            if self.n_prelude or self.n_coda:
                bad("n_prelude" if self.n_prelude else "n_coda", "Ouro loops the whole stack: must be 0")
            if self.block != "ouro":
                bad("block", "the ouro family uses block='ouro'")
            if self.ln_f_before_coda:
                bad("ln_f_before_coda", "Ouro has no coda")
        elif self.family == "raven":
            if self.block == "ouro":
                bad("block", "block='ouro' belongs to the ouro family")
            if self.early_exit_gate:
                bad("early_exit_gate", "only Ouro has an early-exit gate")
        if self.qk_norm and self.block != "postnorm":
            bad("qk_norm", "q/k norms belong to the OLMo-2 post-norm block")
        if self.block == "postnorm" and not self.qk_norm:
            bad("qk_norm", "the OLMo-2 post-norm block has q/k norms")
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, RopeScaling):
            bad("rope_scaling", "must be a RopeScaling or None")

    def _check_loopcoder(self, bad) -> None:
        """LoopCoder is a Llama stack looped whole (docs/checkpoints.md, LoopCoder)."""
        if self.loop_window_size < 1:
            bad("loop_window_size", "LoopCoder's local attention window must be an integer >= 1")
        if self.loop_window_size > self.max_seq_len:
            bad("loop_window_size", f"must be <= max_seq_len={self.max_seq_len}")
        self._check_llama_loop(bad, "LoopCoder")

    def _check_llama_loop(self, bad, who: str) -> None:
        """LoopCoder and Nanbeige loop a whole Llama stack (docs/checkpoints.md)."""
        fixed = (
            ("block", "prenorm", f"{who}'s layers are Llama pre-norm blocks"),
            ("rope", "half", f"{who} uses rotate-half RoPE"),
            ("n_prelude", 0, f"{who} loops the whole stack"),
            ("n_coda", 0, f"{who} loops the whole stack"),
            ("qk_bias", False, f"{who}'s attention has no biases"),
            ("qk_norm", False, f"{who} has no q/k norms"),
            ("ln_f_before_coda", False, f"{who} has no coda"),
            ("early_exit_gate", False, "only Ouro has an early-exit gate"),
            ("embed_scale", 1.0, f"{who} does not scale its embeddings"),
            ("init_state", "zeros", f"{who}'s h(0) is the embedding (the field is unused)"),
        )
        for name, want, why in fixed:
            if getattr(self, name) != want:
                bad(name, f"must be {want!r}: {why}")

    @property
    def n_norms_per_block(self) -> int:
        return 4 if self.block in ("ouro", "sandwich") else 2

    def replace(self, **changes) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise LoopcertError(f"unknown ModelConfig field(s) {unknown}")
        missing = sorted(
            f.name for f in dataclasses.fields(cls) if f.name not in d and f.default is dataclasses.MISSING
        )
        if missing:
            raise LoopcertError(f"missing ModelConfig field(s) {missing}")
        d = dict(d)
        if isinstance(d.get("rope_scaling"), dict):
            try:
                d["rope_scaling"] = RopeScaling(**d["rope_scaling"])
            except TypeError as e:
                raise LoopcertError(f"bad rope_scaling {d['rope_scaling']!r}: {e}") from None
        try:
            return cls(**d)
        except TypeError as e:
            raise LoopcertError(f"bad ModelConfig: {e}") from None


# The fields each architecture fixes (docs/checkpoints.md; "llama" and "olmo" are Llama / TinyLlama and
# OLMo-2 with recurrence retrofitted, Raven-style); a preset adds its sizes.
ARCHITECTURES: dict[str, dict] = {
    "ouro": {"family": "ouro", "block": "ouro", "rope": "half", "early_exit_gate": True},
    "huginn": {
        "family": "raven",
        "block": "sandwich",
        "rope": "interleaved",
        "qk_bias": True,
        "tie_embeddings": True,
        "ln_f_before_coda": True,
    },
    "llama": {"family": "raven", "block": "prenorm", "rope": "half"},
    "olmo": {"family": "raven", "block": "postnorm", "rope": "half", "qk_norm": True},
    "loopcoder": {"family": "loopcoder", "block": "prenorm", "rope": "half"},
    "nanbeige": {"family": "nanbeige", "block": "prenorm", "rope": "half"},
}
# The tiny test models' sizes (vocab 13, width 32: gemma-style); a Raven one adds one prelude
# and one coda block around its core.
TINY_SIZES = {
    "vocab_size": 13,
    "d_model": 32,
    "n_heads": 4,
    "n_kv_heads": 2,
    "head_dim": 8,
    "intermediate_size": 48,
    "n_core": 2,
    "recurrence": 6,
    "max_seq_len": 128,
}


def _preset(name: str, architecture: str, sizes: dict, **changes) -> ModelConfig:
    return ModelConfig(**(ARCHITECTURES[architecture] | sizes | changes), name=name)


def _tiny(name: str, architecture: str, **changes) -> ModelConfig:
    raven = ARCHITECTURES[architecture]["family"] == "raven"
    return _preset(
        name, architecture, TINY_SIZES | ({"n_prelude": 1, "n_coda": 1} if raven else {}), **changes
    )


PRESETS: dict[str, ModelConfig] = {
    c.name: c
    for c in (
        # Tiny test models, one per architecture variant.
        _tiny("tiny-ouro", "ouro", recurrence=4, n_kv_heads=4),
        _tiny("tiny-raven", "huginn", n_kv_heads=4, embed_scale=math.sqrt(32), init_state="seeded"),
        _tiny(
            "tiny-raven-llama",
            "llama",
            rope_theta=500000.0,
            rope_scaling=RopeScaling(original_max_position_embeddings=16),
        ),
        _tiny("tiny-raven-olmo", "olmo", init_state="seeded"),
        # LoopCoder at vLLM's smallest CPU shapes (head_dim >= 64), byte-level vocabulary; a
        # window of 8 so that test prompts (10-40 tokens) run past it
        _preset(
            "tiny-loopcoder",
            "loopcoder",
            {
                "vocab_size": 256,
                "d_model": 128,
                "n_heads": 2,
                "n_kv_heads": 1,
                "head_dim": 64,
                "intermediate_size": 256,
                "n_core": 2,
                "recurrence": 2,
                "max_seq_len": TINY_SIZES["max_seq_len"],
                "loop_window_size": 8,
                "norm_eps": 1e-5,
            },
        ),
        # Nanbeige4.2 in miniature: byte-level vocabulary, two loops (the 3B's num_loops, the only
        # count mlx-lm 0.32.2 runs), heads wider than the model (4 x 32 > 64: the 3B's q/o
        # projections are 3072 <-> 48 x 128 too) and the 3B's RoPE base
        _preset(
            "tiny-nanbeige",
            "nanbeige",
            {
                "vocab_size": 256,
                "d_model": 64,
                "n_heads": 4,
                "n_kv_heads": 2,
                "head_dim": 32,
                "intermediate_size": 128,
                "n_core": 2,
                "recurrence": 2,
                "max_seq_len": TINY_SIZES["max_seq_len"],
                "rope_theta": 7e7,
                "norm_eps": 1e-5,
            },
        ),
        # Published shapes (docs/checkpoints.md), for `inspect` and sizing; weights load from a folder.
        _preset(
            "ouro-1.4b",
            "ouro",
            {
                "vocab_size": 49152,
                "d_model": 2048,
                "n_heads": 16,
                "n_kv_heads": 16,
                "head_dim": 128,
                "intermediate_size": 5632,
                "n_core": 24,
                "recurrence": 4,
                "rope_theta": 1e6,
                "max_seq_len": 65536,
            },
        ),
        _preset(
            "huginn-0125",
            "huginn",
            {
                "vocab_size": 65536,
                "d_model": 5280,
                "n_heads": 55,
                "n_kv_heads": 55,
                "head_dim": 96,
                "intermediate_size": 17920,
                "n_prelude": 2,
                "n_core": 4,
                "n_coda": 2,
                "recurrence": 32,
                "rope_theta": 50000.0,
                "max_seq_len": 4096,
            },
            embed_scale=math.sqrt(5280),  # Huginn scales embeddings by sqrt(d_model)
        ),
    )
}
# The tiny presets of the Ouro and Raven families: what the tests sweep and proofs/run/plan.py's FULL plan
# checks greedily. tiny-loopcoder and tiny-nanbeige stand apart so that adding their families left the
# plans as they were; a plan that sweeps them names them (proofs/run/plan.py, proofs/run/run.py).
TINY_LOOPCODER = "tiny-loopcoder"
TINY_NANBEIGE = "tiny-nanbeige"
TINY_PRESETS = tuple(n for n in PRESETS if n.startswith("tiny-") and n not in (TINY_LOOPCODER, TINY_NANBEIGE))


def get_preset(name: str) -> ModelConfig:
    if name not in PRESETS:
        raise LoopcertError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name]
