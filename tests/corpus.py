"""A tiny training corpus for the trainer's tests: small repetitive .py files, learnable in a few
steps, enough of them that split_of holds some out (one document in 20)."""

from __future__ import annotations

from pathlib import Path


def write_corpus(root: Path, files: int, defs: int) -> Path:
    """`files` modules of `defs` one-line functions each, shifted by file so they differ."""
    for i in range(files):
        body = "".join(f"def f{j}(x):\n    return x + {j}\n\n" for j in range(i % 7, i % 7 + defs))
        (root / f"mod{i:03d}.py").write_text(body)
    return root
