"""refdec.sizes: Ouro-1.4B's published shape at any width, written by refdec's writer in the
published layout and read back by the real loader (the sweep of widths: tests/benchmarks/
test_size_sweep.py)."""

from __future__ import annotations

import json

import pytest
import torch

from refdec.checkpoints import describe, load_checkpoint
from refdec.config import PRESETS
from refdec.errors import LoopcertError
from refdec.sizes import ouro_shape, parameters, random_model, write_checkpoint


def test_the_published_width_is_ouro_1_4b():
    cfg = ouro_shape(2048)
    pub = PRESETS["ouro-1.4b"]
    for f in ("vocab_size", "d_model", "n_heads", "n_kv_heads", "head_dim", "intermediate_size", "n_core"):
        assert getattr(cfg, f) == getattr(pub, f), f
    assert (cfg.vocab_size, cfg.n_core, cfg.recurrence, cfg.intermediate_size) == (49152, 24, 4, 5632)
    assert parameters(cfg) == describe("ouro-1.4b")["parameters"] == 1_434_652_673


@pytest.mark.parametrize("width", [0, 100, 2048.0, -128])
def test_bad_width_is_named(width):
    with pytest.raises(LoopcertError, match="width must be a positive multiple of head_dim 128"):
        ouro_shape(width)


def test_written_checkpoint_loads_in_the_published_layout(tmp_path):
    """A cut-down Ouro config through the same writer the sweep uses: config.json says ouro, the
    loader reads the shards back, and the weights are refdec's seeded ones (stored bfloat16)."""
    cfg = ouro_shape(256).replace(vocab_size=61, n_core=2, max_seq_len=64)
    folder = write_checkpoint(cfg, tmp_path / "m", seed=3, shard_size=64 * 1024)
    raw = json.loads((folder / "config.json").read_text())
    assert raw["model_type"] == "ouro" and raw["total_ut_steps"] == 4 and raw["hidden_size"] == 256
    assert (folder / "model.safetensors.index.json").is_file()  # sharded, as published
    got = load_checkpoint(folder, dtype=torch.float64)
    want = random_model(cfg, seed=3).to(torch.float64)
    assert got.cfg.replace(name="x") == cfg.replace(name="x")
    for (k, a), (k2, b) in zip(
        sorted(got.state_dict().items()), sorted(want.state_dict().items()), strict=True
    ):
        assert k == k2 and torch.equal(a, b), k
    other = random_model(cfg, seed=4)
    assert not torch.equal(other.lm_head.weight.double(), got.lm_head.weight)
