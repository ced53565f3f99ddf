"""Models of a given size with random weights: Ouro-1.4B's published shape at any width
(ouro_shape), a config's parameter count (parameters), refdec's seeded random weights held in a
dtype from the start (random_model) and a checkpoint of them in the published layout
(write_checkpoint), all without a download (docs/scale.md).

The layer-cut estimate of --predict (proofs/cost/estimate.py) builds its cuts with random_model,
and tests write folders with write_checkpoint: that is why these stay in refdec. The sweep of
widths the scale measurements certify is a lab tool apart from the installed packages:
`python benchmarks/size_sweep.py` (it was `python -m refdec.sizes`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from refdec.checkpoints import meta_model, write_published
from refdec.config import PRESETS, ModelConfig
from refdec.errors import LoopcertError
from refdec.model import LoopedLM

PUBLISHED = PRESETS["ouro-1.4b"]  # ByteDance/Ouro-1.4B's config.json (../shared/MODELS.md)
MLP_RATIO = PUBLISHED.intermediate_size / PUBLISHED.d_model  # 5632 / 2048 = 2.75
SHARD_BYTES = 1 << 30  # published checkpoints are sharded; 1 GiB shards keep the writer's peak low
STORED_DTYPE = torch.bfloat16  # the published files' dtype


def ouro_shape(width: int, layers: int | None = None) -> ModelConfig:
    """Ouro-1.4B's config with d_model = `width` (a multiple of head_dim 128): heads width / 128,
    intermediate 2.75 x width; R, vocabulary, RoPE and norms as published, and its 24 layers
    unless `layers` cuts them (a cut model times one layer of a shape too large to run whole:
    docs/scale.md, the layer extrapolation)."""
    hd = PUBLISHED.head_dim
    if not isinstance(width, int) or isinstance(width, bool) or width < hd or width % hd:
        raise LoopcertError(f"width must be a positive multiple of head_dim {hd}, got {width!r}")
    if layers is not None and (not isinstance(layers, int) or not 1 <= layers <= PUBLISHED.n_core):
        raise LoopcertError(f"layers must be an integer in 1..{PUBLISHED.n_core}, got {layers!r}")
    heads = width // hd
    cut = "" if layers is None else f"-l{layers}"
    return PUBLISHED.replace(
        d_model=width,
        n_heads=heads,
        n_kv_heads=heads,
        intermediate_size=int(MLP_RATIO * width),
        n_core=layers or PUBLISHED.n_core,
        name=f"ouro-w{width}{cut}",
    )


def parameters(cfg: ModelConfig) -> int:
    return sum(p.numel() for p in meta_model(cfg).parameters())


def random_model(cfg: ModelConfig, seed: int = 0, dtype: torch.dtype = STORED_DTYPE) -> LoopedLM:
    """LoopedLM(cfg) with refdec's seeded random weights (LoopedLM.init_weights), held in `dtype`
    from the start: the 1.4B shape in bfloat16 is 2.9 GB, where building it in float32 first
    would take 5.7 GB and torch's own initialisation of every module."""
    model = meta_model(cfg).to(dtype).to_empty(device="cpu")  # the dtype chosen on meta: no copy
    return model.init_weights(seed).eval()


def write_checkpoint(cfg: ModelConfig, folder, seed: int = 0, shard_size: int = SHARD_BYTES) -> Path:
    """A fresh folder holding `cfg` with random weights, in its published layout, bfloat16."""
    model = random_model(cfg, seed)
    return write_published(model, folder, shard_size=shard_size)


if __name__ == "__main__":
    sys.exit(
        "refdec.sizes is no longer a command: the sweep is `python benchmarks/size_sweep.py` (docs/scale.md)"
    )
