"""trainer.train: a few steps of a tiny model learn, resume is exact, the data split is fixed;
the shipped default model loads, decodes at depth 2R and comes with held-out prompts."""

import json
import math

import pytest
import torch

from refdec import load_model
from refdec.errors import LoopcertError
from refdec.io import DEFAULT_MODEL_DIR
from trainer.train import (
    TrainConfig,
    collect_documents,
    command_line,
    default_prompts,
    sample_depth,
    split_documents,
    split_of,
    train,
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """100 small repetitive .py files: learnable in a few steps, with a non-empty held-out split."""
    root = tmp_path_factory.mktemp("corpus")
    for i in range(100):
        body = "".join(f"def f{j}(x):\n    return x + {j}\n\n" for j in range(i % 7, i % 7 + 12))
        (root / f"mod{i:03d}.py").write_text(body)
    (root / "site-packages").mkdir()
    (root / "site-packages" / "ignored.py").write_text("not data\n")
    return root


def tiny_config(corpus, **kw):
    base = dict(model="tiny", steps=30, seq_len=64, batch_size=4, lr=1e-2, warmup=3, mean_depth=3.0,
                backprop_k=2, aux_max_depth=2, log_every=5, threads=1, data_root=str(corpus))
    base.update(kw)
    return TrainConfig(**base)


def test_split_is_a_fixed_function_of_the_name(corpus):
    docs = collect_documents(corpus)
    assert [n for n, _ in docs] == sorted(n for n, _ in docs)
    assert all("site-packages" not in n for n, _ in docs)
    splits = split_documents(docs)
    assert splits["heldout"] and splits["train"]
    assert all(split_of(n) == "heldout" for n, _ in splits["heldout"])
    assert split_of("os.py") == split_of("os.py")


def test_sample_depth_stays_in_range_with_the_requested_mean():
    g = torch.Generator().manual_seed(0)
    rs = [sample_depth(g, 16.0, 0.5, 64) for _ in range(2000)]
    assert min(rs) >= 1 and max(rs) <= 64
    assert 14.0 < sum(rs) / len(rs) < 18.0


def test_a_few_steps_reduce_the_loss(corpus, tmp_path):
    out = train(tiny_config(corpus), tmp_path / "ckpt", tmp_path / "out", log=lambda *a, **k: None)
    hist = out["record"]["history"]
    assert hist[-1]["bpb"] < hist[0]["bpb"] - 1.0, hist
    assert hist[-1]["aux_bpb"] < hist[0]["aux_bpb"] - 1.0, hist
    assert all(math.isfinite(out["quick_eval"][r]["bpb"]) for r in (1, 2, 4))
    shipped = load_model(tmp_path / "out")
    assert shipped.cfg.name == "tiny-trained"
    prompts = default_prompts(tmp_path / "out")
    assert all(list(p.ids) == list(p.text.encode()) for p in prompts)


def test_training_without_the_shallow_loss_and_the_recorded_command(corpus, tmp_path, monkeypatch):
    from trainer.train import CONFIGS
    assert CONFIGS["core1"].n_core == 1 and CONFIGS["core1"].n_kv_heads == 1
    assert CONFIGS["core1"].recurrence == CONFIGS["default"].recurrence == 32
    out = train(tiny_config(corpus, aux_max_depth=0, steps=5), tmp_path / "ckpt", None,
                log=lambda *a, **k: None)
    assert all("aux_bpb" not in h and math.isfinite(h["bpb"]) for h in out["record"]["history"])
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert command_line(["--max-minutes", "35"]).startswith("OMP_")
    assert "OMP_WAIT_POLICY=PASSIVE" in command_line(["--max-minutes", "35"])


def test_resume_continues_exactly(corpus, tmp_path):
    tc = tiny_config(corpus, steps=12)
    quiet = lambda *a, **k: None  # noqa: E731
    straight = train(tc, tmp_path / "a", None, log=quiet)["model"]
    train(tc, tmp_path / "b", None, log=quiet, until_step=5)
    resumed = train(tc, tmp_path / "b", None, log=quiet, resume=True)
    assert resumed["record"]["steps"] == 12
    for (name, p), q in zip(straight.state_dict().items(), resumed["model"].state_dict().values()):
        assert torch.equal(p, q), name
    with pytest.raises(LoopcertError, match="no checkpoint"):
        train(tc, tmp_path / "empty", None, log=quiet, resume=True)


def test_bad_train_config_is_a_loopcert_error():
    with pytest.raises(LoopcertError, match="model"):
        TrainConfig(model="huge")
    with pytest.raises(LoopcertError, match="seq_len"):
        TrainConfig(model="tiny", seq_len=10_000)
    with pytest.raises(LoopcertError, match="aux_max_depth"):
        TrainConfig(aux_max_depth=-1)


# -- the shipped model ---------------------------------------------------------------------
needs_default = pytest.mark.skipif(not (DEFAULT_MODEL_DIR / "model.safetensors").is_file(),
                                   reason="default model not built yet (python -m trainer.train)")


@needs_default
def test_default_model_loads_small_and_decodes_at_twice_R():
    assert (DEFAULT_MODEL_DIR / "model.safetensors").stat().st_size <= 16 * 2**20
    m = load_model("default")
    cfg = m.cfg
    assert cfg.family == "raven" and cfg.vocab_size == 256 and cfg.n_kv_heads <= 2
    assert cfg.recurrence == 32 and cfg.max_seq_len >= 4096
    ids = list(b"def main():\n    ")
    logits = m.depth_logits(ids, [1, 2, cfg.recurrence, 2 * cfg.recurrence])
    assert torch.isfinite(logits).all()
    p_R, p_2R = logits[2].softmax(-1), logits[3].softmax(-1)
    assert float(0.5 * (p_R - p_2R).abs().sum(-1).max()) < 0.5  # depth 2R stays near depth R
    assert load_model("default", dtype="float64").embed_tokens.weight.dtype == torch.float64


@needs_default
def test_default_prompts_are_held_out_snippets():
    prompts = default_prompts()
    assert len(prompts) == 16
    names = json.loads((DEFAULT_MODEL_DIR / "data_manifest.json").read_text())["documents"]
    heldout = {n for n, split, _, _ in names if split == "heldout"}
    for p in prompts:
        assert p.name.rsplit(":", 1)[0] in heldout
        assert list(p.ids) == list(p.text.encode("utf-8")) and len(p.ids) >= 32
