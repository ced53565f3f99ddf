"""The training data: the running interpreter's standard library `.py` sources plus the rendered
`pydoc_data` topics, a fixed sorted document list split by a hash of each name (`split_of`), its
manifest (data_manifest.json), and the windows the loop and the evaluation draw from it."""

from __future__ import annotations

import ast
import hashlib
import sys
import sysconfig
from pathlib import Path

import torch

from refdec.errors import LoopcertError

HELDOUT_EVERY = 20  # one document in 20 is held out (split_of)


def split_of(name: str) -> str:
    """'heldout' for one document name in HELDOUT_EVERY (by sha256 of the name), else 'train'."""
    return "heldout" if hashlib.sha256(name.encode()).digest()[0] % HELDOUT_EVERY == 0 else "train"


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def collect_documents(root: Path | None = None) -> list[tuple[str, bytes]]:
    """Sorted (name, bytes): every .py under root (no site-packages, no caches), and, for the
    real stdlib, each pydoc_data topic rendered as text under the name 'pydoc_data/topics/<key>'."""
    root = Path(root) if root is not None else stdlib_root()
    if not root.is_dir():
        raise LoopcertError(f"data root {str(root)!r} is not a directory")
    docs = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if "site-packages" in rel.split("/") or "__pycache__" in rel.split("/") or not path.is_file():
            continue
        docs.append((rel, path.read_bytes()))
    topics = root / "pydoc_data" / "topics.py"
    if topics.is_file():
        for key, text in pydoc_topics(topics).items():
            docs.append((f"pydoc_data/topics/{key}", text.encode("utf-8")))
    docs.sort()
    if not docs:
        raise LoopcertError(f"no .py files under {root}")
    return docs


def pydoc_topics(path: Path) -> dict[str, str]:
    """The `topics = {...}` dict of a pydoc_data/topics.py, read as data (ast.literal_eval of the
    assigned literal: nothing in the file runs). A file without that literal gives {}; one whose
    `topics` is not a dict of strings is refused by name."""
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (SyntaxError, ValueError) as e:
        raise LoopcertError(f"{path}: not Python source ({e})") from None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "topics" for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                raise LoopcertError(
                    f"{path}: `topics` is not a literal (refused: it is read as data)"
                ) from None
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise LoopcertError(f"{path}: `topics` must be a dict of strings")
            return value
    return {}


def split_documents(docs) -> dict[str, list[tuple[str, bytes]]]:
    out: dict[str, list[tuple[str, bytes]]] = {"train": [], "heldout": []}
    for name, data in docs:
        out[split_of(name)].append((name, data))
    return out


def concat(docs) -> torch.Tensor:
    """Documents joined by a blank line, as a uint8 tensor of bytes."""
    return torch.frombuffer(bytearray(b"\n\n".join(d for _, d in docs)), dtype=torch.uint8)


def build_manifest(docs, root: Path) -> dict:
    splits = split_documents(docs)
    listing = "".join(f"{split_of(n)}\t{n}\t{hashlib.sha256(d).hexdigest()}\n" for n, d in docs)
    return {
        "python_version": sys.version.split()[0],
        "python_implementation": sys.implementation.name,
        "stdlib_root": str(root),
        "split_rule": f"heldout iff sha256(name)[0] % {HELDOUT_EVERY} == 0",
        "join": "documents joined by b'\\n\\n' in sorted name order",
        "n_documents": {k: len(v) for k, v in splits.items()},
        "n_bytes": {k: sum(len(d) for _, d in v) for k, v in splits.items()},
        "n_topics": sum(1 for n, _ in docs if n.startswith("pydoc_data/topics/")),
        # sha256 of the lines "split<TAB>name<TAB>sha256(content)\n": the list and the contents.
        "sha256": hashlib.sha256(listing.encode()).hexdigest(),
        "documents": [[n, split_of(n), len(d), hashlib.sha256(d).hexdigest()] for n, d in docs],
    }


def sample_batch(data: torch.Tensor, batch_size: int, seq_len: int, gen: torch.Generator) -> torch.Tensor:
    """(B, seq_len + 1) random windows of `data` as int64 token ids."""
    starts = torch.randint(0, data.numel() - seq_len - 1, (batch_size,), generator=gen)
    return data[starts[:, None] + torch.arange(seq_len + 1)].long()


def heldout_windows(data: torch.Tensor, n: int, length: int) -> torch.Tensor:
    """(n, length) evenly spaced windows of the held-out bytes: deterministic, no RNG."""
    if data.numel() < length + 1:
        raise LoopcertError(f"held-out text of {data.numel()} bytes is shorter than one window")
    step = (data.numel() - length - 1) // max(n - 1, 1)
    return torch.stack([data[i * step : i * step + length] for i in range(n)]).long()
