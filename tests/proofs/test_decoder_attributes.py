"""One protocol: every attribute certify reads from a decoder is read through one helper of
proofs/decoder_attributes.py (READERS) and listed in docs/decoders.md's one table.

`stray_reads` scans proofs/ (and speed/, which certify's speed check times through) for a
getattr/hasattr of a protocol attribute by name, or of any attribute of a variable that holds a
decoder, outside the helper module; `undocumented` compares READERS with the docs' table. Each is
run on a small synthetic tree or table that breaks it, so each can fail.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import torch

from proofs import decoder_attributes
from proofs.decoder_attributes import READERS

ROOT = Path(__file__).resolve().parents[2]
HELPERS = "proofs/decoder_attributes.py"
SCANNED = ("proofs", "speed")
# names a decoder (or its factory, class or wrapped inner decoder) goes by in loopcert's code
DECODER_NAMES = frozenset({"decoder", "dec", "factory", "owner", "inner", "d"})
# speed.timing times bench's own decoders (fastdec, naive_kv) by their `device`; certify's speed
# check hands it the devices it read through declared_device (proofs/checks/speed.py)
ALLOWED = {("speed/timing.py", "device")}


def stray_reads(root: Path, packages=SCANNED, helpers: str = HELPERS) -> list[tuple[str, int, str]]:
    """(file, line, attribute) of every getattr(x, "name", ...) / hasattr(x, "name") outside
    `helpers` where "name" is a protocol attribute (READERS) or x is a decoder's name
    (DECODER_NAMES); `self` and dunders are not reads of a decoder."""
    found = []
    for pkg in packages:
        for f in sorted((root / pkg).rglob("*.py")):
            rel = f.relative_to(root).as_posix()
            if rel == helpers:
                continue
            for node in ast.walk(ast.parse(f.read_text(), rel)):
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr")
                    and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant)
                    and isinstance(node.args[1].value, str)
                ):
                    continue
                obj, attr = node.args[0], node.args[1].value
                name = obj.id if isinstance(obj, ast.Name) else None
                if name == "self" or attr.startswith("__") or (rel, attr) in ALLOWED:
                    continue
                if attr in READERS or name in DECODER_NAMES:
                    found.append((rel, node.lineno, attr))
    return found


def table_rows(markdown: str, heading: str = "### What certify reads from a decoder") -> dict[str, str]:
    """attribute -> its row, for every row of the first table under `heading` (a row may name
    several attributes in its first cell)."""
    section = markdown.split(heading, 1)[1] if heading in markdown else ""
    rows, started = {}, False
    for line in section.splitlines():
        if line.startswith("|"):
            started = True
            first = line.split("|")[1]
            for attr in re.findall(r"`([a-z_]+)`", first):
                rows[attr] = line
        elif started:
            break
    return rows


def undocumented(markdown: str, readers: dict[str, str] = READERS) -> list[str]:
    """The attributes of `readers` the table lacks, or whose row does not name their helper."""
    rows = table_rows(markdown)
    return sorted(a for a, helper in readers.items() if a not in rows or f"`{helper}`" not in rows[a])


def test_no_decoder_attribute_is_read_outside_its_helper():
    assert stray_reads(ROOT) == []


def test_the_scan_finds_every_kind_of_stray_read(tmp_path):
    files = {
        "proofs/checks/x.py": (
            'hint = getattr(decoder, "seed_hint", None)\n'  # a protocol attribute, a decoder's name
            'ok = hasattr(dec, "prepare")\n'
            'other = getattr(factory, "anything", 1)\n'  # any attribute of a decoder's name
            'cap = getattr(thing, "max_batch", None)\n'  # a protocol attribute, any name
            'mine = getattr(self, "device", "cpu")\n'  # its own attribute: fine
            'who = getattr(decoder, "__name__", "")\n'  # a dunder: fine
            'flag = getattr(args, "verbose", False)\n'  # neither: fine
        ),
        "proofs/decoder_attributes.py": 'x = getattr(decoder, "seed_hint", None)\n',  # the helpers
        "speed/timing.py": 'where = getattr(dec, "device", "cpu")\nk = getattr(dec, "spec", None)\n',
    }
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert stray_reads(tmp_path) == [
        ("proofs/checks/x.py", 1, "seed_hint"),
        ("proofs/checks/x.py", 2, "prepare"),
        ("proofs/checks/x.py", 3, "anything"),
        ("proofs/checks/x.py", 4, "max_batch"),
        ("speed/timing.py", 2, "spec"),
    ]


def test_every_attribute_is_in_the_one_table_with_its_helper():
    assert undocumented((ROOT / "docs" / "decoders.md").read_text()) == []
    for attr, helper in READERS.items():  # every helper named is one, and public
        assert callable(getattr(decoder_attributes, helper)), (attr, helper)


def test_the_table_check_finds_a_missing_row_and_a_wrong_helper():
    md = (
        "intro\n\n### What certify reads from a decoder\n\ntext\n\n"
        "| attribute | type | absent | helper | read by |\n|---|---|---|---|---|\n"
        "| `max_batch` | int | no limit | `declared_max_batch` | draws |\n"
        "| `min_p_order`, `penalty_scope` | str | vLLM's | `declared_sampling` | cases |\n"
        "| `prepare` | callable | none | `some_other_helper` | units |\n"
        "\n| `seed_hint` | a later table does not count | | `declared_seed_hint` | |\n"
    )
    readers = {
        "max_batch": "declared_max_batch",
        "min_p_order": "declared_sampling",
        "penalty_scope": "declared_sampling",
        "prepare": "prepare_decoder",
        "seed_hint": "declared_seed_hint",
    }
    assert undocumented(md, readers) == ["prepare", "seed_hint"]
    assert undocumented("no table here", {"max_batch": "declared_max_batch"}) == ["max_batch"]


def test_one_compute_dtype_reader():
    """greedy's tie tolerance and the exported helper are one function: compute_dtype, else
    fastdec's dtype; proofs.decoders.protocol, where the docs first named it, holds the same one."""
    from proofs.decoders import protocol

    class Named:
        compute_dtype = "torch.bfloat16"

    class Fastdec:
        compute_dtype = None
        dtype = torch.float16

    assert decoder_attributes.declared_compute_dtype(Named()) is torch.bfloat16
    assert decoder_attributes.declared_compute_dtype(Fastdec()) is torch.float16
    assert decoder_attributes.declared_compute_dtype(object()) is None
    assert protocol.declared_compute_dtype is decoder_attributes.declared_compute_dtype
