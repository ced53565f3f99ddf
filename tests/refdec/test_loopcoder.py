"""LoopCoder (IQuest-Coder-V1-Loop): refdec's maths, config and published layout (docs/checkpoints.md
LoopCoder, docs/design.md section 2).

A hand-written `iquestloopcoder` checkpoint (published key names, config.json fields) is read by
an oracle written here from the published modeling's formulas, in float64 with per-position,
per-head loops and explicit rotate-half RoPE: it shares no code with refdec.layers / refdec.model.
Each detail the published code fixes (gate on q after RoPE, window t-W+1..t, no norm between
passes, one final norm, one gate per layer shared by the passes, the gate from the current pass's q,
GQA) is a switch of the oracle, and flipping any switch must move the logits: the comparison
would catch refdec getting that detail wrong.
"""

from __future__ import annotations

import json
import math
import sys
import types

import pytest
import torch
from safetensors.torch import save_file

from refdec import iquest_config, load_model
from refdec.checkpoint_config import LOOPCODER
from refdec.checkpoints import write_published
from refdec.config import ModelConfig, get_preset
from refdec.errors import LoopcertError
from refdec.layers import GateWeights, loop_gate, window_attention
from refdec.model import LoopedLM

VOCAB, D, H, KV, HD, I_SIZE, LAYERS, WINDOW, THETA, EPS = 17, 16, 4, 2, 8, 24, 2, 3, 100.0, 1e-5
IDS = [3, 7, 1, 9, 4, 4, 12, 0, 5]  # 9 positions: 3 windows of 3


# -- hand-computable pins ------------------------------------------------------------------
def test_window_sees_exactly_the_last_w_positions():
    """q = 0 scores every key equally, so each row is the mean of the values it may see;
    one-hot values name them: row t sees t-W+1..t (W keys, itself included)."""
    t, w = 6, 3
    q = torch.zeros(1, 1, t, 2, dtype=torch.float64)
    k = torch.randn(1, 1, t, 2, dtype=torch.float64)
    v = torch.eye(t, dtype=torch.float64)[None, None]  # value of position j = e_j
    seen = window_attention(q, k, v, w)[0, 0]
    want = torch.tensor(
        [
            [1, 0, 0, 0, 0, 0],
            [1 / 2, 1 / 2, 0, 0, 0, 0],
            [1 / 3, 1 / 3, 1 / 3, 0, 0, 0],
            [0, 1 / 3, 1 / 3, 1 / 3, 0, 0],
            [0, 0, 1 / 3, 1 / 3, 1 / 3, 0],
            [0, 0, 0, 1 / 3, 1 / 3, 1 / 3],
        ],
        dtype=torch.float64,
    )
    assert torch.allclose(seen, want, atol=1e-15)


def test_gate_is_per_query_head_sigmoid_of_q_dot_w_plus_b():
    q = torch.tensor([[[[1.0, 2.0]], [[-1.0, 0.5]]]], dtype=torch.float64)  # (B=1, H=2, T=1, D=2)
    f64 = torch.float64
    g = GateWeights(torch.tensor([[0.5, -0.25], [2.0, 1.0]], dtype=f64), torch.tensor([0.1, -0.2], dtype=f64))
    got = loop_gate(q, g)[0, :, 0, 0]
    want = [1 / (1 + math.exp(-(0.5 - 0.5 + 0.1))), 1 / (1 + math.exp(-(-2.0 + 0.5 - 0.2)))]
    assert got.tolist() == pytest.approx(want, rel=1e-15)


# -- the oracle ------------------------------------------------------------------------------
def loopcoder_checkpoint(seed=0, tie=False):
    g = torch.Generator().manual_seed(seed)
    rn = lambda *s, scale=1.0: torch.randn(*s, generator=g, dtype=torch.float64) * scale
    lin = lambda o, i: rn(o, i, scale=1 / math.sqrt(i))
    config = {
        "architectures": ["IQuestLoopCoderForCausalLM"],
        "model_type": LOOPCODER,
        "auto_map": {"AutoConfig": "configuration_iquestloopcoder.IQuestLoopCoderConfig"},
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
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": tie,
        "loop_num": 2,
        "loop_window_size": WINDOW,
    }
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
        t[f"model.gate_projections.{i}.weight"] = rn(H, HD, scale=0.5)
        t[f"model.gate_projections.{i}.bias"] = rn(H, scale=0.5)
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
    gate_after_rope=True,
    window_lo=-WINDOW + 1,  # first visible offset: t-W+1
    gate_on_global=True,  # g * global + (1 - g) * local
    norm_between_passes=False,
    gate_per_layer=True,
    gate_from_current_pass=True,
)


def oracle_logits(tensors, ids, depth, **switches):
    """Logits (T, V) at `depth` passes, from the published formulas; `switches` flip one detail."""
    o = PUBLISHED | switches
    w = {k: v.double() for k, v in tensors.items()}
    T = len(ids)

    def norm(x, weight):
        return weight * (x / math.sqrt(float((x * x).mean()) + EPS))

    def rope(x, p):  # rotate-half over one head vector
        out = x.clone()
        for j in range(HD // 2):
            a = p / THETA ** (2 * j / HD)
            c, s = math.cos(a), math.sin(a)
            out[j] = x[j] * c - x[j + HD // 2] * s
            out[j + HD // 2] = x[j] * s + x[j + HD // 2] * c
        return out

    def attend(qv, keys, vals, visible):
        scores = [float(qv @ keys[j]) / math.sqrt(HD) if visible(j) else -math.inf for j in range(T)]
        p = torch.softmax(torch.tensor(scores, dtype=torch.float64), 0)
        return sum(p[j] * vals[j] for j in range(T) if visible(j))

    h = [w["model.embed_tokens.weight"][i].clone() for i in ids]
    first_kv, first_q = {}, {}
    for r in range(1, depth + 1):
        if r > 1 and o["norm_between_passes"]:
            h = [norm(x, w["model.norm.weight"]) for x in h]
        for li in range(LAYERS):
            p = f"model.layers.{li}"
            x = [norm(hh, w[f"{p}.input_layernorm.weight"]) for hh in h]
            q = [(w[f"{p}.self_attn.q_proj.weight"] @ xx).view(H, HD) for xx in x]
            k = [(w[f"{p}.self_attn.k_proj.weight"] @ xx).view(KV, HD) for xx in x]
            v = [(w[f"{p}.self_attn.v_proj.weight"] @ xx).view(KV, HD) for xx in x]
            qr = [torch.stack([rope(q[t][hh], t) for hh in range(H)]) for t in range(T)]
            kr = [torch.stack([rope(k[t][j], t) for j in range(KV)]) for t in range(T)]
            if r == 1:
                first_kv[li], first_q[li] = (kr, v), (q, qr)
            gl = li if o["gate_per_layer"] else 0
            gw, gb = w[f"model.gate_projections.{gl}.weight"], w[f"model.gate_projections.{gl}.bias"]
            att = []
            for t in range(T):
                heads = []
                for hh in range(H):
                    j = hh // (H // KV)  # GQA: query head hh uses key head j
                    k1, v1 = [kk[j] for kk in first_kv[li][0]], [vv[j] for vv in first_kv[li][1]]
                    glob = attend(qr[t][hh], k1, v1, lambda s, t=t: s <= t)
                    if r == 1:
                        heads.append(glob)
                        continue
                    own_k, own_v = [kk[j] for kk in kr], [vv[j] for vv in v]
                    loc = attend(qr[t][hh], own_k, own_v, lambda s, t=t: t + o["window_lo"] <= s <= t)
                    src = (
                        (qr if o["gate_after_rope"] else q)
                        if o["gate_from_current_pass"]
                        else (first_q[li][1] if o["gate_after_rope"] else first_q[li][0])
                    )
                    gate = torch.sigmoid(src[t][hh] @ gw[hh] + gb[hh])
                    heads.append(
                        gate * glob + (1 - gate) * loc
                        if o["gate_on_global"]
                        else gate * loc + (1 - gate) * glob
                    )
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
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return torch.stack([head @ norm(hh, w["model.norm.weight"]) for hh in h])


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    config, tensors = loopcoder_checkpoint()
    folder = write(tmp_path_factory.mktemp("lc") / "lc", config, tensors)
    return load_model(folder, dtype=torch.float64), tensors


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_published_checkpoint_matches_oracle(published, depth):
    """Depth 1 is the draft readout (ln_f + head on pass 1), 2 the published model, 3 the
    natural extension (a further pass that mixes with pass 1 as pass 2 does)."""
    model, tensors = published
    got = model.depth_logits(IDS, [depth])[0]
    want = oracle_logits(tensors, IDS, depth)
    assert (got - want).abs().max() < 1e-10
    assert float(want.std()) > 0.1


@pytest.mark.parametrize("switch", sorted(set(PUBLISHED) - {"window_lo"}) + ["window_lo"])
def test_each_pinned_detail_moves_the_logits(published, switch):
    """Negative controls: each detail flipped gives other logits, so the match above pins it."""
    model, tensors = published
    flipped = -WINDOW if switch == "window_lo" else not PUBLISHED[switch]  # window t-W..t: one key more
    got = model.depth_logits(IDS, [2])[0]
    assert (got - oracle_logits(tensors, IDS, 2, **{switch: flipped})).abs().max() > 1e-4, switch


def test_prompt_shorter_than_the_window_is_plain_mixing():
    """Rows before W see all their own pass's rows: a window as long as the prompt changes nothing."""
    cfg = get_preset("tiny-loopcoder")
    model = LoopedLM(cfg).init_weights(4).double()
    wide = LoopedLM(cfg.replace(loop_window_size=cfg.max_seq_len)).double()
    wide.load_state_dict(model.state_dict())
    ids = list(range(cfg.loop_window_size))
    assert torch.equal(model.depth_logits(ids, [2]), wide.depth_logits(ids, [2]))
    longer = list(range(3 * cfg.loop_window_size))
    assert (model.depth_logits(longer, [2]) - wide.depth_logits(longer, [2])).abs().max() > 1e-6


# -- config and layout -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "changes, field",
    [
        ({"loop_window_size": 0}, "loop_window_size"),
        ({"loop_window_size": 129}, "loop_window_size"),
        ({"block": "sandwich"}, "block"),
        ({"rope": "interleaved"}, "rope"),
        ({"n_coda": 1}, "n_coda"),
        ({"qk_bias": True}, "qk_bias"),
        ({"embed_scale": 2.0}, "embed_scale"),
    ],
)
def test_bad_loopcoder_config_names_the_field(changes, field):
    with pytest.raises(LoopcertError, match=rf"ModelConfig\.{field}="):
        get_preset("tiny-loopcoder").replace(**changes)


def test_window_belongs_to_loopcoder_only():
    with pytest.raises(LoopcertError, match=r"ModelConfig\.loop_window_size=3.*only LoopCoder"):
        get_preset("tiny-ouro").replace(loop_window_size=3)


def test_net_refuses_plain_causal_attention_for_loopcoder():
    """A caller written for the other families would silently compute another model."""
    model = LoopedLM(get_preset("tiny-loopcoder")).init_weights(0)
    net = model.net()
    e = torch.zeros(1, 2, 128)
    with pytest.raises(LoopcertError, match="PassAttendFor"):
        net.recur(e, e, None, None)


def test_written_folder_carries_the_config_class(tmp_path):
    model = load_model("tiny-loopcoder", seed=2)
    folder = write_published(model, tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "iquestloopcoder"
    assert config["architectures"] == ["IQuestLoopCoderForCausalLM"]
    module, cls = config["auto_map"]["AutoConfig"].split(".")
    source = (folder / f"{module}.py").read_text()
    assert f"class {cls}(PretrainedConfig)" in source and 'model_type = "iquestloopcoder"' in source
    compile(source, module, "exec")
    assert not (folder / "generation_config.json").exists()  # no other layout writes one either
    with pytest.raises(LoopcertError, match="layout"):
        write_published(model, tmp_path / "r", "retro-llama")
    with pytest.raises(LoopcertError, match="ModelConfig.family"):
        write_published(load_model("tiny-raven-llama"), tmp_path / "l", LOOPCODER)


def test_written_config_class_holds_config_json_and_its_defaults(tmp_path, monkeypatch):
    """The class vLLM runs (--trust-remote-code), on a stand-in PretrainedConfig that keeps its
    keyword arguments as attributes as transformers' does: built from the written config.json it
    holds every value there; built from nothing, its defaults; a field it does not name passes
    through. (Against transformers 5.19 itself, before and after its fields became one table:
    identical to_dict(), diff, save and reload.)"""

    class PretrainedConfig:
        def __init__(self, **kwargs):
            for k, v in kwargs.items():
                setattr(self, k, v)

    monkeypatch.setitem(sys.modules, "transformers", types.SimpleNamespace(PretrainedConfig=PretrainedConfig))
    folder = write_published(load_model("tiny-loopcoder", seed=2), tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    space: dict = {}
    exec(compile((folder / iquest_config.FILE).read_text(), iquest_config.FILE, "exec"), space)
    cls = space[iquest_config.CLASS]
    assert {k: getattr(cls(**config), k) for k in config} == config
    made = cls(other=5)
    assert (made.loop_num, made.loop_window_size, made.head_dim, made.rope_scaling) == (2, 8, 64, None)
    assert made.tie_word_embeddings is False and made.eos_token_id is None and made.other == 5


def _drop(key):
    return lambda c, t: t.pop(key)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (_drop("model.gate_projections.1.bias"), r"missing tensor\(s\) \['model.gate_projections.1.bias'\]"),
        (lambda c, t: t.update({"model.gate_projections.2.weight": torch.zeros(H, HD)}), "unexpected tensor"),
        (
            lambda c, t: t.update({"model.gate_projections.0.weight": torch.zeros(KV, HD)}),
            r"'model.gate_projections.0.weight' has shape \[2, 8\], expected \[4, 8\]",
        ),
        (lambda c, t: c.pop("loop_window_size"), "'loop_window_size' is missing"),
        (lambda c, t: c.pop("head_dim"), "'head_dim' is missing"),
        (lambda c, t: c.update(loop_window_size=0), "'loop_window_size' must be an integer >= 1"),
        (lambda c, t: c.update(attention_bias=True), "'attention_bias' = True is not supported"),
        (lambda c, t: c.update(loop_num=0), "'loop_num' must be an integer >= 1"),
    ],
)
def test_bad_loopcoder_checkpoint_names_the_culprit(tmp_path, mutate, message):
    config, tensors = loopcoder_checkpoint()
    mutate(config, tensors)
    with pytest.raises(LoopcertError, match=message):
        load_model(write(tmp_path / "bad", config, tensors))


def test_tied_head_reads_the_embedding(tmp_path):
    config, tensors = loopcoder_checkpoint(tie=True)
    model = load_model(write(tmp_path / "t", config, tensors), dtype=torch.float64)
    assert model.cfg.tie_embeddings
    assert (model.depth_logits(IDS[:4], [2])[0] - oracle_logits(tensors, IDS[:4], 2)).abs().max() < 1e-10


def test_config_round_trip_keeps_the_window():
    cfg = get_preset("tiny-loopcoder")
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
