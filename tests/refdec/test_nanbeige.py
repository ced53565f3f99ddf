"""Nanbeige4.2: refdec's maths, config and published layout (docs/checkpoints.md Nanbeige).

A hand-written `nanbeige` checkpoint (published key names, config.json fields, heads wider than
the model as in the 3B: 4 x 8 > 16) is read by an oracle written here from the published
description, in float64 with per-position, per-head loops and explicit rotate-half RoPE: it shares
no code with refdec.layers / refdec.model. Each detail the description fixes (the final norm after
every loop, each loop its own keys and values, rotate-half RoPE, GQA's grouping, the readout of
depth d = head of the state after loop d) is a switch of the oracle, and flipping any switch must
move the logits: the comparison would catch refdec getting that detail wrong.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import save_file

import refdec
from refdec import load_model
from refdec.checkpoint_config import NANBEIGE, NANBEIGE_UNSUPPORTED
from refdec.checkpoints import describe, write_published
from refdec.config import TINY_NANBEIGE, ModelConfig, get_preset
from refdec.errors import LoopcertError
from refdec.tokenizer import byte_encode

VOCAB, D, H, KV, HD, I_SIZE, LAYERS, LOOPS, THETA, EPS = 19, 16, 4, 2, 8, 24, 2, 2, 1000.0, 1e-5
IDS = [3, 7, 1, 9, 4, 4, 12, 0, 18]


def nanbeige_checkpoint(seed=0, tie=False, **config_changes):
    g = torch.Generator().manual_seed(seed)
    rn = lambda *s, scale=1.0: torch.randn(*s, generator=g, dtype=torch.float64) * scale
    lin = lambda o, i: rn(o, i, scale=1 / math.sqrt(i))
    config = {
        "architectures": ["NanbeigeForCausalLM"],
        "model_type": NANBEIGE,
        "vocab_size": VOCAB,
        "hidden_size": D,
        "intermediate_size": I_SIZE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": H,
        "num_key_value_heads": KV,
        "head_dim": HD,
        "hidden_act": "silu",
        "max_position_embeddings": 64,
        "rms_norm_eps": EPS,
        "rope_theta": THETA,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": tie,
        "num_loops": LOOPS,
        "skip_loop_final_norm": False,
        "enable_double_loop_split": False,
        "loop_share_kv": False,
        "enable_depth_attention": False,
    } | config_changes
    t = {"model.embed_tokens.weight": rn(VOCAB, D)}
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        t[f"{p}.self_attn.q_proj.weight"] = lin(H * HD, D)
        t[f"{p}.self_attn.k_proj.weight"] = lin(KV * HD, D)
        t[f"{p}.self_attn.v_proj.weight"] = lin(KV * HD, D)
        t[f"{p}.self_attn.o_proj.weight"] = lin(D, H * HD)
        t[f"{p}.mlp.gate_proj.weight"] = lin(I_SIZE, D)
        t[f"{p}.mlp.up_proj.weight"] = lin(I_SIZE, D)
        t[f"{p}.mlp.down_proj.weight"] = lin(D, I_SIZE)
        t[f"{p}.input_layernorm.weight"] = 1 + rn(D, scale=0.2)
        t[f"{p}.post_attention_layernorm.weight"] = 1 + rn(D, scale=0.2)
    t["model.norm.weight"] = 1 + rn(D, scale=0.2)
    if not tie:
        t["lm_head.weight"] = lin(VOCAB, D)
    return config, {k: v.float() for k, v in t.items()}


def write(folder, config, tensors):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"))
    return folder


PUBLISHED = dict(
    norm_each_loop=True,  # skip_loop_final_norm false: model.norm ends every loop
    own_kv_per_loop=True,  # loop r attends to loop r's keys (each loop its own KV cache slots)
    rotate_half=True,  # RoPE pairs (i, i + HD/2), not (2i, 2i + 1)
    gqa_blocks=True,  # query head j reads key head j // (H / KV), not j % KV
)


def oracle_logits(tensors, ids, depth, **switches):
    """Logits (T, V) read out after `depth` loops, from the published description; `switches`
    flip one detail."""
    o = PUBLISHED | switches
    w = {k: v.double() for k, v in tensors.items()}
    T = len(ids)

    def norm(x, weight):
        return weight * (x / math.sqrt(float((x * x).mean()) + EPS))

    def rope(x, p):  # one head vector rotated by angle p * theta^(-2j/HD) in each of its pairs
        out = x.clone()
        for j in range(HD // 2):
            a, b = (j, j + HD // 2) if o["rotate_half"] else (2 * j, 2 * j + 1)
            ang = p / THETA ** (2 * j / HD)
            c, s = math.cos(ang), math.sin(ang)
            out[a] = x[a] * c - x[b] * s
            out[b] = x[a] * s + x[b] * c
        return out

    h = [w["model.embed_tokens.weight"][i].clone() for i in ids]
    first = {}  # layer -> loop 1's rotated keys and values
    for r in range(1, depth + 1):
        for li in range(LAYERS):
            p = f"model.layers.{li}"
            x = [norm(hh, w[f"{p}.input_layernorm.weight"]) for hh in h]
            q = [(w[f"{p}.self_attn.q_proj.weight"] @ xx).view(H, HD) for xx in x]
            k = [(w[f"{p}.self_attn.k_proj.weight"] @ xx).view(KV, HD) for xx in x]
            v = [(w[f"{p}.self_attn.v_proj.weight"] @ xx).view(KV, HD) for xx in x]
            qr = [torch.stack([rope(q[t][j], t) for j in range(H)]) for t in range(T)]
            kr = [torch.stack([rope(k[t][j], t) for j in range(KV)]) for t in range(T)]
            if r == 1:
                first[li] = (kr, v)
            keys, vals = (kr, v) if o["own_kv_per_loop"] else first[li]
            att = []
            for t in range(T):
                heads = []
                for j in range(H):
                    g = j // (H // KV) if o["gqa_blocks"] else j % KV
                    scores = torch.stack([qr[t][j] @ keys[s][g] for s in range(t + 1)]) / math.sqrt(HD)
                    pr = torch.softmax(scores, 0)
                    heads.append(sum(pr[s] * vals[s][g] for s in range(t + 1)))
                att.append(torch.cat(heads))
            h = [h[t] + w[f"{p}.self_attn.o_proj.weight"] @ att[t] for t in range(T)]
            x2 = [norm(hh, w[f"{p}.post_attention_layernorm.weight"]) for hh in h]
            mlp = [
                w[f"{p}.mlp.down_proj.weight"]
                @ (
                    torch.nn.functional.silu(w[f"{p}.mlp.gate_proj.weight"] @ xx)
                    * (w[f"{p}.mlp.up_proj.weight"] @ xx)
                )
                for xx in x2
            ]
            h = [h[t] + mlp[t] for t in range(T)]
        if o["norm_each_loop"]:  # the normed state is the next loop's input and this depth's readout
            h = [norm(hh, w["model.norm.weight"]) for hh in h]
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    final = h if o["norm_each_loop"] else [norm(hh, w["model.norm.weight"]) for hh in h]
    return torch.stack([head @ x for x in final])


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    config, tensors = nanbeige_checkpoint()
    folder = write(tmp_path_factory.mktemp("nb") / "nb", config, tensors)
    return load_model(folder, dtype=torch.float64), tensors


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_published_checkpoint_matches_oracle(published, depth):
    """Depth 1 is the draft readout (the normed state after loop 1, through the head), 2 the
    published model (num_loops 2), 3 one loop more."""
    model, tensors = published
    got = model.depth_logits(IDS, [depth])[0]
    want = oracle_logits(tensors, IDS, depth)
    assert (got - want).abs().max() < 1e-10
    assert float(want.std()) > 0.1


@pytest.mark.parametrize("switch", sorted(PUBLISHED))
def test_each_pinned_detail_moves_the_logits(published, switch):
    """Negative controls: each detail flipped gives other logits, so the match above pins it."""
    model, tensors = published
    got = model.depth_logits(IDS, [2])[0]
    assert (got - oracle_logits(tensors, IDS, 2, **{switch: not PUBLISHED[switch]})).abs().max() > 1e-4, (
        switch
    )


@pytest.mark.parametrize("depth", [1, 2])
def test_skip_loop_final_norm_norms_once_before_the_head(tmp_path, depth):
    config, tensors = nanbeige_checkpoint(skip_loop_final_norm=True)
    model = load_model(write(tmp_path / "nb", config, tensors), dtype=torch.float64)
    assert model.cfg.skip_loop_final_norm
    got = model.depth_logits(IDS, [depth])[0]
    assert (got - oracle_logits(tensors, IDS, depth, norm_each_loop=False)).abs().max() < 1e-10
    assert (got - oracle_logits(tensors, IDS, depth)).abs().max() > 1e-4 or depth == 1


def test_skip_flag_changes_depth_one_only_through_the_loop_input():
    """At depth 1 both conventions read out head(norm(h1)); from depth 2 on they differ (the
    second loop's input is normed or not): a pin that the flag acts where it should."""
    cfg = get_preset(TINY_NANBEIGE)
    a = refdec.LoopedLM(cfg).init_weights(2).double()
    b = refdec.LoopedLM(cfg.replace(skip_loop_final_norm=True)).init_weights(2).double()
    ids = byte_encode("loop twice")
    la, lb = a.depth_logits(ids, [1, 2]), b.depth_logits(ids, [1, 2])
    assert (la[0] - lb[0]).abs().max() < 1e-12
    assert (la[1] - lb[1]).abs().max() > 1e-3


def test_tied_head_reads_the_embedding(tmp_path):
    config, tensors = nanbeige_checkpoint(tie=True)
    model = load_model(write(tmp_path / "nb", config, tensors), dtype=torch.float64)
    assert model.cfg.tie_embeddings
    assert (model.depth_logits(IDS, [2])[0] - oracle_logits(tensors, IDS, 2)).abs().max() < 1e-10


# -- config.json: flags, the loop count -----------------------------------------------------------
@pytest.mark.parametrize("flag", NANBEIGE_UNSUPPORTED)
def test_unsupported_flags_are_refused_by_name(tmp_path, flag):
    config, tensors = nanbeige_checkpoint(**{flag: True})
    with pytest.raises(LoopcertError, match=f"field '{flag}' = True is not supported"):
        load_model(write(tmp_path / "nb", config, tensors))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"attention_bias": True}, "'attention_bias' = True is not supported"),
        ({"mlp_bias": True}, "'mlp_bias' = True is not supported"),
        ({"hidden_act": "gelu"}, "'hidden_act' = 'gelu' is not supported"),
        ({"layer_types": ["full_attention", "sliding_attention"]}, "'layer_types'"),
        ({"num_loops": 0}, "'num_loops' must be an integer >= 1"),
        ({"skip_loop_final_norm": "yes"}, "'skip_loop_final_norm' must be true or false"),
        ({"loop_loss_weights": [0.5, 1.0]}, r"has 2 entries but num_loops = 2: .*mlx-lm\) would run 3 loops"),
        ({"loop_loss_weights": "x"}, "'loop_loss_weights' must be a list"),
    ],
)
def test_bad_nanbeige_config_names_the_field(tmp_path, changes, message):
    config, tensors = nanbeige_checkpoint(**changes)
    with pytest.raises(LoopcertError, match=message):
        load_model(write(tmp_path / "nb", config, tensors))


@pytest.mark.parametrize("weights, loops", [(None, 2), ([], 2), ([0.3], 2)])
def test_loop_count_is_num_loops_and_loss_weights_must_agree(tmp_path, weights, loops):
    """num_loops is the count (llama.cpp's nanbeige.num_loops); a loss-weight list, one weight per
    loop after the first, agrees with it (mlx-lm 0.32.2 runs len + 1 loops)."""
    config, tensors = nanbeige_checkpoint(loop_loss_weights=weights)
    assert load_model(write(tmp_path / "nb", config, tensors)).cfg.recurrence == loops


def test_flags_belong_to_their_families():
    with pytest.raises(LoopcertError, match="skip_loop_final_norm=True: only Nanbeige"):
        get_preset("tiny-ouro").replace(skip_loop_final_norm=True)
    with pytest.raises(LoopcertError, match="block='ouro': must be 'prenorm'"):
        get_preset(TINY_NANBEIGE).replace(block="ouro")
    with pytest.raises(LoopcertError, match="loop_window_size=4: only LoopCoder"):
        get_preset(TINY_NANBEIGE).replace(loop_window_size=4)


# -- the published layout, written -----------------------------------------------------------------
@pytest.mark.parametrize("skip", [False, True])
def test_written_folder_round_trips_with_a_byte_level_tokenizer(tmp_path, skip):
    cfg = get_preset(TINY_NANBEIGE).replace(skip_loop_final_norm=skip)
    model = refdec.LoopedLM(cfg).init_weights(0).double()
    folder = write_published(model, tmp_path / "nb")
    raw = json.loads((folder / "config.json").read_text())
    assert raw["model_type"] == "nanbeige" and raw["architectures"] == ["NanbeigeForCausalLM"]
    assert raw["num_loops"] == 2 and raw["skip_loop_final_norm"] is skip
    back = load_model(folder, dtype=torch.float64)
    assert back.cfg.replace(name=cfg.name) == cfg
    ids = byte_encode("nanbeige")
    assert torch.equal(back.depth_logits(ids, [1, 2]), model.depth_logits(ids, [1, 2]))
    pytest.importorskip("tokenizers")
    text = "héllo, wörld\n"
    assert back.tokenizer.encode(text) == byte_encode(text)
    assert back.tokenizer.decode(byte_encode(text)) == text
    info = describe(folder)
    assert info["family"] == "nanbeige" and info["skip_loop_final_norm"] is skip and info["tokenizer"]
    # the form llama.cpp's convert_hf_to_gguf.py reads without a known pre-tokenizer (its
    # LlamaHfVocab: BPE with byte fallback and a Sequence decoder; docs/measurements.md, llama.cpp)
    tok = json.loads((folder / "tokenizer.json").read_text())
    assert tok["model"]["type"] == "BPE" and tok["model"]["byte_fallback"] is True
    assert tok["decoder"]["type"] == "Sequence" and not tok["model"].get("ignore_merges")
    conf = json.loads((folder / "tokenizer_config.json").read_text())
    assert conf["tokenizer_class"] == "PreTrainedTokenizerFast"


def test_other_families_cannot_be_written_as_nanbeige(tmp_path):
    llama = refdec.LoopedLM(get_preset("tiny-raven-llama")).init_weights(0)  # a pre-norm block too
    with pytest.raises(LoopcertError, match="only nanbeige is written as 'nanbeige'"):
        write_published(llama, tmp_path / "x", layout=NANBEIGE)
    nanbeige = refdec.LoopedLM(get_preset(TINY_NANBEIGE)).init_weights(0)
    with pytest.raises(LoopcertError, match="only loopcoder is written as 'iquestloopcoder'"):
        write_published(nanbeige, tmp_path / "y", layout="iquestloopcoder")


def test_preset_shapes():
    cfg = get_preset(TINY_NANBEIGE)
    assert (cfg.family, cfg.block, cfg.rope, cfg.recurrence) == ("nanbeige", "prenorm", "half", 2)
    assert cfg.n_heads * cfg.head_dim > cfg.d_model  # the 3B's q/o projections are not square either
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


def _laws(model):
    logits = model.depth_logits(list(range(40, 90)), [1, 2])
    p = logits.softmax(-1)
    top1 = float(p.max(-1).values.mean())
    agree = float((logits[0].argmax(-1) == logits[1].argmax(-1)).double().mean())
    return top1, agree


def test_tiny_nanbeige_has_a_trained_lms_scales():
    """init_weights gives Nanbeige small residual updates and a peaked head (LoopedLM
    ._trained_scales): laws with top-1 mass ~0.4 and drafts from one loop agreeing with two most of
    the time; the plain random init (the scales undone: the negative control) gives near-uniform
    laws and loops that rewrite the state."""
    model = refdec.load_model(TINY_NANBEIGE, seed=0, dtype=torch.float64)
    top1, agree = _laws(model)
    assert 0.3 < top1 < 0.6 and 0.6 <= agree < 0.95
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("attn.o_proj.weight", "mlp.down_proj.weight")):
                p.div_(model.RESIDUAL_UPDATE)
        model.lm_head.weight.div_(model.HEAD_GAIN)
    top1, agree = _laws(model)
    assert top1 < 0.1 and agree < 0.4


@pytest.mark.parametrize("skip, shown", [(False, "after every loop"), (True, "once, before the head")])
def test_inspect_shows_where_the_final_norm_runs(tmp_path, capsys, skip, shown):
    from loopcert.cli import main as cli_main

    model = refdec.LoopedLM(get_preset(TINY_NANBEIGE).replace(skip_loop_final_norm=skip)).init_weights(0)
    folder = write_published(model, tmp_path / "nb")
    assert cli_main(["inspect", str(folder)]) == 0
    rows = dict(line.split("  ", 1) for line in capsys.readouterr().out.splitlines())
    rows = {k.strip(): v.strip() for k, v in rows.items()}
    assert rows["family / block"] == "nanbeige / prenorm" and rows["recurrence R"] == "2"
    assert rows["loop final norm"] == f"{shown} (skip_loop_final_norm {skip})"
    assert "loop window" not in rows
