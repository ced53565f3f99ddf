"""Random checkpoints of Ouro-1.4B's published shape and a sweep of smaller widths (docs/scale.md).

The sizes users ship cannot be downloaded here, so the scale measurements certify checkpoints of
the same shape with random weights, written by refdec's own writer (refdec.checkpoints.
write_published) in the published Ouro layout: config.json + sharded safetensors, bfloat16 as
the published files are. A sweep keeps everything of Ouro-1.4B's config.json (24 layers, R = 4,
vocabulary 49,152, head_dim 128, intermediate = 2.75 x width, rope_theta 1e6) but the width, so
the cost of each check can be followed from a few tens of millions of parameters to 1.4B.

    python -m refdec.sizes --list                        # the sweep: widths, parameters, bytes
    python -m refdec.sizes /tmp/ouro-sweep               # every size, one folder each
    python -m refdec.sizes /tmp/ouro-sweep --width 2048  # the 1.4B shape only
    python -m refdec.sizes /tmp/ouro-sweep --width 2048 --layers 1   # one of its layers
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from refdec.checkpoints import meta_model, write_published
from refdec.config import PRESETS, ModelConfig
from refdec.errors import LoopcertError
from refdec.model import LoopedLM

PUBLISHED = PRESETS["ouro-1.4b"]  # ByteDance/Ouro-1.4B's config.json (../shared/MODELS.md)
SWEEP_WIDTHS = (128, 256, 512, 1024, 2048)  # 2048 is the published width
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


def write_size(width: int, folder, seed: int = 0, layers: int | None = None) -> Path:
    """A fresh folder holding the Ouro-shaped checkpoint of `width` in the published layout."""
    return write_checkpoint(ouro_shape(width, layers), folder, seed)


def sweep_table(widths=SWEEP_WIDTHS, layers: int | None = None) -> list[dict]:
    """One row per width: its config and sizes (nothing allocated)."""
    rows = []
    for w in widths:
        cfg = ouro_shape(w, layers)
        n = parameters(cfg)
        rows.append(
            {
                "width": w,
                "name": cfg.name,
                "layers": cfg.n_core,
                "heads": cfg.n_heads,
                "intermediate": cfg.intermediate_size,
                "vocab": cfg.vocab_size,
                "R": cfg.recurrence,
                "parameters": n,
                "float64_bytes": 8 * n,
                "stored_bytes": 2 * n,
            }
        )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m refdec.sizes", description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", help="folder; each size goes to OUT/ouro-w<width>")
    ap.add_argument("--width", type=int, action="append", help=f"a width (default: {SWEEP_WIDTHS})")
    ap.add_argument("--layers", type=int, default=None, help="cut the 24 layers to this many")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--list", action="store_true", help="print the sweep's sizes, write nothing")
    a = ap.parse_args(argv)
    widths = tuple(a.width or SWEEP_WIDTHS)
    try:
        rows = sweep_table(widths, a.layers)
        for r in rows:
            print(
                f"{r['name']}: d={r['width']} layers={r['layers']} heads={r['heads']} "
                f"intermediate={r['intermediate']} V={r['vocab']} R={r['R']} "
                f"params={r['parameters'] / 1e6:.1f}M float64={r['float64_bytes'] / 2**30:.2f} GiB"
            )
        if a.list:
            return 0
        if a.out is None:
            ap.error("give an output folder, or --list")
        for r in rows:
            path = write_size(r["width"], Path(a.out) / r["name"], a.seed, a.layers)
            print(f"wrote {path}")
    except LoopcertError as e:
        print(f"refdec.sizes: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
