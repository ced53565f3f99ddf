"""Ouro as a transformers model, written by loopcert (refdec/hf/modeling_ouro.py; docs/decoders.md,
"Certify OpenVINO GenAI").

refdec never imports this file: `refdec.checkpoints.write_published` copies it beside an Ouro
folder's config.json, whose auto_map names its classes, so that transformers (trust_remote_code)
and optimum-intel's OpenVINO export can build the model. It is loopcert's own code, written from
refdec's Ouro maths (refdec/model.py, refdec/layers.py; docs/design.md section 2), not the published
file; tests/proofs/engines/test_openvino_decoder.py holds it to refdec's logits in float64.

    h(0)  = embed(ids)
    h(u)  = norm(layers(h(u-1)))           u = 1..total_ut_steps, the same layers every step
    block x + n2(attn(n1(x)));  x + n4(mlp(n3(x)))   (input_layernorm{,_2}, post_attention_layernorm{,_2})
    logits = lm_head(h(total_ut_steps))

The early-exit gate is loaded and never used: decoding runs the fixed depth total_ut_steps.

The KV cache: every (step u, layer i) has its own keys and values (depth u attends to depth-u keys
only), at cache index u * num_hidden_layers + i, so a cache holds num_hidden_layers * total_ut_steps
entries (what optimum-intel's NormalizedOuroConfig exposes as the exported model's num_layers).

Norms and RoPE compute in float32 at least, float64 for a float64 model, as refdec does; the RoPE
angles are float64 (computed from the config, not a buffer, so a cast of the model cannot change
them).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.masking_utils import create_causal_mask
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast


class OuroConfig(PretrainedConfig):
    """The fields of a published Ouro config.json (refdec.checkpoint_config.published_config)."""

    model_type = "ouro"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size=49152,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=24,
        num_attention_heads=16,
        num_key_value_heads=16,
        head_dim=None,
        hidden_act="silu",
        max_position_embeddings=65536,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        rope_scaling=None,
        attention_bias=False,
        mlp_bias=False,
        use_sliding_window=False,
        total_ut_steps=4,
        early_exit_threshold=1.0,
        use_cache=True,
        tie_word_embeddings=False,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim or hidden_size // num_attention_heads
        self.hidden_act = hidden_act
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.rope_scaling = rope_scaling
        self.attention_bias = attention_bias
        self.mlp_bias = mlp_bias
        self.use_sliding_window = use_sliding_window
        self.total_ut_steps = total_ut_steps
        self.early_exit_threshold = early_exit_threshold
        self.use_cache = use_cache
        if hidden_act != "silu" or attention_bias or mlp_bias or use_sliding_window:
            raise ValueError(
                "this Ouro code implements SiLU MLPs without biases and full attention: got "
                f"hidden_act={hidden_act!r}, attention_bias={attention_bias}, mlp_bias={mlp_bias}, "
                f"use_sliding_window={use_sliding_window}"
            )
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Norms and RoPE run in float32 at least, float64 for a float64 model."""
    return torch.float64 if dtype == torch.float64 else torch.float32


class OuroRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.to(compute_dtype(x.dtype))
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * self.weight


def inverse_frequencies(config: OuroConfig) -> torch.Tensor:
    """(D/2,) float64; Llama-3 scaling when rope_scaling says rope_type "llama3"."""
    d = config.head_dim
    inv = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    s = config.rope_scaling
    if not s:
        return inv
    kind = s.get("rope_type", s.get("type"))
    if kind != "llama3":
        raise ValueError(f"rope_scaling of type {kind!r}: this Ouro code implements llama3 scaling only")
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    original = s["original_max_position_embeddings"]
    wavelength = 2 * math.pi / inv
    smooth = (original / wavelength - low) / (high - low)
    between = (1 - smooth) * inv / factor + smooth * inv
    scaled = torch.where(wavelength < original / high, inv, between)
    return torch.where(wavelength > original / low, inv / factor, scaled)


def rope_angles(config: OuroConfig, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """position_ids (B, T) -> cos, sin (B, 1, T, D/2), float64."""
    angles = position_ids.to(torch.float64)[..., None] * inverse_frequencies(config).to(position_ids.device)
    return torch.cos(angles)[:, None], torch.sin(angles)[:, None]


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, N, T, D) rotated in halves: pairs (x[i], x[i + D/2])."""
    cd = compute_dtype(x.dtype)
    xf, c, s = x.to(cd), cos.to(cd), sin.to(cd)
    half = xf.shape[-1] // 2
    a, b = xf[..., :half], xf[..., half:]
    return torch.cat((a * c - b * s, a * s + b * c), dim=-1).to(x.dtype)


def repeat_heads(x: torch.Tensor, config: OuroConfig) -> torch.Tensor:
    """(B, KV, S, D) -> (B, H, S, D), each key/value head repeated for its group of query heads
    (an expand and a reshape: the form OpenVINO's paged-attention rewrite recognises)."""
    b, kv, s, d = x.shape
    group = config.num_attention_heads // kv
    return x[:, :, None].expand(b, kv, group, s, d).reshape(b, kv * group, s, d)


class OuroAttention(nn.Module):
    def __init__(self, config: OuroConfig, layer_idx: int):
        super().__init__()
        self.config, self.layer_idx = config, layer_idx
        h, kv, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
        self.q_proj = nn.Linear(config.hidden_size, h * d, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, kv * d, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, config.hidden_size, bias=False)

    def forward(self, x, cos, sin, mask, cache, cache_index: int, cache_position):
        c = self.config
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, c.num_attention_heads, c.head_dim).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(b, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)  # (B, KV, T, D)
        v = self.v_proj(x).view(b, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if cache is not None:  # this step's own timeline: (B, KV, S, D)
            k, v = cache.update(k, v, cache_index, {"cache_position": cache_position})
        k, v = repeat_heads(k, c), repeat_heads(v, c)  # (B, H, S, D)
        if c._attn_implementation == "sdpa":
            o = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=mask is None and t > 1, scale=1 / math.sqrt(c.head_dim)
            )
        else:  # eager: refdec's causal_attention, with the mask transformers built
            scores = q @ k.transpose(-1, -2) / math.sqrt(c.head_dim)  # (B, H, T, S)
            if mask is None:
                future = torch.ones(t, k.shape[2], dtype=torch.bool, device=q.device).triu(k.shape[2] - t + 1)
                scores = scores.masked_fill(future, float("-inf"))
            elif mask.dtype == torch.bool:
                scores = scores.masked_fill(~mask, float("-inf"))
            else:
                scores = scores + mask
            o = torch.softmax(scores, dim=-1) @ v  # (B, H, T, D)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


class OuroMLP(nn.Module):
    def __init__(self, config: OuroConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class OuroDecoderLayer(nn.Module):
    """Each branch normed before and after, then added (the sandwich of Ouro's block)."""

    def __init__(self, config: OuroConfig, layer_idx: int):
        super().__init__()
        self.self_attn = OuroAttention(config, layer_idx)
        self.mlp = OuroMLP(config)
        eps = config.rms_norm_eps
        self.input_layernorm = OuroRMSNorm(config.hidden_size, eps)
        self.input_layernorm_2 = OuroRMSNorm(config.hidden_size, eps)
        self.post_attention_layernorm = OuroRMSNorm(config.hidden_size, eps)
        self.post_attention_layernorm_2 = OuroRMSNorm(config.hidden_size, eps)

    def forward(self, x, cos, sin, mask, cache, cache_index, cache_position):
        a = self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, cache_index, cache_position)
        x = x + self.input_layernorm_2(a)
        return x + self.post_attention_layernorm_2(self.mlp(self.post_attention_layernorm(x)))


class OuroPreTrainedModel(PreTrainedModel):
    config_class = OuroConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = False
    _no_split_modules = ["OuroDecoderLayer"]
    _supports_sdpa = True
    _supports_cache_class = True

    def _init_weights(self, module):  # every tensor comes from the checkpoint
        pass


class OuroModel(OuroPreTrainedModel):
    def __init__(self, config: OuroConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(OuroDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = OuroRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.early_exit_gate = nn.Linear(config.hidden_size, 1)  # loaded, never used at fixed depth
        self.post_init()

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        position_ids=None,
        past_key_values=None,
        inputs_embeds=None,
        use_cache=None,
        cache_position=None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        use_cache = self.config.use_cache if use_cache is None else use_cache
        n = len(self.layers)
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()  # grows one entry per (step, layer) index
        if isinstance(past_key_values, DynamicCache):  # generate() sizes it by num_hidden_layers alone
            while len(past_key_values.layers) < n * self.config.total_ut_steps:
                past_key_values.layers.append(DynamicLayer())
        if cache_position is None:
            seen = past_key_values.get_seq_length() if past_key_values is not None else 0
            cache_position = torch.arange(seen, seen + inputs_embeds.shape[1], device=inputs_embeds.device)
        if position_ids is None:
            position_ids = cache_position[None]
        mask = create_causal_mask(
            config=self.config,
            input_embeds=inputs_embeds,
            attention_mask=attention_mask,
            cache_position=cache_position,
            past_key_values=past_key_values,
            position_ids=position_ids,
        )
        cos, sin = rope_angles(self.config, position_ids)
        h = inputs_embeds
        for step in range(self.config.total_ut_steps):
            for i, layer in enumerate(self.layers):
                h = layer(h, cos, sin, mask, past_key_values, step * n + i, cache_position)
            h = self.norm(h)  # the normed state is both the readout and the next step's input
        cache = past_key_values if use_cache else None
        return BaseModelOutputWithPast(last_hidden_state=h, past_key_values=cache)


class OuroForCausalLM(OuroPreTrainedModel, GenerationMixin):
    _tied_weights_keys = ["lm_head.weight"]

    def __init__(self, config: OuroConfig):
        super().__init__(config)
        self.model = OuroModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        position_ids=None,
        past_key_values=None,
        inputs_embeds=None,
        labels=None,
        use_cache=None,
        cache_position=None,
        logits_to_keep=0,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            cache_position=cache_position,
        )
        h = out.last_hidden_state
        if isinstance(logits_to_keep, int) and logits_to_keep > 0:
            h = h[:, -logits_to_keep:]
        logits = self.lm_head(h)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())
        return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=out.past_key_values)
