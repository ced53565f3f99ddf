"""The markdown every report shares: numbers for humans, github tables, a check's verdict word.

Render-only: nothing here computes or judges a figure, it only writes one down.
"""

from __future__ import annotations

import functools
import math

from tabulate import tabulate

from proofs.result import CheckResult

DASH = "—"


def fmt(x, digits: int = 4) -> str:
    """Numbers for humans: None / nan as a dash, small p-values in scientific notation."""
    if x is None:
        return DASH
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, str):
        return DASH if x == "nan" else ("∞" if x == "inf" else x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return DASH
        if math.isinf(x):
            return "∞" if x > 0 else "-∞"
        if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e6):
            return f"{x:.{max(1, digits - 2)}e}"
        return f"{x:.{digits}g}"
    if isinstance(x, (list, tuple)):
        return "(" + ", ".join(fmt(v, digits) for v in x) + ")"
    return str(x)


def cell(text: str) -> str:
    """A table cell's text that cannot break its table: a `|` (a case's or a sampling view's
    name may hold one) escaped, line breaks as spaces."""
    return " ".join(str(text).splitlines()).replace("|", "\\|")


def table(rows: list[list], headers: list[str]) -> str:
    """A github table of `rows` under `headers`, each value through fmt and every cell escaped."""
    return tabulate(
        [[cell(fmt(v)) for v in r] for r in rows],
        headers=[cell(h) for h in headers],
        tablefmt="github",
        disable_numparse=True,
    )


def verdict(passed: bool) -> str:
    return "pass" if passed else "**FAIL**"


def heading(c: CheckResult, title: str) -> str:
    return f"{title}: {outcome(c)}"


def outcome(c: CheckResult) -> str:
    """pass, **FAIL**, or incomplete (its time budget ran out first, nothing against the decoder)."""
    return "incomplete" if getattr(c, "incomplete", None) else verdict(c.passed)


def error_lines(c: CheckResult) -> str:
    return f"\n\nThe check could not run: `{c.error}`" if c.error is not None else ""


def stopped(c: CheckResult, title: str) -> str:
    """The whole section of a check that measured nothing: its heading and the error it stopped on."""
    return heading(c, title) + error_lines(c)


def section(kind: type, title: str | None = None):
    """A section renderer of one kind of details, called as `render(c)`: a check without them (it
    stopped before measuring) is `stopped`, the others `render(c, c.details, title)`. `title`
    None: "### " and the check's name (a section per check of that kind)."""

    def wrap(render):
        @functools.wraps(render)
        def run(c: CheckResult) -> str:
            t = title or f"### {c.name}"
            return render(c, c.details, t) if isinstance(c.details, kind) else stopped(c, t)

        return run

    return wrap
