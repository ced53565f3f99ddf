"""The safetensors files of a published checkpoint: one `model.safetensors` or the shards an
`model.safetensors.index.json` lists, read from their headers (nothing loaded), checked against the
key map, then read tensor by tensor with no pickle anywhere."""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from refdec.checkpoint_keys import Entry
from refdec.config import ModelConfig
from refdec.errors import LoopcertError
from refdec.values import dtype_name

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
# Buffers some exports carry; recomputed from the config instead (docs/checkpoints.md).
SKIPPED = re.compile(r"(^|\.)(rotary_emb\.inv_freq|freqs_cis)$")
FLOAT_DTYPES = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}
DTYPE_NAMES = {v: k for k, v in FLOAT_DTYPES.items()}


@dataclass
class Stored:
    """What a folder's safetensors hold, from their headers alone (nothing loaded)."""

    file_of: dict[str, Path]  # key -> the file holding it
    dtype: dict[str, str]  # key -> safetensors dtype name ("BF16", "F32", "I64", ...)
    shape: dict[str, tuple[int, ...]]

    @property
    def files(self) -> list[Path]:
        return sorted(set(self.file_of.values()))


def read_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """key -> (dtype name, shape) from a safetensors header: 8-byte length, then JSON."""
    try:
        with open(path, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            if not 2 <= n <= 100_000_000:
                raise ValueError(f"implausible header length {n}")
            header = json.loads(fh.read(n))
        header.pop("__metadata__", None)
        return {k: (str(v["dtype"]), tuple(int(s) for s in v["shape"])) for k, v in header.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise LoopcertError(f"{path}: not a readable safetensors file ({e})") from None


def scan(folder: Path) -> Stored:
    single, index = folder / SINGLE, folder / INDEX
    where: dict[str, Path] = {}
    if single.is_file():
        files = {single: None}
    elif index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (ValueError, KeyError, TypeError) as e:
            raise LoopcertError(f"{index}: not a valid safetensors index ({e!r})") from None
        if not isinstance(weight_map, dict) or not weight_map:
            raise LoopcertError(f"{index}: 'weight_map' must be a non-empty object")
        files = {}
        for key, name in weight_map.items():
            if not isinstance(name, str) or Path(name).name != name or not name.endswith(".safetensors"):
                raise LoopcertError(
                    f"{index}: tensor {key!r} maps to {name!r}, not a .safetensors file name in this folder"
                )
            path = folder / name
            if not path.is_file():
                raise LoopcertError(f"{index}: shard {name!r} (holding {key!r}) is missing")
            files.setdefault(path, set()).add(key)
    else:
        raise LoopcertError(f"{folder}: no {SINGLE} or {INDEX}")
    dtype, shape = {}, {}
    for path, listed in files.items():
        header = read_header(path)
        if listed is not None:
            absent, unlisted = sorted(listed - set(header)), sorted(set(header) - listed)
            if absent:
                raise LoopcertError(
                    f"{index}: tensor {absent[0]!r} is listed in shard {path.name!r} but not stored there"
                )
            if unlisted:
                raise LoopcertError(f"{path}: tensor {unlisted[0]!r} is not listed in {INDEX}")
        for key, (dt, sh) in header.items():
            where[key], dtype[key], shape[key] = path, dt, sh
    return Stored(where, dtype, shape)


def check_stored(entries: list[Entry], stored: Stored, cfg: ModelConfig, layout: str) -> None:
    """Missing, unexpected, mis-shaped or non-float tensors, each named."""
    expected = {e.published: e for e in entries}
    present = {k for k in stored.file_of if not SKIPPED.search(k)}
    if cfg.tie_embeddings and "lm_head.weight" in present:
        present.discard("lm_head.weight")  # tied: checked equal to the embedding when loaded
    missing = sorted(set(expected) - present)
    unexpected = sorted(present - set(expected))
    what = f"{stored.files[0].parent} ({layout} layout)"
    if missing:
        hint = " (the config does not tie the head to the embedding)" if missing == ["lm_head.weight"] else ""
        raise LoopcertError(
            f"{what}: missing tensor(s) {missing[:8]}{' ...' if len(missing) > 8 else ''}{hint}"
        )
    if unexpected:
        raise LoopcertError(
            f"{what}: unexpected tensor(s) {unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}"
        )
    for k in sorted(expected):
        if stored.shape[k] != expected[k].shape:
            raise LoopcertError(
                f"{what}: tensor {k!r} has shape {list(stored.shape[k])}, expected "
                f"{list(expected[k].shape)} from config.json"
            )
    for k in sorted(present | ({"lm_head.weight"} & set(stored.file_of))):
        if stored.dtype[k] not in FLOAT_DTYPES:
            raise LoopcertError(
                f"{what}: tensor {k!r} has dtype {stored.dtype[k]}; weights must be "
                f"one of {sorted(FLOAT_DTYPES)}"
            )
    if cfg.tie_embeddings and "lm_head.weight" in stored.file_of:
        emb = entries[0].published
        if stored.shape["lm_head.weight"] != stored.shape[emb]:
            raise LoopcertError(
                f"{what}: tied lm_head.weight has shape "
                f"{list(stored.shape['lm_head.weight'])}, {emb!r} has "
                f"{list(stored.shape[emb])}"
            )


def check_finite(key: str, t: torch.Tensor, source) -> None:
    """A NaN or infinite weight would decode garbage without a word: refuse it, naming it."""
    if t.dtype.is_floating_point and not bool(torch.isfinite(t).all()):
        bad = (~torch.isfinite(t)).nonzero()[0].tolist()
        raise LoopcertError(
            f"{source}: tensor {key!r} holds a non-finite value ({float(t[tuple(bad)])} at index {bad})"
        )


def check_representable(key: str, cast: torch.Tensor, dtype: torch.dtype, source) -> None:
    """A finite weight too large for the requested dtype (1e6 in float16) becomes inf."""
    if not bool(torch.isfinite(cast).all()):
        raise LoopcertError(
            f"{source}: tensor {key!r} overflows {dtype_name(dtype)} "
            "(a finite weight beyond its range); load it in a wider dtype"
        )


def check_header(
    model_shapes: dict[str, tuple[int, ...]], header: dict[str, tuple[str, tuple]], source
) -> None:
    """Missing, unexpected, mis-shaped or non-float tensors, named from the safetensors header,
    before anything the size of the config is allocated (config.json may claim absurd sizes)."""
    missing = sorted(set(model_shapes) - set(header))
    unexpected = sorted(set(header) - set(model_shapes))
    if missing:
        raise LoopcertError(f"{source}: missing tensor(s) {missing}")
    if unexpected:
        raise LoopcertError(f"{source}: unexpected tensor(s) {unexpected}")
    for k, (dt, shape) in sorted(header.items()):
        if tuple(shape) != tuple(model_shapes[k]):
            raise LoopcertError(
                f"{source}: tensor {k!r} has shape {tuple(shape)}, expected {tuple(model_shapes[k])}"
            )
        if dt not in FLOAT_DTYPES:
            raise LoopcertError(f"{source}: tensor {k!r} has non-float dtype {dt}")


class Reader:
    """Tensors by key from the folder's files, each file opened once (no pickle anywhere)."""

    def __init__(self, stored: Stored):
        self.stored = stored
        self.stack = contextlib.ExitStack()
        self.handles: dict[Path, object] = {}

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc) -> None:
        self.stack.close()

    def __call__(self, key: str) -> torch.Tensor:
        path = self.stored.file_of[key]
        try:
            if path not in self.handles:
                self.handles[path] = self.stack.enter_context(
                    safe_open(str(path), framework="pt", device="cpu")
                )
            return self.handles[path].get_tensor(key)
        except (SafetensorError, OSError, ValueError, RuntimeError) as e:
            raise LoopcertError(f"{path}: cannot read tensor {key!r} ({e})") from None
