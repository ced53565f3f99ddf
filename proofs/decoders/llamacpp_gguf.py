"""A LoopedLM of the Nanbeige family as the GGUF file llama.cpp loads (arch `nanbeige`, llama.cpp
PR #25994; docs/decoders.md, "Certify llama.cpp").

PyPI's gguf 0.19.0 writes the file but has no NANBEIGE constants, so the arch string and its two
keys (`nanbeige.num_loops`, `nanbeige.skip_loop_final_norm`) are written by name here; every
other key is the Llama one llama.cpp reads under the arch's prefix. Tensors are stored at float32
(or float16 / bfloat16 when asked), in llama.cpp's names:

    token_embd.weight                  model.embed_tokens.weight       (V + 1 rows: see EOS below)
    blk.L.attn_norm / ffn_norm         model.layers.L.input_layernorm / post_attention_layernorm
    blk.L.attn_q / attn_k              q_proj / k_proj, rows permuted per head (below)
    blk.L.attn_v / attn_output         v_proj / o_proj
    blk.L.ffn_gate / ffn_up / ffn_down mlp.gate_proj / up_proj / down_proj
    output_norm.weight                 model.norm.weight
    output.weight                      lm_head.weight (absent when tied; V + 1 rows)

RoPE: llama.cpp runs this arch with its "normal" RoPE, which rotates adjacent pairs (2i, 2i+1);
the checkpoint rotates halves (i, i + head_dim/2). Rotating a permuted vector is the permuted
rotation, and attention scores are dot products, invariant under one permutation applied to both
q and k: so q's and k's output rows are reordered within each head so that old row i goes to 2i
and old row i + head_dim/2 to 2i + 1 (what llama.cpp's own converter does for Llama models).

EOS. llama.cpp's `ignore_eos` does not ignore end-of-generation tokens: it sets their logits to
-inf (common/sampling's logit_bias_eog). A certificate must decode the model's whole law, so the
GGUF vocabulary is the model's V tokens plus one token appended at id V, `<|loopcert_eos|>`, the
file's only EOS and end-of-generation token; its embedding and head rows are zero. With
ignore_eos on every request, its logit is -inf and the law over ids 0..V-1 is the model's exactly;
without it, nothing the model emits ends a sequence early. The token pieces are `<id>` placeholders,
ASCII: loopcert sends and reads token ids only, and llama.cpp's completion `logprobs` give a token
whose piece opens an incomplete UTF-8 sequence (a byte piece) no entry of its own
(docs/measurements.md, llama.cpp), so real pieces could lose ids. They also make a token id a stop
string: "<7>" occurs in the text of a token sequence only as token 7's piece (every piece opens with
"<" and closes with ">", which no digit run holds), so llama.cpp's string `stop` ends a sequence
at token 7 exactly (the decoder's stop_token_ids).
"""

from __future__ import annotations

from pathlib import Path

import torch

from refdec.errors import LoopcertError

ARCH = "nanbeige"
EOS_PIECE = "<|loopcert_eos|>"
DTYPES = ("f32", "f16", "bf16")


def piece(token: int) -> str:
    """Token `token`'s piece in the GGUF vocabulary, "<id>" (module docstring): also the stop string
    that ends a llama.cpp completion at that token."""
    return f"<{int(token)}>"


def import_gguf():
    from proofs.decoders.llamacpp_spec import EXTRA

    try:
        import gguf
    except ImportError as e:
        raise LoopcertError(f"--decoder llama.cpp needs the gguf package ({e}): {EXTRA}") from None
    return gguf


def rope_pairs_adjacent(w: torch.Tensor, heads: int) -> torch.Tensor:
    """(heads * D, d) projection rows in rotate-half order -> the same rows in adjacent-pair order
    (module docstring): within each head, row i -> 2i and row i + D/2 -> 2i + 1."""
    rows, d = w.shape
    hd = rows // heads
    return w.reshape(heads, 2, hd // 2, d).transpose(1, 2).reshape(rows, d)


def gguf_tensors(model) -> dict[str, torch.Tensor]:
    """llama.cpp's tensor names -> float64-free CPU tensors (module docstring's table)."""
    cfg = model.cfg
    if cfg.family != "nanbeige":
        raise LoopcertError(
            f"llama.cpp's GGUF is written for the nanbeige family; {cfg.name} is {cfg.family}"
        )
    sd = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    pad = lambda t: torch.cat([t, t.new_zeros(1, t.shape[1])])  # noqa: E731 - the EOS row (docstring)
    out = {"token_embd.weight": pad(sd["embed_tokens.weight"])}
    for i in range(cfg.n_core):
        p, b = f"core.{i}", f"blk.{i}"
        out[f"{b}.attn_norm.weight"] = sd[f"{p}.norms.0.weight"]
        out[f"{b}.attn_q.weight"] = rope_pairs_adjacent(sd[f"{p}.attn.q_proj.weight"], cfg.n_heads)
        out[f"{b}.attn_k.weight"] = rope_pairs_adjacent(sd[f"{p}.attn.k_proj.weight"], cfg.n_kv_heads)
        out[f"{b}.attn_v.weight"] = sd[f"{p}.attn.v_proj.weight"]
        out[f"{b}.attn_output.weight"] = sd[f"{p}.attn.o_proj.weight"]
        out[f"{b}.ffn_norm.weight"] = sd[f"{p}.norms.1.weight"]
        out[f"{b}.ffn_gate.weight"] = sd[f"{p}.mlp.gate_proj.weight"]
        out[f"{b}.ffn_up.weight"] = sd[f"{p}.mlp.up_proj.weight"]
        out[f"{b}.ffn_down.weight"] = sd[f"{p}.mlp.down_proj.weight"]
    out["output_norm.weight"] = sd["norm.weight"]
    if not cfg.tie_embeddings:
        out["output.weight"] = pad(sd["lm_head.weight"])
    return out


def write_gguf(model, path, dtype: str = "f32", *, num_loops: int | None = None) -> Path:
    """`model` (family nanbeige) as a GGUF file at `path`. `num_loops` overrides the loop count
    written (a deliberately wrong file: tox -e llamacpp's negative control); norms and 1-D
    tensors stay float32 whatever `dtype` (llama.cpp's converters keep them so)."""
    if dtype not in DTYPES:
        raise LoopcertError(f"GGUF dtype must be one of {DTYPES}, got {dtype!r}")
    gguf = import_gguf()
    cfg = model.cfg
    tensors = gguf_tensors(model)
    path = Path(path)
    w = gguf.GGUFWriter(str(path), ARCH)
    w.add_name(cfg.name)
    w.add_context_length(cfg.max_seq_len)
    w.add_embedding_length(cfg.d_model)
    w.add_block_count(cfg.n_core)  # the physical layers; llama.cpp expands them by num_loops
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.n_heads)
    w.add_head_count_kv(cfg.n_kv_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_theta)
    if cfg.rope_scaling is not None:
        raise LoopcertError(
            f"{cfg.name}: llama3 RoPE scaling is not written to GGUF here (llama.cpp reads it as "
            "rope_freqs.weight, which this converter does not make)"
        )
    w.add_layer_norm_rms_eps(cfg.norm_eps)
    w.add_vocab_size(cfg.vocab_size + 1)
    w.add_uint32(f"{ARCH}.num_loops", cfg.recurrence if num_loops is None else int(num_loops))
    w.add_bool(f"{ARCH}.skip_loop_final_norm", bool(cfg.skip_loop_final_norm))
    w.add_file_type({"f32": 0, "f16": 1, "bf16": 32}[dtype])
    # the vocabulary (module docstring, EOS)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([piece(i) for i in range(cfg.vocab_size)] + [EOS_PIECE])
    normal, control = int(gguf.TokenType.NORMAL), int(gguf.TokenType.CONTROL)
    w.add_token_types([normal] * cfg.vocab_size + [control])
    # llama.cpp refuses a "gpt2" vocabulary without a merges list (and gguf writes no empty one):
    # one merge of two placeholders, whose result is no token, changes no tokenization
    w.add_token_merges(["<0> <1>"])
    w.add_eos_token_id(cfg.vocab_size)
    w.add_bos_token_id(cfg.vocab_size)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    np_dtype = {"f32": "float32", "f16": "float16", "bf16": "float32"}[dtype]
    for name, t in tensors.items():
        a = t.to(torch.float32).contiguous().numpy()
        if t.dim() == 1 or dtype == "f32":
            w.add_tensor(name, a)
        elif dtype == "bf16":
            bits = gguf.quants.quantize(a, gguf.GGMLQuantizationType.BF16)
            w.add_tensor(name, bits, raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(name, a.astype(np_dtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
