"""The one integer check and the one number-in-a-range check for values a user can pass.

`bool` is an `int` in Python, and `True` as a depth, a count or a probability is always a
mistake, so it is refused; numpy integers and floats are accepted (and returned as plain ones).
NaN and infinities are never in range.
"""

from __future__ import annotations

import math
import numbers

from refdec.errors import LoopcertError


def is_int(value, minimum: int | None = None) -> bool:
    """An integer (not a bool), at least `minimum` when one is given."""
    return (
        isinstance(value, numbers.Integral)
        and not isinstance(value, bool)
        and (minimum is None or bool(value >= minimum))
    )


def check_int(name: str, value, minimum: int | None = None) -> int:
    """`value` as an int, or LoopcertError naming `name` and the bad value."""
    if not is_int(value, minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise LoopcertError(f"{name} must be an integer{bound}, got {value!r}")
    return int(value)


def check_seed(seed, name: str = "seed") -> int:
    """A torch.Generator seed: an integer in [0, 2**64) (manual_seed raises a bare ValueError past it)."""
    if check_int(name, seed, 0) >= 2**64:
        raise LoopcertError(f"{name} must be < 2**64 (a torch.Generator seed), got {seed!r}")
    return int(seed)


def is_number(
    value,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> bool:
    """A finite real number (not a bool) in [low, high]; an open end excludes its bound."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        return False
    if low is not None and (value <= low if low_open else value < low):
        return False
    return high is None or bool(value < high if high_open else value <= high)


def number_range(
    low: float | None = None, high: float | None = None, *, low_open: bool = False, high_open: bool = False
) -> str:
    """What `is_number` with these bounds accepts, in words: "a finite number in (0, 1]"."""
    if low is not None and high is not None:
        return f"a finite number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f"a finite number {'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"a finite number {'<' if high_open else '<='} {high:g}"
    return "a finite number"


def check_number(
    name: str,
    value,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """`value` as a float, or LoopcertError naming `name`, the range and the bad value."""
    if not is_number(value, low, high, low_open=low_open, high_open=high_open):
        allowed = number_range(low, high, low_open=low_open, high_open=high_open)
        raise LoopcertError(f"{name} must be {allowed}, got {value!r}")
    return float(value)
