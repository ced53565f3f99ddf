"""`--decoder llama.cpp[:...]` without llama.cpp: the spec parser, the request each sequence sends,
the GGUF's tensor map and its RoPE permutation, and which models are declined (docs/decoders.md,
"Certify llama.cpp"). The decoder against llama.cpp itself: tests/proofs/engines/test_llamacpp_*.py
(tox -e llamacpp)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

import refdec
from proofs.decoders.candidates import user_candidate
from proofs.decoders.llamacpp_decoder import SAMPLERS, check_servable, request
from proofs.decoders.llamacpp_gguf import gguf_tensors, rope_pairs_adjacent
from proofs.decoders.llamacpp_spec import DEFAULT_NUM_DRAFT, is_llamacpp_spec, parse_llamacpp_spec
from proofs.decoders.protocol import NotApplicable
from refdec.config import TINY_NANBEIGE
from refdec.errors import LoopcertError
from refdec.layers import rope_tables
from refdec.sampling import CONTEXT_SCOPE, FILTERS_FIRST, SPLIT_SCOPE, SamplingParams


def test_good_specs(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert parse_llamacpp_spec("llama.cpp").mode == "plain"
    s = parse_llamacpp_spec(f"llama.cpp:draft={tmp_path},num_draft=4,kv=f32,threads=2")
    assert (s.mode, s.draft, s.num_draft, s.kv, s.threads) == ("draft", str(tmp_path), 4, "f32", 2)
    s = parse_llamacpp_spec("llama.cpp:draft_loops=1")
    assert (s.mode, s.draft_loops, s.num_draft, s.kv) == ("draft", 1, DEFAULT_NUM_DRAFT, "f16")
    s = parse_llamacpp_spec("llama.cpp:ngram=map-k,ngram_n=3")
    assert (s.mode, s.ngram, s.ngram_n) == ("ngram", "map-k", 3)
    s = parse_llamacpp_spec("llama.cpp:config.num_loops=1,config.skip_loop_final_norm=true")
    assert s.overrides == {"num_loops": 1, "skip_loop_final_norm": True} and s.mode == "plain"
    assert is_llamacpp_spec("llama.cpp") and is_llamacpp_spec("llama.cpp:kv=f32")
    assert not is_llamacpp_spec("llama.cppx:make") and not is_llamacpp_spec("mypkg:make")


@pytest.mark.parametrize(
    "spec, named",
    [
        ("llama.cpp:", "nothing after"),
        ("llama.cpp:kv", "is not KEY=VALUE"),
        ("llama.cpp:kv=q4", "kv must be one of"),
        ("llama.cpp:ngram=huge", "ngram must be one of"),
        ("llama.cpp:num_draft=0", "num_draft must be an integer >= 1"),
        ("llama.cpp:num_draft=2", "num_draft= needs draft="),
        ("llama.cpp:ngram_n=2", "ngram_n= needs ngram="),
        ("llama.cpp:draft_loops=1,ngram=simple", "draft_loops and ngram together"),
        ("llama.cpp:draft=/nowhere", "is not a model folder"),
        ("llama.cpp:kv=f32,kv=f16", "kv= given twice"),
        ("llama.cpp:config.rope_theta=5", "the GGUF fields that can be overridden"),
        ("llama.cpp:config.num_loops=two", "config.num_loops must be an integer >= 1"),
        ("llama.cpp:config.skip_loop_final_norm=1", "must be true or false"),
        ("llama.cpp:tempo=1", "unknown key 'tempo'"),
    ],
)
def test_bad_specs_are_named(spec, named):
    with pytest.raises(LoopcertError, match="--decoder") as e:
        parse_llamacpp_spec(spec)
    assert named in str(e.value) and repr(spec) in str(e.value)


def test_user_candidate_parses_a_llamacpp_spec_before_anything_loads():
    with pytest.raises(LoopcertError, match="unknown key 'tempo'"):
        user_candidate("llama.cpp:tempo=1")
    c = user_candidate("llama.cpp")  # builds nothing yet: no llama.cpp needed
    assert c.label == "llama.cpp" and c.sampler_order == FILTERS_FIRST and not c.own_model


def test_every_request_sends_the_whole_sampler():
    V, L = 256, 128
    r = request([1, 2], 5, SamplingParams(), 7, V, L)
    assert (r["temperature"], r["top_k"], r["top_p"], r["min_p"], r["seed"]) == (0.0, 0, 1.0, 0.0, 7)
    assert r["samplers"] == SAMPLERS == ["penalties", "top_p", "min_p", "top_k", "temperature"]
    assert (r["repeat_penalty"], r["repeat_last_n"], r["frequency_penalty"], r["presence_penalty"]) == (
        1,
        0,
        0,
        0,
    )
    assert r["logit_bias"] == [] and r["stop"] == []
    assert r["ignore_eos"] is True and r["cache_prompt"] is False and r["n_predict"] == 5
    r = request([1], 3, SamplingParams(0.7, top_k=V, top_p=0.9, order=FILTERS_FIRST), 0, V, L)
    assert (r["top_k"], r["top_p"], r["temperature"]) == (0, 0.9, 0.7)  # top-k >= V: no filter
    with pytest.raises(
        LoopcertError, match="'temperature-first': this decoder runs llama.cpp's sampler chain"
    ):
        request([1], 3, SamplingParams(0.7, top_p=0.9), 0, V, L)
    assert request([1], 3, SamplingParams(0.7, top_k=4), 0, V, L)["top_k"] == 4  # no top-p: either order


def test_the_engines_fields_go_to_llamacpps_request_fields():
    """The penalties count the last penalty_window tokens (None: the model's context length), a
    stop token is the stop string of its piece; min_tokens and the "split" scope are refused."""
    V, L = 256, 128
    s = SamplingParams(
        1.5,
        order=FILTERS_FIRST,
        min_p=0.05,
        repetition_penalty=1.3,
        frequency_penalty=0.4,
        presence_penalty=0.3,
        logit_bias={9: -2.0, 1: 1.5},
        stop_token_ids=(0, 42),
        penalty_scope=CONTEXT_SCOPE,
        penalty_window=64,
    )
    r = request([1], 3, s, 0, V, L)
    assert (r["min_p"], r["repeat_penalty"], r["frequency_penalty"], r["presence_penalty"]) == (
        0.05,
        1.3,
        0.4,
        0.3,
    )
    assert (
        r["repeat_last_n"] == 64 and r["logit_bias"] == [[1, 1.5], [9, -2.0]] and r["stop"] == ["<0>", "<42>"]
    )
    assert request([1], 3, replace(s, penalty_window=None), 0, V, L)["repeat_last_n"] == L
    with pytest.raises(
        LoopcertError, match=r"min_tokens=1: llama\.cpp's completion request has no such field"
    ):
        request([1], 3, replace(s, min_tokens=1), 0, V, L)
    with pytest.raises(LoopcertError, match="penalty_scope 'split'"):
        request([1], 3, replace(s, penalty_scope=SPLIT_SCOPE, penalty_window=None), 0, V, L)
    with pytest.raises(LoopcertError, match=r"penalty_sign 'by-sign' \(llama\.cpp's is 'subtract'\)"):
        request([1], 3, replace(s, penalty_sign="by-sign"), 0, V, L)
    split = SamplingParams(1.0, logit_bias={3: 1.0})  # no penalty: the scope does not matter
    assert request([1], 3, split, 0, V, L)["repeat_last_n"] == 0


def test_rope_permutation_turns_rotate_half_into_adjacent_pairs():
    """q, k rotated by refdec's rotate-half RoPE, then permuted, equal the permuted q, k rotated by
    adjacent-pair RoPE (llama.cpp's "normal" mode); scores q.k are unchanged. The identity
    permutation (no conversion) is the negative control."""
    cfg = refdec.get_preset(TINY_NANBEIGE)
    heads, hd, d = cfg.n_heads, cfg.head_dim, cfg.d_model
    g = torch.Generator().manual_seed(0)
    w = torch.randn(heads * hd, d, generator=g, dtype=torch.float64)
    x = torch.randn(d, generator=g, dtype=torch.float64)
    pos = 5
    cos, sin = rope_tables(cfg.replace(rope_theta=100.0), torch.tensor([pos]))
    cos, sin = cos[0].double(), sin[0].double()  # (hd/2,)

    def half(v):  # (hd,) rotate-half
        a, b = v[: hd // 2], v[hd // 2 :]
        return torch.cat([a * cos - b * sin, a * sin + b * cos])

    def adjacent(v):  # (hd,) pairs (2i, 2i+1)
        a, b = v[0::2], v[1::2]
        out = torch.empty_like(v)
        out[0::2], out[1::2] = a * cos - b * sin, a * sin + b * cos
        return out

    q_hf = (w @ x).view(heads, hd)
    q_gg = (rope_pairs_adjacent(w, heads) @ x).view(heads, hd)
    for h in range(heads):
        rotated_then_permuted = half(q_hf[h]).view(2, hd // 2).t().reshape(hd)
        assert torch.allclose(adjacent(q_gg[h]), rotated_then_permuted, atol=1e-12)
        assert math.isclose(
            float(half(q_hf[h]) @ half(q_hf[h])), float(adjacent(q_gg[h]) @ adjacent(q_gg[h]))
        )
    assert not torch.allclose(adjacent(q_hf[0]), half(q_hf[0]).view(2, hd // 2).t().reshape(hd), atol=1e-3)


def test_gguf_tensors_hold_every_weight_and_one_eos_row():
    model = refdec.load_model(TINY_NANBEIGE, seed=0)
    t = gguf_tensors(model)
    cfg = model.cfg
    assert t["token_embd.weight"].shape == (cfg.vocab_size + 1, cfg.d_model)
    assert t["output.weight"].shape == (cfg.vocab_size + 1, cfg.d_model)
    assert not t["output.weight"][-1].any() and not t["token_embd.weight"][-1].any()
    assert torch.equal(t["output.weight"][:-1], model.lm_head.weight)
    assert len(t) == 3 + 9 * cfg.n_core
    held = sum(v.numel() for v in t.values()) - 2 * cfg.d_model
    assert held == sum(p.numel() for p in model.parameters())


def test_models_llamacpp_cannot_run_are_not_applicable():
    with pytest.raises(NotApplicable, match="tiny-ouro is ouro"):
        check_servable(refdec.load_model("tiny-ouro", seed=0))
    check_servable(refdec.load_model(TINY_NANBEIGE, seed=0))


def test_a_missing_xllamacpp_names_the_extra(monkeypatch):
    import sys

    from proofs.decoders.llamacpp_decoder import decoder_for

    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # import xllamacpp -> ImportError
    with pytest.raises(LoopcertError, match=r"pip install 'loopcert\[llamacpp\]'"):
        decoder_for("llama.cpp", refdec.load_model(TINY_NANBEIGE, seed=0))
