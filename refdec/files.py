"""Files on disk, for refdec.load (loopcert's own format) and refdec.checkpoints (published
layouts) alike: atomic writes, config.json, refusing pickles, dtype names, the format marker;
and the one JSON writer and reader of every artefact (certificate, shard, bench report, model
card), with one rule for non-finite floats (refdec.values.jsonable: the strings "inf", "nan").

It imports neither of them: io dispatches published folders to checkpoints, and both read
and write through this module, so the imports run one way (files <- checkpoints <- io).
"""

from __future__ import annotations

import contextlib
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


def write_together(texts: dict[Path, str]) -> None:
    """Several text files of one folder replaced as one: every file is written in full to a
    temporary file first (a full disk, a permission leaves all the old files in place), then each
    is renamed into place in the order given, the last one the record a reader goes by; a rename
    that fails puts back the files renamed before it. So the last file never stands beside an
    older version of the others."""
    made: list[tuple[Path, str]] = []
    umask = os.umask(0)
    os.umask(umask)
    try:
        for path, text in texts.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            os.close(fd)
            made.append((path, tmp))
            Path(tmp).write_text(text)
            os.chmod(tmp, 0o666 & ~umask)
        done: list[tuple[Path, str | None]] = []  # (path, its old version kept aside)
        kept: list[str] = []
        try:
            for path, tmp in made:
                old = None
                if path.is_file():
                    fd, old = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".old")
                    os.close(fd)
                    kept.append(old)
                    _keep_copy(path, old)
                os.replace(tmp, path)
                done.append((path, old))
        except BaseException:
            for path, old in reversed(done):
                if old is not None:
                    os.replace(old, path)
                else:
                    path.unlink(missing_ok=True)
            raise
        finally:
            for old in kept:
                Path(old).unlink(missing_ok=True)
    finally:
        for _, tmp in made:
            Path(tmp).unlink(missing_ok=True)


def _keep_copy(path: Path, old: str) -> None:
    """The current `path` kept at `old` (a hard link where the file system has them)."""
    os.unlink(old)
    try:
        os.link(path, old)
    except OSError:
        Path(old).write_bytes(path.read_bytes())


def check_output_folder(folder, flag: str, files: tuple[str, ...] = (), named=None) -> Path:
    """The folder a command will write `files` in, checked before any work starts (a mistyped
    --out must not cost a finished run): it is a folder or can be made, and a file can be written
    in it; none of `files` is a folder. Else a LoopcertError naming `flag`, the path and why.
    Nothing is left behind: folders it made to try are removed again. `named`: the path the
    message names (default the folder)."""
    folder = Path(folder)
    given = folder if named is None else named
    made: list[Path] = []
    try:
        if folder.exists() and not folder.is_dir():
            raise LoopcertError(f"{flag} {given}: is a file, not a folder")
        up = folder
        while not up.exists() and up.parent != up:
            up = up.parent
        if up.exists() and not up.is_dir():
            raise LoopcertError(f"{flag} {given}: {up} is a file, not a folder")
        for name in files:
            if (folder / name).is_dir():
                raise LoopcertError(f"{flag} {given}: {folder / name} is a folder, where {name} would go")
        for p in reversed([folder, *folder.parents]):
            if not p.exists():
                p.mkdir()
                made.append(p)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".loopcert-probe-", suffix=".tmp")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise LoopcertError(f"{flag} {given}: cannot write there ({e.strerror or e})") from None
    finally:
        for p in reversed(made):
            with contextlib.suppress(OSError):
                p.rmdir()
    return folder


def check_output_file(path, flag: str) -> Path:
    """check_output_folder for one file a command will write: its folder can be written in, and
    the path is not a folder."""
    path = Path(path)
    if path.is_dir():
        raise LoopcertError(f"{flag} {path}: is a folder; give a file name")
    check_output_folder(path.parent, flag, named=path)
    return path


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
