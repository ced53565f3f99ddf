"""A tiny training corpus and TrainConfig for the trainer's tests: small repetitive .py files,
learnable in a few steps, enough of them that split_of holds some out (one document in 20)."""

from __future__ import annotations

from pathlib import Path

from trainer.recipes import RECIPES, TrainConfig

# A few steps of a tiny model: what every trainer test runs unless it says otherwise.
TINY_RUN = dict(steps=30, seq_len=64, batch_size=4, lr=1e-2, warmup=3, backprop_k=2, log_every=5, threads=1)


def write_corpus(root: Path, files: int, defs: int) -> Path:
    """`files` modules of `defs` one-line functions each, shifted by file so they differ."""
    for i in range(files):
        body = "".join(f"def f{j}(x):\n    return x + {j}\n\n" for j in range(i % 7, i % 7 + defs))
        (root / f"mod{i:03d}.py").write_text(body)
    return root


def tiny_run(root: Path, recipe: str = "v1", **changes) -> TrainConfig:
    """A TrainConfig on the corpus at `root`: the recipe, its tiny model ("tiny" for v1, else
    "tiny-<recipe>"), TINY_RUN, then `changes`."""
    model = "tiny" if recipe == "v1" else f"tiny-{recipe}"
    return TrainConfig(**(RECIPES[recipe] | TINY_RUN | {"model": model, "data_root": str(root)} | changes))
