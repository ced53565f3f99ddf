"""Published checkpoints (refdec.checkpoints, refdec.tokenizer, `loopcert inspect`).

Each published layout gets a tiny synthetic checkpoint written here by hand with the exact key
names and config.json fields of docs/checkpoints.md (not by refdec's writer), and an oracle forward
written here from docs/checkpoints.md's formulas in plain float64 torch with per-position, per-head loops
and explicit 2x2 RoPE rotations: it shares no code with refdec.layers / refdec.model, and it reads
the published tensors by their published names, so it checks the key map too.
"""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch
from safetensors.torch import save_file

from loopcert.cli import main as cli_main
from refdec import load_model, save_model
from refdec.checkpoints import describe, load_checkpoint, write_published
from refdec.config import PRESETS, TINY_LOOPCODER, TINY_PRESETS, ModelConfig, RopeScaling
from refdec.errors import LoopcertError
from refdec.layers import apply_rope, rope_inv_freq, rope_tables
from refdec.load import exact_fingerprint, model_fingerprint

IDS = [3, 7, 1, 9]
VOCAB = 11


# -- hand-written published checkpoints ------------------------------------------------------
def _randn(g, *shape, scale=1.0):
    return torch.randn(*shape, generator=g, dtype=torch.float64) * scale


def _lin(g, out, inp):
    return _randn(g, out, inp, scale=1 / math.sqrt(inp))


def _norm(g, n):
    return 1.0 + _randn(g, n, scale=0.2)


def ouro_checkpoint(seed=0):
    """Ouro: MHA with head_dim (12) != hidden/heads (8), 2 layers, R = total_ut_steps = 3."""
    g = torch.Generator().manual_seed(seed)
    d, h, hd, i_size, n_layers = 16, 2, 12, 24, 2
    config = {
        "architectures": ["OuroForCausalLM"],
        "auto_map": {"AutoModelForCausalLM": "modeling_ouro.X"},
        "model_type": "ouro",
        "hidden_size": d,
        "num_hidden_layers": n_layers,
        "num_attention_heads": h,
        "num_key_value_heads": h,
        "head_dim": hd,
        "intermediate_size": i_size,
        "hidden_act": "silu",
        "vocab_size": VOCAB,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "total_ut_steps": 3,
        "early_exit_threshold": 1.0,
        "max_position_embeddings": 64,
        "use_sliding_window": False,
        "attention_bias": False,
        "torch_dtype": "float32",
        "bos_token_id": 0,
        "eos_token_id": 2,
    }
    t = {"model.embed_tokens.weight": _randn(g, VOCAB, d)}
    for i in range(n_layers):
        p = f"model.layers.{i}"
        t[f"{p}.self_attn.q_proj.weight"] = _lin(g, h * hd, d)
        t[f"{p}.self_attn.k_proj.weight"] = _lin(g, h * hd, d)
        t[f"{p}.self_attn.v_proj.weight"] = _lin(g, h * hd, d)
        t[f"{p}.self_attn.o_proj.weight"] = _lin(g, d, h * hd)
        t[f"{p}.mlp.gate_proj.weight"] = _lin(g, i_size, d)
        t[f"{p}.mlp.up_proj.weight"] = _lin(g, i_size, d)
        t[f"{p}.mlp.down_proj.weight"] = _lin(g, d, i_size)
        for n in (
            "input_layernorm",
            "input_layernorm_2",
            "post_attention_layernorm",
            "post_attention_layernorm_2",
        ):
            t[f"{p}.{n}.weight"] = _norm(g, d)
    t["model.norm.weight"] = _norm(g, d)
    t["model.early_exit_gate.weight"] = _lin(g, 1, d)
    t["model.early_exit_gate.bias"] = _randn(g, 1)
    t["lm_head.weight"] = _lin(g, VOCAB, d)
    t["model.rotary_emb.inv_freq"] = torch.ones(hd // 2)  # a buffer: skipped
    return config, {k: v.float() for k, v in t.items()}


def raven_checkpoint(layout, seed=0):
    """Huginn (sandwich, qk_bias, tied, bf16, freqs_cis buffer) or a retrofitted variant."""
    g = torch.Generator().manual_seed(seed)
    huginn = layout == "huginn"
    d, h, kv, hd, i_size = (16, 2, 2, 8, 24) if huginn else (32, 4, 2, 8, 40)
    split = {"prelude": 1, "core_block": 2, "coda": 1}
    config = {
        "architectures": ["RavenForCausalLM"],
        "model_type": "huginn_raven",
        "auto_map": {"AutoModelForCausalLM": "raven_modeling_minimal.RavenForCausalLM"},
        "n_embd": d,
        "n_heads": h,
        "num_key_value_heads": kv,
        "head_dim": hd,
        "intermediate_size": i_size,
        "vocab_size": VOCAB,
        "padded_vocab_size": VOCAB,
        "n_layers": 4,
        "n_layers_in_prelude": 1,
        "n_layers_in_recurrent_block": 2,
        "n_layers_in_coda": 1,
        "norm_eps": 1e-6,
        "bias": False,
        "qk_bias": huginn,
        "tie_embeddings": huginn,
        "mean_recurrence": 3,
        "injection_type": "linear",
        "block_size": 64,
        "rope_base": 50000 if huginn else 500000.0,
        "state_init": "like-init",
        "init_values": {"embed_scale": math.sqrt(d) if huginn else 1.5, "std": 0.02},
        "block_class_name": "SandwichBlock",
        "mlp_class_name": "GatedMLP",
        "nonlin_name": "SiLU",
        "torch_dtype": "bfloat16" if huginn else "float32",
        "eos_token_id": [1, 4],
    }
    if layout == "retro-llama":  # TinyLlama-style: rope_theta differs from the stale rope_base
        config.update(
            rope_theta=100.0,
            max_position_embeddings=64,
            rope_scaling={
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
                "rope_type": "llama3",
            },
        )
    n_norms = 4 if huginn else 2
    t = {"transformer.wte.weight": _randn(g, VOCAB, d)}
    for stage, n in split.items():
        for i in range(n):
            p = f"transformer.{stage}.{i}"
            for j in range(1, n_norms + 1):
                t[f"{p}.norm_{j}.weight"] = _norm(g, d)
            t[f"{p}.attn.Wqkv.weight"] = _lin(g, (h + 2 * kv) * hd, d)
            if huginn:
                t[f"{p}.attn.qk_bias"] = _randn(g, 2, 1, h, hd, scale=0.5)
            if layout == "retro-olmo":
                t[f"{p}.attn.q_norm.weight"] = _norm(g, h * hd)
                t[f"{p}.attn.k_norm.weight"] = _norm(g, kv * hd)
            t[f"{p}.attn.proj.weight"] = _lin(g, d, h * hd)
            t[f"{p}.mlp.fc.weight"] = _lin(g, 2 * i_size, d)
            t[f"{p}.mlp.proj.weight"] = _lin(g, d, i_size)
    t["transformer.adapter.weight"] = _lin(g, d, 2 * d)
    t["transformer.ln_f.weight"] = _norm(g, d)
    if huginn:
        t["freqs_cis"] = torch.zeros(64, hd // 2, 2)  # a buffer: recomputed
    else:
        t["lm_head.weight"] = _lin(g, VOCAB, d)
    dtype = torch.bfloat16 if huginn else torch.float32
    return config, {k: v.to(dtype) for k, v in t.items()}


def checkpoint(layout, seed=0):
    return ouro_checkpoint(seed) if layout == "ouro" else raven_checkpoint(layout, seed)


def write(folder, config, tensors, shards=None):
    """config.json + model.safetensors, or `shards` (lists of keys) with an index."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    if shards is None:
        save_file(tensors, str(folder / "model.safetensors"))
    else:
        weight_map = {}
        for i, keys in enumerate(shards, 1):
            name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
            save_file({k: tensors[k] for k in keys}, str(folder / name))
            weight_map.update(dict.fromkeys(keys, name))
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {}, "weight_map": weight_map})
        )
    return folder


LAYOUTS = ("ouro", "huginn", "retro-llama", "retro-olmo")


# -- the oracle (docs/checkpoints.md, float64, no refdec code) -------------------------------------------
def rms(x, w, eps=1e-6):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def inv_freqs(hd, theta, scaling=None):
    """Per-pair inverse frequencies theta^(-2i/hd); Llama-3 scaling one scalar at a time."""
    out = []
    for i in range(hd // 2):
        f = theta ** (-2 * i / hd)
        if scaling:
            wavelen = 2 * math.pi / f
            orig = scaling["original_max_position_embeddings"]
            lo, hi, factor = scaling["low_freq_factor"], scaling["high_freq_factor"], scaling["factor"]
            if wavelen > orig / lo:  # long wavelengths: interpolated by `factor`
                f = f / factor
            elif wavelen >= orig / hi:  # in between: a linear blend of the two
                s = (orig / wavelen - lo) / (hi - lo)
                f = (1 - s) * f / factor + s * f
        out.append(f)
    return out


def rotate(v, pos, freqs, interleaved):
    """v (hd,) rotated by angle pos * f_i in each pair: (2i, 2i+1) or (i, i + hd/2)."""
    out = v.clone()
    half = v.shape[0] // 2
    for i, f in enumerate(freqs):
        a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + half)
        c, s = math.cos(pos * f), math.sin(pos * f)
        out[a] = v[a] * c - v[b] * s
        out[b] = v[a] * s + v[b] * c
    return out


def oracle_attention(x, wq, wk, wv, wo, spec, q_bias=None, k_bias=None, q_norm=None, k_norm=None):
    T = x.shape[0]
    h, kv, hd = spec["h"], spec["kv"], spec["hd"]
    q, k, v = x @ wq.T, x @ wk.T, x @ wv.T
    if q_norm is not None:  # OLMo-2: over the whole projection, before splitting heads
        q, k = rms(q, q_norm, spec["eps"]), rms(k, k_norm, spec["eps"])
    q, k, v = q.reshape(T, h, hd), k.reshape(T, kv, hd), v.reshape(T, kv, hd)
    if q_bias is not None:  # Huginn: before RoPE
        q, k = q + q_bias, k + k_bias
    q = torch.stack(
        [
            torch.stack([rotate(q[t, j], t, spec["freqs"], spec["interleaved"]) for j in range(h)])
            for t in range(T)
        ]
    )
    k = torch.stack(
        [
            torch.stack([rotate(k[t, j], t, spec["freqs"], spec["interleaved"]) for j in range(kv)])
            for t in range(T)
        ]
    )
    out = torch.zeros(T, h, hd, dtype=x.dtype)
    for t in range(T):
        for j in range(h):
            g = j // (h // kv)  # query head j reads key/value head g
            scores = torch.stack([q[t, j] @ k[s, g] for s in range(t + 1)]) / math.sqrt(hd)
            p = torch.exp(scores - scores.max())
            p = p / p.sum()
            out[t, j] = sum(p[s] * v[s, g] for s in range(t + 1))
    return out.reshape(T, h * hd) @ wo.T


def silu(z):
    return z * torch.sigmoid(z)


def oracle_logits(layout, config, tensors, ids, depths):
    """(len(depths), T, V) float64 logits from the published tensors, docs/checkpoints.md by the letter."""
    W = {k: v.double() for k, v in tensors.items()}
    c = config
    if layout == "ouro":
        spec = dict(
            h=c["num_attention_heads"],
            kv=c["num_key_value_heads"],
            hd=c["head_dim"],
            eps=c["rms_norm_eps"],
            interleaved=False,
            freqs=inv_freqs(c["head_dim"], c["rope_theta"]),
        )
        h = W["model.embed_tokens.weight"][ids]
        out = {}
        for t in range(1, max(depths) + 1):
            for i in range(c["num_hidden_layers"]):
                p = f"model.layers.{i}"
                n = lambda name, x: rms(x, W[f"{p}.{name}.weight"], spec["eps"])  # noqa: B023
                a = oracle_attention(
                    n("input_layernorm", h), *(W[f"{p}.self_attn.{m}_proj.weight"] for m in "qkvo"), spec
                )
                h = h + n("input_layernorm_2", a)
                z = n("post_attention_layernorm", h)
                m = (silu(z @ W[f"{p}.mlp.gate_proj.weight"].T) * (z @ W[f"{p}.mlp.up_proj.weight"].T)) @ W[
                    f"{p}.mlp.down_proj.weight"
                ].T
                h = h + n("post_attention_layernorm_2", m)
            h = rms(h, W["model.norm.weight"], spec["eps"])  # the normed state is carried on
            out[t] = h @ W["lm_head.weight"].T
        return torch.stack([out[r] for r in depths])

    huginn = layout == "huginn"
    h_, kv, hd, eps = c["n_heads"], c["num_key_value_heads"], c["head_dim"], c["norm_eps"]
    spec = dict(
        h=h_,
        kv=kv,
        hd=hd,
        eps=eps,
        interleaved=huginn,
        freqs=inv_freqs(hd, c.get("rope_theta", c["rope_base"]), c.get("rope_scaling")),
    )

    def block(p, x):
        n = lambda j, y: rms(y, W[f"{p}.norm_{j}.weight"], eps)  # noqa: E731
        wq, wk, wv = W[f"{p}.attn.Wqkv.weight"].split([h_ * hd, kv * hd, kv * hd])
        extra = {}
        if huginn:
            extra = dict(q_bias=W[f"{p}.attn.qk_bias"][0, 0], k_bias=W[f"{p}.attn.qk_bias"][1, 0])
        if layout == "retro-olmo":
            extra = dict(q_norm=W[f"{p}.attn.q_norm.weight"], k_norm=W[f"{p}.attn.k_norm.weight"])
        attn = lambda y: oracle_attention(y, wq, wk, wv, W[f"{p}.attn.proj.weight"], spec, **extra)  # noqa: E731
        gate, up = W[f"{p}.mlp.fc.weight"].chunk(2)
        mlp = lambda y: (silu(y @ gate.T) * (y @ up.T)) @ W[f"{p}.mlp.proj.weight"].T  # noqa: E731
        if huginn:  # sandwich: norms after the residual add
            x = n(2, attn(n(1, x)) + x)
            return n(4, mlp(n(3, x)) + x)
        if layout == "retro-llama":  # pre-norm
            x = x + attn(n(1, x))
            return x + mlp(n(2, x))
        x = x + n(1, attn(x))  # OLMo-2 post-norm
        return x + n(2, mlp(x))

    scale = math.sqrt(c["n_embd"]) if huginn else c["init_values"]["embed_scale"]
    e = W["transformer.wte.weight"][ids] * scale
    for i in range(c["n_layers_in_prelude"]):
        e = block(f"transformer.prelude.{i}", e)
    x = torch.zeros_like(e)
    head = W["transformer.wte.weight"] if c["tie_embeddings"] else W["lm_head.weight"]
    ln_f = lambda y: rms(y, W["transformer.ln_f.weight"], eps)  # noqa: E731
    out = {}
    for r in range(1, max(depths) + 1):
        x = torch.cat([x, e], dim=-1) @ W["transformer.adapter.weight"].T
        for i in range(c["n_layers_in_recurrent_block"]):
            x = block(f"transformer.core_block.{i}", x)
        y = ln_f(x) if huginn else x
        for i in range(c["n_layers_in_coda"]):
            y = block(f"transformer.coda.{i}", y)
        out[r] = ln_f(y) @ head.T
    return torch.stack([out[r] for r in depths])


def max_err(a, b):
    return float((a - b).abs().max())


# -- the oracle itself, against numbers written out ----------------------------------------
def rope_config(head_dim: int, **changes) -> ModelConfig:
    """A one-head model at theta 100 whose RoPE tables are all a test reads."""
    one_head = dict(d_model=head_dim, n_heads=1, n_kv_heads=1, head_dim=head_dim, rope_theta=100.0)
    return PRESETS["tiny-ouro"].replace(**one_head, **changes)


def test_rope_rotations_match_literal_values():
    """Position 2, theta 100, D=4: frequencies (1, 0.1), angles (2, 0.2)."""
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    c2, s2, c02, s02 = math.cos(2), math.sin(2), math.cos(0.2), math.sin(0.2)
    half = [1 * c2 - 3 * s2, 2 * c02 - 4 * s02, 1 * s2 + 3 * c2, 2 * s02 + 4 * c02]
    inter = [1 * c2 - 2 * s2, 1 * s2 + 2 * c2, 3 * c02 - 4 * s02, 3 * s02 + 4 * c02]
    freqs = inv_freqs(4, 100.0)
    assert rotate(x, 2, freqs, False).tolist() == pytest.approx(half, abs=1e-12)
    assert rotate(x, 2, freqs, True).tolist() == pytest.approx(inter, abs=1e-12)
    cos, sin = rope_tables(rope_config(head_dim=4), torch.tensor([2]))
    for style, want in (("half", half), ("interleaved", inter)):
        got = apply_rope(x.view(1, 1, 1, 4), cos, sin, style).flatten().tolist()
        assert got == pytest.approx(want, abs=1e-12), style


def test_llama3_frequencies_cover_all_three_branches():
    """theta 100, D 8, factor 8, original 32: wavelengths 6.3 (kept), 19.9 (blended), 63, 199 (/8)."""
    scaling = {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32,
    }
    raw = inv_freqs(8, 100.0)
    want = inv_freqs(8, 100.0, scaling)
    s = (32 / (2 * math.pi / raw[1]) - 1) / 3
    assert want == pytest.approx([raw[0], (1 - s) * raw[1] / 8 + s * raw[1], raw[2] / 8, raw[3] / 8])
    cfg = rope_config(head_dim=8, rope_scaling=RopeScaling(**scaling))
    assert rope_inv_freq(cfg).tolist() == pytest.approx(want, rel=1e-12)


# -- each published layout loads and computes what docs/checkpoints.md describes ---------------------------
EXPECTED = {
    "ouro": {
        "family": "ouro",
        "block": "ouro",
        "rope": "half",
        "recurrence": 3,
        "n_kv_heads": 2,
        "head_dim": 12,
        "embed_scale": 1.0,
        "tie_embeddings": False,
        "early_exit_gate": True,
        "n_core": 2,
    },
    "huginn": {
        "family": "raven",
        "block": "sandwich",
        "rope": "interleaved",
        "recurrence": 3,
        "qk_bias": True,
        "embed_scale": 4.0,
        "ln_f_before_coda": True,
        "tie_embeddings": True,
        "rope_theta": 50000.0,
        "max_seq_len": 64,
        "init_state": "zeros",
    },
    "retro-llama": {
        "family": "raven",
        "block": "prenorm",
        "rope": "half",
        "n_kv_heads": 2,
        "embed_scale": 1.5,
        "rope_theta": 100.0,
        "ln_f_before_coda": False,
        "tie_embeddings": False,
        "rope_scaling": RopeScaling(8.0, 1.0, 4.0, 32),
    },
    "retro-olmo": {
        "family": "raven",
        "block": "postnorm",
        "qk_norm": True,
        "n_kv_heads": 2,
        "rope_theta": 500000.0,
        "rope_scaling": None,
        "ln_f_before_coda": False,
    },
}


@pytest.mark.parametrize("ids", [[5], IDS], ids=["one-token", "four-tokens"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_published_checkpoint_matches_oracle(tmp_path, layout, ids):
    config, tensors = checkpoint(layout)
    model = load_model(write(tmp_path / layout, config, tensors), dtype=torch.float64)
    for name, want in EXPECTED[layout].items():
        assert getattr(model.cfg, name) == want, name
    got = model.depth_logits(ids, [1, 2, 3])
    want = oracle_logits(layout, config, tensors, ids, [1, 2, 3])
    assert max_err(got, want) < 1e-10, f"{layout}: worst |diff| {max_err(got, want):.3g}"
    assert float(want.std()) > 0.1  # the logits carry signal: a mis-mapping would show


def _swap(a, b):
    def mutate(config, tensors):
        tensors[a], tensors[b] = tensors[b].clone(), tensors[a].clone()

    return mutate


def _swap_halves(key):
    def mutate(config, tensors):
        tensors[key] = torch.cat(tensors[key].chunk(2)[::-1]).contiguous()

    return mutate


def _drop_field(name):
    def mutate(config, tensors):
        del config[name]

    return mutate


NEGATIVE_CONTROLS = [
    (
        "ouro",
        "norm order",
        _swap("model.layers.0.input_layernorm_2.weight", "model.layers.0.post_attention_layernorm.weight"),
    ),
    ("huginn", "qk_bias q/k", _swap_halves("transformer.core_block.0.attn.qk_bias")),
    (
        "huginn",
        "norm_2/norm_3",
        _swap("transformer.coda.0.norm_2.weight", "transformer.coda.0.norm_3.weight"),
    ),
    ("retro-llama", "fc gate/up", _swap_halves("transformer.prelude.0.mlp.fc.weight")),
    ("retro-llama", "no llama3 scaling", _drop_field("rope_scaling")),
    (
        "retro-olmo",
        "norm_1/norm_2",
        _swap("transformer.core_block.1.norm_1.weight", "transformer.core_block.1.norm_2.weight"),
    ),
]


@pytest.mark.parametrize(
    "layout, what, mutate", NEGATIVE_CONTROLS, ids=[f"{a}-{b}" for a, b, _ in NEGATIVE_CONTROLS]
)
def test_oracle_comparison_detects_mismapping(tmp_path, layout, what, mutate):
    """Negative control: a checkpoint altered as a mis-mapped loader would see it must not match."""
    config, tensors = checkpoint(layout)
    want = oracle_logits(layout, config, tensors, IDS, [2])
    config, tensors = json.loads(json.dumps(config)), dict(tensors)
    mutate(config, tensors)
    got = load_model(write(tmp_path / "x", config, tensors), dtype=torch.float64).depth_logits(IDS, [2])
    assert max_err(got, want) > 1e-3, what


def test_sharded_checkpoint_loads_like_single_file(tmp_path):
    config, tensors = checkpoint("retro-olmo")
    keys = list(tensors)
    single = load_model(write(tmp_path / "single", config, tensors), dtype=torch.float64)
    shards = [keys[:7], keys[7:20], keys[20:]]
    sharded = load_model(write(tmp_path / "sharded", config, tensors, shards), dtype=torch.float64)
    assert torch.equal(single.depth_logits(IDS, [1, 3]), sharded.depth_logits(IDS, [1, 3]))


def test_recurrence_override(tmp_path):
    config, tensors = checkpoint("retro-llama")
    del config["mean_recurrence"]  # retrofitted configs may not carry a usable one
    folder = write(tmp_path / "m", config, tensors)
    with pytest.raises(LoopcertError, match="mean_recurrence"):
        load_model(folder)
    assert load_checkpoint(folder, recurrence=7).cfg.recurrence == 7
    with pytest.raises(LoopcertError, match="recurrence"):
        load_checkpoint(folder, recurrence=0)


# -- key-layout round trips ------------------------------------------------------------------
def _state_equal(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(
        sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]) for k in sa
    )


@pytest.mark.parametrize("shard_size", [None, 4000], ids=["single", "sharded"])
@pytest.mark.parametrize("preset", TINY_PRESETS + (TINY_LOOPCODER,))
def test_write_published_round_trip_is_bitwise(tmp_path, preset, shard_size):
    model = load_model(preset, seed=5)
    folder = write_published(model, tmp_path / preset, shard_size=shard_size)
    back = load_model(folder)
    assert _state_equal(model, back)
    # The published layouts carry no state-init fields: published models start from zeros.
    assert back.cfg == model.cfg.replace(name=folder.name, init_state="zeros")
    if shard_size is not None:
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        assert len(set(index["weight_map"].values())) > 1
        assert not (folder / "model.safetensors").exists()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_published_to_refdec_to_published_reproduces_the_files(tmp_path, layout):
    """Hand-written checkpoint -> LoopedLM -> write_published: the same key names and bits."""
    from safetensors.torch import load_file

    config, tensors = checkpoint(layout)
    stored = next(iter(tensors.values())).dtype
    model = load_model(write(tmp_path / "in", config, tensors), dtype=stored)
    out = write_published(model, tmp_path / "out", layout)
    written = load_file(str(out / "model.safetensors"))
    kept = {k: v for k, v in tensors.items() if not k.endswith(("freqs_cis", "inv_freq"))}
    assert sorted(written) == sorted(kept)
    assert all(torch.equal(written[k], kept[k]) for k in kept)
    assert _state_equal(model, load_model(out, dtype=stored))


def test_write_published_refuses_what_the_layout_cannot_hold(tmp_path):
    model = load_model("tiny-raven-llama")
    with pytest.raises(LoopcertError, match="ModelConfig.block"):
        write_published(model, tmp_path / "a", "huginn")
    write_published(model, tmp_path / "b")
    with pytest.raises(LoopcertError, match="exists"):
        write_published(model, tmp_path / "b")


# -- bad checkpoints: one clear error naming the key or field ------------------------------------
def _set(key, value):
    def mutate(config, tensors):
        config[key] = value

    return mutate


def _del_tensor(key):
    def mutate(config, tensors):
        del tensors[key]

    return mutate


def _put_tensor(key, value):
    def mutate(config, tensors):
        tensors[key] = value

    return mutate


def _del_embed_scale(config, tensors):
    del config["init_values"]["embed_scale"]


def _mixed_norms(config, tensors):
    tensors["transformer.core_block.0.attn.q_norm.weight"] = torch.ones(16)


BAD = [
    ("ouro", _set("model_type", "llama"), "unknown model_type 'llama'"),
    ("ouro", _drop_field("model_type"), "model_type"),
    ("ouro", _drop_field("total_ut_steps"), "'total_ut_steps'"),
    ("ouro", _drop_field("head_dim"), "'head_dim'"),
    ("ouro", _set("hidden_size", "16"), "'hidden_size'"),
    ("ouro", _set("hidden_act", "gelu"), "'hidden_act'"),
    ("ouro", _set("rope_scaling", {"rope_type": "yarn", "factor": 4.0}), "'rope_scaling'"),
    ("ouro", _del_tensor("model.layers.1.mlp.up_proj.weight"), "model.layers.1.mlp.up_proj.weight"),
    ("ouro", _del_tensor("lm_head.weight"), "lm_head.weight"),
    (
        "ouro",
        _put_tensor("model.layers.0.self_attn.q_proj.bias", torch.zeros(24)),
        "model.layers.0.self_attn.q_proj.bias",
    ),
    (
        "ouro",
        _put_tensor("model.layers.0.self_attn.k_proj.weight", torch.zeros(24, 15)),
        r"'model.layers.0.self_attn.k_proj.weight' has shape \[24, 15\], expected \[24, 16\]",
    ),
    (
        "ouro",
        _put_tensor("model.norm.weight", torch.ones(16, dtype=torch.int64)),
        "'model.norm.weight' has dtype I64",
    ),
    ("huginn", _drop_field("n_layers_in_coda"), "'n_layers_in_coda'"),
    ("huginn", _set("num_attention_heads", 4), "n_heads / num_attention_heads"),
    ("huginn", _set("num_key_value_heads", 1), "'num_key_value_heads'"),
    ("huginn", _set("injection_type", "add"), "'injection_type'"),
    ("huginn", _set("init_values", {"embed_scale": 1.0}), "init_values.embed_scale"),
    ("huginn", _put_tensor("lm_head.weight", torch.zeros(VOCAB, 16, dtype=torch.bfloat16)), "lm_head.weight"),
    (
        "huginn",
        _put_tensor("transformer.core_block.0.attn.Wqkv.weight", torch.zeros(40, 16)),
        "'transformer.core_block.0.attn.Wqkv.weight' has shape",
    ),
    ("huginn", _mixed_norms, "transformer.core_block.0.attn.q_norm.weight"),
    ("retro-llama", _del_embed_scale, "init_values.embed_scale"),
    ("retro-olmo", _drop_field("num_key_value_heads"), "'num_key_value_heads'"),
    (
        "retro-olmo",
        _del_tensor("transformer.coda.0.attn.k_norm.weight"),
        "transformer.coda.0.attn.k_norm.weight",
    ),
]


@pytest.mark.parametrize("layout, mutate, message", BAD, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD)])
def test_bad_checkpoint_names_the_culprit(tmp_path, layout, mutate, message):
    config, tensors = checkpoint(layout)
    mutate(config, tensors)
    folder = write(tmp_path / "bad", config, tensors)
    with pytest.raises(LoopcertError, match=message):
        load_model(folder)
    # inspect reads headers only; it catches everything but a tied head's values.
    if "lm_head" not in message or layout == "ouro":
        assert cli_main(["inspect", str(folder)]) == 2


def _folder_case(tmp_path, case):
    config, tensors = checkpoint("ouro")
    keys = list(tensors)
    folder = write(tmp_path / "m", config, tensors, shards=[keys[:10], keys[10:]])
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    shard2 = "model-00002-of-00002.safetensors"
    if case == "missing shard":
        (folder / shard2).unlink()
        return folder, shard2
    if case == "key not in its shard":
        index["weight_map"]["model.layers.0.self_attn.q_proj.weight"] = shard2
    elif case == "key not in index":
        del index["weight_map"][keys[3]]
    elif case == "path outside folder":
        index["weight_map"][keys[0]] = "../elsewhere.safetensors"
    elif case == "pickle":
        (folder / "pytorch_model.bin").write_bytes(b"\x80\x04")
        return folder, "pickle"
    elif case == "no weights":
        for p in folder.glob("model*"):
            p.unlink()
        return folder, "no model.safetensors"
    elif case == "corrupt file":
        (folder / shard2).write_bytes(b"\xff" * 64)
        return folder, "not a readable safetensors"
    index_path.write_text(json.dumps(index))
    want = {
        "key not in its shard": "model.layers.0.self_attn.q_proj.weight",
        "key not in index": keys[3],
        "path outside folder": "elsewhere",
    }[case]
    return folder, want


@pytest.mark.parametrize(
    "case",
    [
        "missing shard",
        "key not in its shard",
        "key not in index",
        "path outside folder",
        "pickle",
        "no weights",
        "corrupt file",
    ],
)
def test_bad_folder_names_the_culprit(tmp_path, case):
    folder, message = _folder_case(tmp_path, case)
    with pytest.raises(LoopcertError, match=message):
        load_model(folder)


# -- tokenizer and EOS ---------------------------------------------------------------------------
WORDS = ["[UNK]", "<s>", "</s>", "the", "cat", "sat", "on", "mat", "a", "dog", "ran"]


def add_tokenizer(folder):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]")
    )
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.decoder = tokenizers.decoders.WordPiece()  # joins words with spaces
    tok.save(str(folder / "tokenizer.json"))
    return folder


def test_tokenizer_json_encodes_and_decodes(tmp_path, capsys):
    config, tensors = checkpoint("ouro")
    folder = add_tokenizer(write(tmp_path / "m", config, tensors))
    model = load_model(folder)
    assert model.tokenizer.encode("the cat sat") == [3, 4, 5]
    assert model.tokenizer.decode([9, 10, 6, 3, 7]) == "dog ran on the mat"
    assert model.eos_token_id == 2 and model.eos_token_ids == (2,)
    assert cli_main(["generate", str(folder), "--prompt", "the cat", "--max-new-tokens", "3"]) == 0
    assert all(w in WORDS for w in capsys.readouterr().out.split())


def test_eos_ids_from_config_or_generation_config(tmp_path):
    config, tensors = checkpoint("huginn")
    model = load_model(write(tmp_path / "a", config, tensors))
    assert model.eos_token_ids == (1, 4) and model.eos_token_id == 1 and model.tokenizer is None
    del config["eos_token_id"]
    folder = write(tmp_path / "b", config, tensors)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 7}))
    assert load_model(folder).eos_token_ids == (7,)
    config["eos_token_id"] = "</s>"
    with pytest.raises(LoopcertError, match="eos_token_id"):
        load_model(write(tmp_path / "c", config, tensors))


def test_missing_tokenizers_library_is_a_clear_error(tmp_path, monkeypatch):
    config, tensors = checkpoint("ouro")
    folder = add_tokenizer(write(tmp_path / "m", config, tensors))
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # `import tokenizers` now fails
    model = load_model(folder)  # token ids still work
    assert model.depth_logits([3, 4], [1]).shape == (1, 2, VOCAB)
    with pytest.raises(LoopcertError, match=r"loopcert\[hf\]"):
        model.tokenizer.encode("the cat")


def test_malformed_tokenizer_json(tmp_path):
    pytest.importorskip("tokenizers")
    config, tensors = checkpoint("ouro")
    folder = write(tmp_path / "m", config, tensors)
    (folder / "tokenizer.json").write_text("{not json")
    with pytest.raises(LoopcertError, match="tokenizer.json"):
        load_model(folder)


# -- loopcert inspect ---------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
def test_inspect_reports_what_was_recognised(tmp_path, capsys, layout):
    config, tensors = checkpoint(layout)
    folder = write(tmp_path / layout, config, tensors)
    assert cli_main(["inspect", str(folder)]) == 0
    out = capsys.readouterr().out
    info = describe(folder)
    model = load_model(folder)
    assert info["source"] == layout and info["recurrence"] == 3
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    stored = "BF16" if layout == "huginn" else "F32"
    assert info["stored_dtypes"] == {stored: len(tensors)}
    for text in (
        f"{model.cfg.family} / {model.cfg.block}",
        f"{info['parameters']:,}",
        stored,
        f"{model.cfg.n_kv_heads} key/value",
    ):
        assert text in out


def test_inspect_preset_loopcert_folder_and_unknown(tmp_path, capsys):
    assert cli_main(["inspect", "ouro-1.4b"]) == 0
    out = capsys.readouterr().out
    assert "ouro / ouro" in out and "recurrence R       4" in out
    save_model(load_model("tiny-raven-olmo"), tmp_path / "own", dtype="bfloat16")
    info = describe(tmp_path / "own")
    assert info["source"] == "loopcert" and info["block"] == "postnorm"
    assert set(info["stored_dtypes"]) == {"BF16"}
    assert cli_main(["inspect", "no-such-model"]) == 2
    assert "neither a preset" in capsys.readouterr().err


def test_the_two_fingerprints_answer_two_questions():
    """model_fingerprint: which model, whatever dtype it was loaded in; exact_fingerprint: which
    exact tensors. Other weights change both (the control)."""
    m32, m64 = load_model("tiny-ouro"), load_model("tiny-ouro", dtype="float64")
    assert model_fingerprint(m32) == model_fingerprint(m64)
    assert exact_fingerprint(m32) != exact_fingerprint(m64)
    assert exact_fingerprint(m32) == exact_fingerprint(load_model("tiny-ouro"))
    other = load_model("tiny-ouro", seed=1)
    assert model_fingerprint(other) != model_fingerprint(m32) and exact_fingerprint(
        other
    ) != exact_fingerprint(m32)
