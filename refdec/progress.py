"""The progress callback every long-running check and measurement accepts.

A check calls `progress(line)` with one human-readable line at a time; the CLI prints them,
tests pass nothing (`quiet`). Progress lines are never parsed: results travel as data.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]


def quiet(_line: str) -> None:
    """The progress callback that says nothing."""
