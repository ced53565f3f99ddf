"""Files on disk, for refdec.load (loopcert's own format) and refdec.checkpoints (published
layouts) alike: atomic writes, config.json, refusing pickles, dtype names, the format marker;
and the one JSON writer and reader of every artefact (certificate, shard, bench report, model
card), with one rule for non-finite floats (refdec.values.jsonable: the strings "inf", "nan").

It imports neither of them: io dispatches published folders to checkpoints, and both read
and write through this module, so the imports run one way (files <- checkpoints <- io).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch

from refdec.errors import LoopcertError
from refdec.values import jsonable

FORMAT = "loopcert"  # config.json's "format" in loopcert's own folders (refdec.load)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def parse_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise LoopcertError(f"unknown dtype {dtype!r}; choose one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def write_atomic(path: Path, write) -> None:
    """Write via a temporary file in the same folder, then rename: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; the result gets the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def json_text(data) -> str:
    """An artefact's strict JSON text: jsonable values (non-finite floats as "inf" / "-inf" /
    "nan"), one space of indent, a final newline. Readers of typed records turn those strings
    back into floats (proofs/record.py)."""
    return json.dumps(jsonable(data), indent=1, allow_nan=False) + "\n"


def write_json(path, data) -> Path:
    """Write an artefact atomically; its text is made before the file is touched, so a value
    that cannot be written leaves the previous file in place."""
    path = Path(path)
    text = json_text(data)
    write_atomic(path, lambda tmp: Path(tmp).write_text(text))
    return path


def read_json(path, what: str):
    """The JSON of an artefact; LoopcertError naming `what` and the file when it cannot be read."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise LoopcertError(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise LoopcertError(f"{path}: cannot read this {what} ({e})") from None


def write_versioned(path, what: str, fmt: int, data: dict) -> Path:
    """`data` as a loopcert artefact of format `fmt` ({"format": fmt, **data}, through write_json);
    a LoopcertError naming `what` and the file when it cannot be written."""
    try:
        return write_json(path, {"format": fmt, **data})
    except (OSError, ValueError) as e:
        raise LoopcertError(f"cannot write the {what} to {path}: {e}") from None


def read_versioned(path, what: str, fmt: int, key: str, *, where: str, missing: str) -> dict:
    """A loopcert artefact of format `fmt` holding `key`; else a LoopcertError: `missing` when
    there is no file, "{where}: not a loopcert {what} file of format {fmt}" when it is another."""
    path = Path(path)
    if not path.is_file():
        raise LoopcertError(missing)
    data = read_json(path, f"{what} file")
    if not isinstance(data, dict) or data.get("format") != fmt or key not in data:
        raise LoopcertError(f"{where}: not a loopcert {what} file of format {fmt}")
    return data


def read_config(folder: Path) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise LoopcertError(f"{folder}: no config.json")
    try:
        raw = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LoopcertError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise LoopcertError(f"{path}: must hold a JSON object, got {type(raw).__name__} {raw!r:.80}")
    return raw


def refuse_pickles(folder: Path) -> None:
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise LoopcertError(f"{folder}: refusing pickle file(s) {pickles}; loopcert reads safetensors only")
