"""What the trained model ships with (refdec/weights/default): the weights, data_manifest.json,
the held-out prompts (prompts.json) and train_record.json; `default_prompts` reads the prompts back."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from refdec.errors import LoopcertError
from refdec.files import write_atomic
from refdec.load import DEFAULT_MODEL_DIR, save_model
from refdec.model import LoopedLM

DEFAULT_DIR = DEFAULT_MODEL_DIR


@dataclass(frozen=True)
class Prompt:
    name: str  # "<held-out document>:<byte offset>"
    text: str
    ids: tuple[int, ...]  # the UTF-8 bytes of text


def make_prompts(heldout_docs, n: int = 16, length: int = 192) -> list[dict]:
    """n snippets of about `length` bytes from distinct held-out .py files, each starting at the
    first line of a top-level `def`/`class` (or the file start), cut at a line end, valid UTF-8."""
    files = [(name, d) for name, d in heldout_docs if name.endswith(".py") and len(d) >= 4 * length]
    step = max(len(files) // n, 1)
    out = []
    for name, data in files[::step]:
        text = data.decode("utf-8", errors="ignore")
        at = min((i for i in (text.find("\ndef "), text.find("\nclass ")) if i >= 0), default=0)
        snippet = text[at + 1 if at else 0 :][:length]
        snippet = snippet[: snippet.rfind("\n") + 1] or snippet
        if len(snippet) < length // 3:
            continue
        out.append(
            {
                "name": f"{name}:{len(text[: at + 1 if at else 0].encode())}",
                "text": snippet,
                "ids": list(snippet.encode("utf-8")),
            }
        )
        if len(out) == n:
            break
    return out


def export(
    model: LoopedLM, out_dir: Path, manifest: dict, held: torch.Tensor, heldout_docs, record: dict
) -> None:
    out_dir = Path(out_dir)
    save_model(model, out_dir, dtype="float16")  # computed in float32/64 on load
    text = lambda obj: lambda p: Path(p).write_text(json.dumps(obj, indent=1) + "\n")  # noqa: E731
    write_atomic(out_dir / "data_manifest.json", text(manifest))
    write_atomic(
        out_dir / "prompts.json",
        text({"source": "held-out split of data_manifest.json", "prompts": make_prompts(heldout_docs)}),
    )
    write_atomic(out_dir / "train_record.json", text(record))


def default_prompts(folder: Path | str | None = None) -> list[Prompt]:
    """The fixed held-out prompts shipped with the default model (refdec/weights/default/prompts.json)."""
    path = Path(folder or DEFAULT_DIR) / "prompts.json"
    if not path.is_file():
        raise LoopcertError(f"no prompts file at {path}")
    raw = json.loads(path.read_text())
    return [Prompt(p["name"], p["text"], tuple(p["ids"])) for p in raw["prompts"]]
