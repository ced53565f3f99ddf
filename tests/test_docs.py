"""The documentation a newcomer walks: README.md short (at most 200 lines: what it is, the two
commands, links), no machine paths (/work/..., /home/...) and no numbers of this project's own
issues in README.md and docs/*.md (references to other projects' issues and PRs, `llama.cpp PR
#25994`, `vllm #42744`, stay), and docs/measurements.md's contents list naming every section with
its date and command; every link to a heading (`file.md#anchor`) reaches one. Each rule is also run
on a text that breaks it, which it must reject.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 200

MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|home|Users|root)/")
# "issue 36", "issues 29-31", "Issue 37's": the word issue and a number is always our tracker's
OUR_ISSUE = re.compile(r"\bissues?\s+#?\d+", re.I)
# a bare #N is another project's only with its project or "PR" just before it (line breaks allowed)
OTHER_PROJECT = r"(?:PRs?|pull|vllm|sglang|transformers|llama\.cpp|mlx-lm|mlx|openvino|pytorch|torch|ray)"
HASH_NUMBER = re.compile(r"(?<![\w&/])#(\d+)\b")
THEIRS = re.compile(OTHER_PROJECT + r"[\s,(]*(?:PRs?\s*)?#\d+$", re.I)


def docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def machine_paths(text: str) -> list[str]:
    """Lines naming a path of one machine."""
    return [line.strip() for line in text.splitlines() if MACHINE_PATH.search(line)]


def our_issue_numbers(text: str) -> list[str]:
    """Each mention of an issue of this project: "issue N", or a #N without another project's name
    (or PR) just before it."""
    found = [m.group(0) for m in OUR_ISSUE.finditer(text)]
    for m in HASH_NUMBER.finditer(text):
        if not THEIRS.search(text[max(0, m.start() - 40) : m.end()]):
            found.append(text[max(0, m.start() - 20) : m.end()].replace("\n", " "))
    return found


def contents_gaps(text: str) -> list[str]:
    """Sections of a measurements page its contents list (a table under `## Contents`: a link to each
    section, the date it was measured, the command in backticks) leaves out or lists without date
    or command."""
    heads = [h for h in re.findall(r"^## (.+)$", text, flags=re.M) if h != "Contents"]
    if "## Contents" not in text:
        return ["no ## Contents"]
    body = text.split("## Contents", 1)[1].split("\n## ", 1)[0]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| \[(.+?)\]\(#[^)]+\) \|(.*)$", body, flags=re.M)}
    gaps = [h for h in heads if h not in rows]
    gaps += [h for h, rest in rows.items() if not (re.search(r"\d{4}-\d\d-\d\d", rest) and "`" in rest)]
    gaps += [h for h in rows if h not in heads]
    return gaps


def readme_too_long(path: Path) -> str | None:
    n = len(path.read_text().splitlines())
    return (
        f"{path.name} has {n} lines (at most {README_MAX_LINES}: details go to docs/)"
        if n > README_MAX_LINES
        else None
    )


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_anchors(pages: dict[str, str]) -> list[str]:
    """Links `[..](file.md#anchor)` (or `(#anchor)`) among `pages` (posix path -> text) to a heading
    that page does not have."""
    anchors = {path: {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)} for path, text in pages.items()}
    out = []
    for path, text in pages.items():
        for m in re.finditer(r"\]\(([^)#\s]*)#([^)\s]+)\)", text):
            target = posixpath.normpath(posixpath.join(posixpath.dirname(path), m[1])) if m[1] else path
            if target in anchors and m[2] not in anchors[target]:
                out.append(f"{path} -> {target}#{m[2]}")
    return out


def test_every_link_to_a_heading_reaches_one():
    pages = {p.relative_to(ROOT).as_posix(): p.read_text() for p in docs()}
    assert broken_anchors(pages) == []


def test_the_readme_is_short():
    assert readme_too_long(ROOT / "README.md") is None, readme_too_long(ROOT / "README.md")


@pytest.mark.parametrize("path", docs(), ids=lambda p: p.name)
def test_no_machine_paths_and_no_issue_numbers_in_the_docs(path):
    text = path.read_text()
    assert not machine_paths(text), (path.name, machine_paths(text))
    assert not our_issue_numbers(text), (path.name, our_issue_numbers(text))


def test_the_measurements_contents_list_every_section_with_date_and_command():
    assert not contents_gaps((ROOT / "docs" / "measurements.md").read_text())


def test_the_rules_reject_what_they_are_for(tmp_path):
    assert machine_paths("logs in `/work/scale-logs/`\nfine") == ["logs in `/work/scale-logs/`"]
    assert machine_paths("see /home/me/x") and machine_paths("(/Users/a/b)")
    assert not machine_paths(
        "`loopcert certify /models/ckpt`, `/usr/bin/time -v`, `~/.cache/work/x`, a/work/b"
    )
    for ours in ("(issue 36)", "Issue 37's mutants", "issues 29-31 merged", "see #38", "(#41)", "issue #7"):
        assert our_issue_numbers(ours), ours
    for theirs in (
        "llama.cpp PR #25994",
        "(vllm #42744)",
        "sglang PR #33643",
        "(PR\n#29823)",
        "transformers #47912, sglang #31599",
        "vLLM Model Runner V2's one stream, PR #47386",
        "`#include`",
        "&#35;",
    ):
        assert not our_issue_numbers(theirs), theirs
    page = "# M\n\n## Contents\n\n| section | measured | command |\n|---|---|---|\n"
    page += "| [A](#a) | 2026-12-01 | `tox -e py` |\n| [B](#b) | some day | `x` |\n\n## A\n\n## B\n\n## C\n"
    assert contents_gaps(page) == ["C", "B"]
    assert contents_gaps("# M\n\n## A\n") == ["no ## Contents"]
    assert contents_gaps(page.replace("some day", "2026-12-02").replace("## C\n", "")) == []
    pages = {
        "README.md": "# R\n[a](docs/m.md#a-b-c) [b](docs/m.md#gone) [c](#r) [d](docs/other.md#x)\n",
        "docs/m.md": "# M\n## A: b (c)\n[e](../README.md#r) [f](#nope) [g](m.md#m)\n",
    }
    assert broken_anchors(pages) == ["README.md -> docs/m.md#gone", "docs/m.md -> docs/m.md#nope"]

    readme = tmp_path / "README.md"
    readme.write_text("line\n" * README_MAX_LINES)
    assert readme_too_long(readme) is None
    readme.write_text("line\n" * (README_MAX_LINES + 1))
    assert "201 lines" in readme_too_long(readme)
