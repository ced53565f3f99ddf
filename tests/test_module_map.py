"""docs/design.md's map of where each idea lives names every module of the installed packages.

A newcomer finds a file by reading the map; a module the map does not name is one nobody can find
that way, and a row naming a file that no longer exists sends them nowhere. The map is the table
under "Where each idea lives" in section 1: its first cell names files in backticks, a path with a
folder (`proofs/run/plan.py`) or a bare name beside one (`costs.py` after `speed/timing.py`:
the same folder), a folder (`loopcert/serve/`: every module in it) or a pattern
(`loopcert/commands/<name>.py`: every module of that folder). `__init__.py` files are the packages
themselves and need no row. Both directions are checked on small trees that break them, so the
check can fail.
"""

from __future__ import annotations

import re
from pathlib import Path

from test_imports import LAYERS

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
START = "Where each idea lives"


def map_rows(text: str) -> list[str]:
    """The first cells of the map's table rows."""
    lines = text[text.index(START) :].splitlines()
    rows, seen_table = [], False
    for line in lines[1:]:
        if line.startswith("|"):
            seen_table = True
            cell = line.split("|")[1].strip()
            if cell not in ("file", "---"):
                rows.append(cell)
        elif seen_table and line.strip():
            break
    return rows


def named(rows: list[str]) -> tuple[set[str], set[str]]:
    """-> (files named, folders covered whole) as paths relative to the root."""
    files, folders = set(), set()
    for cell in rows:
        folder = ""
        for token in re.findall(r"`([^`]+)`", cell):
            if token.endswith("/"):
                folders.add(token.rstrip("/"))
                continue
            if "/" in token:
                folder, _, name = token.rpartition("/")
            else:
                name = token
            if name == "<name>.py":
                folders.add(folder)
            elif name.endswith(".py"):
                files.add(f"{folder}/{name}" if folder else name)
    return files, folders


def modules(root: Path, packages=LAYERS) -> set[str]:
    """Every module file of the packages (not __init__.py), relative to root."""
    return {
        f.relative_to(root).as_posix()
        for pkg in packages
        for f in (root / pkg).rglob("*.py")
        if f.name != "__init__.py"
    }


def unmapped(root: Path, text: str, packages=LAYERS) -> tuple[list[str], list[str]]:
    """-> (modules the map does not name, files the map names that do not exist)."""
    files, folders = named(map_rows(text))
    mods = modules(root, packages)
    missing = sorted(m for m in mods if m not in files and m.rpartition("/")[0] not in folders)
    stale = sorted(f for f in files if not (root / f).is_file())
    return missing, stale


def test_the_map_names_every_module_and_nothing_else():
    missing, stale = unmapped(ROOT, DESIGN.read_text())
    assert not missing, f"modules docs/design.md's map does not name: {missing}"
    assert not stale, f"files docs/design.md's map names that do not exist: {stale}"


SMALL_MAP = """# design
Where each idea lives:

| file | what it holds |
|---|---|
| `pkg/a.py`, `b.py` | two modules of one folder |
| `pkg/cmd/<name>.py` | one per command |
| `pkg/serve/` | the server |

**Tests.** text after the table names `pkg/other.py`, which does not count.
"""


def small_tree(root: Path, names: list[str]) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")


def test_a_complete_small_map_passes(tmp_path):
    small_tree(tmp_path, ["pkg/__init__.py", "pkg/a.py", "pkg/b.py", "pkg/cmd/run.py", "pkg/serve/app.py"])
    assert unmapped(tmp_path, SMALL_MAP, ("pkg",)) == ([], [])


def test_a_module_missing_from_the_map_fails(tmp_path):
    small_tree(tmp_path, ["pkg/a.py", "pkg/b.py", "pkg/c.py", "pkg/other.py", "pkg/sub/d.py"])
    missing, _ = unmapped(tmp_path, SMALL_MAP, ("pkg",))
    assert missing == ["pkg/c.py", "pkg/other.py", "pkg/sub/d.py"]


def test_a_row_naming_a_removed_file_fails(tmp_path):
    small_tree(tmp_path, ["pkg/a.py"])
    _, stale = unmapped(tmp_path, SMALL_MAP, ("pkg",))
    assert stale == ["pkg/b.py"]
