"""The one integer check for values a user can pass (STYLE.md principle 14).

`bool` is an `int` in Python, and `True` as a depth or a count is always a mistake, so it is
refused; numpy integers are accepted (and returned as plain ints).
"""

from __future__ import annotations

import numbers

from refdec.errors import LoopcertError


def is_int(value, minimum: int | None = None) -> bool:
    """An integer (not a bool), at least `minimum` when one is given."""
    return (isinstance(value, numbers.Integral) and not isinstance(value, bool)
            and (minimum is None or bool(value >= minimum)))


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
