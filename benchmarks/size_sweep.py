"""The sweep of Ouro-shaped checkpoints the scale measurements certify (docs/scale.md): Ouro-1.4B's
published shape and smaller widths, random weights, written by refdec's own writer in the published
Ouro layout (config.json + sharded safetensors, bfloat16 as the published files are). A sweep keeps
everything of Ouro-1.4B's config.json (24 layers, R = 4, vocabulary 49,152, head_dim 128,
intermediate = 2.75 x width, rope_theta 1e6) but the width, so the cost of each check can be
followed from a few tens of millions of parameters to 1.4B. A lab tool, not installed (it was
`python -m refdec.sizes`); the shapes and weights are refdec.sizes'.

    python benchmarks/size_sweep.py --list                        # the sweep: widths, parameters, bytes
    python benchmarks/size_sweep.py /tmp/ouro-sweep               # every size, one folder each
    python benchmarks/size_sweep.py /tmp/ouro-sweep --width 2048  # the 1.4B shape only
    python benchmarks/size_sweep.py /tmp/ouro-sweep --width 2048 --layers 1   # one of its layers
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from refdec.errors import LoopcertError
from refdec.sizes import ouro_shape, parameters, write_checkpoint

SWEEP_WIDTHS = (128, 256, 512, 1024, 2048)  # 2048 is the published width


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
    ap = argparse.ArgumentParser(prog="python benchmarks/size_sweep.py", description=__doc__.split("\n\n")[0])
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
        print(f"size_sweep: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
