"""`loopcert train`: train the embedded default model (trainer.train), CPU, resumable."""

from __future__ import annotations

import sys

from trainer import train

HELP = "train the default looped byte-level model on this Python's standard library"
OWN_THREADS = True  # trainer.train's --threads is part of the recipe (recorded in train_record.json)
ON_INTERRUPT = "resume from the last checkpoint with --resume"


def add_arguments(p) -> None:
    train.add_arguments(p)


def run(args) -> int:
    return train.run_args(args, command="loopcert " + " ".join(sys.argv[1:]))
