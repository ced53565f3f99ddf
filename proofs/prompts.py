"""Prompts the checks decode from: the model's own held-out prompts when it ships them
(prompts.json beside the weights, trainer.train), else a fixed pool in its vocabulary."""

from __future__ import annotations

import json
from pathlib import Path

from refdec.errors import LoopcertError
from refdec.load import DEFAULT_MODEL_DIR
from refdec.tokenizer import byte_encode

# Token-id prompts for tiny vocabularies (ids are taken mod V); byte texts for byte models.
ID_POOL = ((0, 5), (1, 2, 3), (4, 7, 11, 2), (12, 3, 8, 6, 9), (2,), (9, 9, 1), (6, 10, 4, 1, 8, 3))
TEXT_POOL = (
    "def main():\n    ",
    "import os\n",
    "class Config:\n    def __init__(self",
    "for i in range(",
    "    return ",
    "# Copyright ",
    "if __name__ == ",
)


def model_folder(name) -> Path | None:
    if str(name) == "default":
        return DEFAULT_MODEL_DIR
    p = Path(name)
    return p if p.is_dir() else None


PROMPT_LEN = 32  # the checks' prompts are cut to this many tokens (the speed check's: its workload's)


def model_prompts(model, name, k: int, max_len: int = PROMPT_LEN) -> list[tuple[int, ...]]:
    """k prompts as token-id tuples, each cut to its last max_len tokens (refdec is uncached:
    its cost grows with the prompt, and the checks only need a context, not a long one)."""
    V = model.cfg.vocab_size
    folder = model_folder(name)
    out: list[tuple[int, ...]] = []
    if folder is not None and (folder / "prompts.json").is_file():
        try:
            raw = json.loads((folder / "prompts.json").read_text())
            out = [tuple(int(t) for t in p["ids"])[-max_len:] for p in raw["prompts"]]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise LoopcertError(f"{folder / 'prompts.json'}: unreadable prompts ({e})") from None
        out = [p for p in out if p and max(p) < V]
    if not out:
        if V >= 256:
            out = [tuple(byte_encode(t))[-max_len:] for t in TEXT_POOL]
        else:
            out = [tuple(t % V for t in p) for p in ID_POOL]
    return out[:k]


def long_prompt(model, name, length: int) -> tuple[int, ...]:
    """A prompt of exactly `length` tokens (the checks at depth, proofs/checks/depth.py): the
    model's own prompts whole, one after another (cycled), else the byte texts (byte models) or
    the id pool, cut to `length`."""
    V = model.cfg.vocab_size
    folder = model_folder(name)
    pool: list[tuple[int, ...]] = []
    if folder is not None and (folder / "prompts.json").is_file():
        pool = model_prompts(model, name, 10**6, max_len=10**9)
    if not pool:
        pool = (
            [tuple(byte_encode(t)) for t in TEXT_POOL]
            if V >= 256
            else [tuple(t % V for t in p) for p in ID_POOL]
        )
    stream: list[int] = []
    while len(stream) < length:
        for p in pool:
            stream.extend(p)
    return tuple(stream[:length])
