"""`loopcert train`: train the embedded default model (trainer.train), CPU, resumable."""

from __future__ import annotations

import sys

from trainer import train

HELP = "train the default looped byte-level model on this Python's standard library"


def add_arguments(p) -> None:
    train.add_arguments(p)


def run(args) -> int:
    return train.run_args(args, command="loopcert " + " ".join(sys.argv[1:]))
