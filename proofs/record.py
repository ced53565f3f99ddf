"""Typed records and their plain JSON data: the one rule every part of a certificate follows
(docs/design.md section 9).

A record is a frozen dataclass whose fields are typed. On construction each value is brought to
its field's type (`coerce`): a list to a tuple, a numpy or torch scalar to a plain number, an int
in a float field to a float, every NaN to the one `math.nan`, a dict in a record-typed field to
that record. `to_plain` writes the record as JSON-able data (refdec.values.jsonable: tuples as
lists, non-finite floats as the strings "inf", "-inf", "nan"); `from_plain` reads it back through
the same coercion, so a float field's "inf" is a float again and a record read back compares
equal to the one written (NaN included: `math.nan is math.nan`). A field the data lacks, or one
the record does not have, is refused by name: an old layout is never half read.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass

from refdec.errors import LoopcertError
from refdec.values import jsonable

NON_FINITE = ("inf", "-inf", "nan")


@functools.cache
def field_types(cls: type) -> tuple[tuple[str, object], ...]:
    """(name, resolved type) of every init field of a record class."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls) if f.init)


def _number(x, where: str, kind: type):
    if isinstance(x, str) and kind is float and x in NON_FINITE:
        return float(x)
    if hasattr(x, "item") and not isinstance(x, (list, tuple, dict)):  # numpy / torch scalar
        x = x.item()
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise LoopcertError(f"{where} must be a number, got {x!r}")
    if kind is int:
        if isinstance(x, float) and not x.is_integer():
            raise LoopcertError(f"{where} must be an integer, got {x!r}")
        return int(x)
    x = float(x)
    return math.nan if math.isnan(x) else x


def canonical(x):
    """A value of an untyped (`object`) field: containers as tuples and dicts, scalars plain."""
    if hasattr(x, "tolist"):  # tensors, arrays, numpy scalars
        x = x.tolist()
    if isinstance(x, (list, tuple)):
        return tuple(canonical(v) for v in x)
    if isinstance(x, dict):
        return {k: canonical(v) for k, v in x.items()}
    if isinstance(x, float) and math.isnan(x):
        return math.nan
    return x


def coerce(tp, x, where: str):
    """`x` as a value of type `tp` (see the module docstring); LoopcertError naming `where`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if x is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        return coerce(options[0], x, where) if len(options) == 1 else canonical(x)
    if tp is typing.Any or tp is object:
        return canonical(x)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(x, tp):
            return x
        if isinstance(x, dict) and issubclass(tp, Record):
            return tp.from_plain(x, where)
        raise LoopcertError(f"{where} must be a {tp.__name__}, got {type(x).__name__}")
    if origin is tuple:
        if hasattr(x, "tolist"):
            x = x.tolist()
        if not isinstance(x, (list, tuple)):
            raise LoopcertError(f"{where} must be a list, got {x!r:.60}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(coerce(args[0], v, f"{where}[{i}]") for i, v in enumerate(x))
        if len(x) != len(args):
            raise LoopcertError(f"{where} must have {len(args)} items, got {len(x)}")
        return tuple(coerce(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, x)))
    if origin is dict:
        if not isinstance(x, dict):
            raise LoopcertError(f"{where} must be a mapping, got {x!r:.60}")
        return {str(k): coerce(args[1], v, f"{where}[{k!r}]") for k, v in x.items()}
    if tp is float or tp is int:
        return _number(x, where, tp)
    if tp is bool:
        if hasattr(x, "item"):  # numpy / torch bool
            x = x.item()
        if not isinstance(x, bool):
            raise LoopcertError(f"{where} must be true or false, got {x!r}")
        return x
    if tp is str:
        if not isinstance(x, str):
            raise LoopcertError(f"{where} must be a string, got {x!r:.60}")
        return x
    return x


@dataclass(frozen=True)
class Record:
    """Base of every typed record of a certificate: coerced on construction, plain data out and in."""

    def __post_init__(self):
        name = type(self).__name__
        for field, tp in field_types(type(self)):
            object.__setattr__(self, field, coerce(tp, getattr(self, field), f"{name}.{field}"))

    def to_plain(self) -> dict:
        return {field: jsonable(_plain(getattr(self, field))) for field, _ in field_types(type(self))}

    @classmethod
    def from_plain(cls, data, where: str | None = None):
        """The inverse of to_plain; unknown or missing fields are refused, naming `where`."""
        where = where or cls.__name__
        if not isinstance(data, dict):
            raise LoopcertError(f"{where} must be a mapping, got {type(data).__name__}")
        known = {f.name: f for f in dataclasses.fields(cls) if f.init}
        extra = sorted(set(data) - set(known))
        if extra:
            raise LoopcertError(f"{where} has unknown field(s) {extra}")
        missing = sorted(
            k
            for k, f in known.items()
            if k not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        if missing:
            raise LoopcertError(f"{where} lacks field(s) {missing}")
        return cls(**{k: coerce(tp, data[k], f"{where}.{k}") for k, tp in field_types(cls) if k in data})


def _plain(x):
    if isinstance(x, Record):
        return x.to_plain()
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x
