"""The one return type of every check (docs/design.md section 6: checks return data).

A check states what it measured, the bound it held the measurement to, and whether it
passed; `details` carries whatever a reader needs to reproduce or diagnose it, and `power`
says in words what deviation the check would have caught (statistical checks only).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from refdec.errors import LoopcertError


@dataclass(frozen=True)
class CheckResult:
    name: str
    measured: float
    bound: float
    passed: bool
    details: dict
    power: str | None = None  # e.g. "detects TV >= 0.012 with prob 0.99 at alpha 1e-3"

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise LoopcertError(f"CheckResult.name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.details, dict):
            kind = type(self.details).__name__
            raise LoopcertError(f"CheckResult.details must be a dict, got {kind}")
        # Callers compute these with torch/numpy; store plain Python values so results compare
        # and serialise the same whatever produced them.
        object.__setattr__(self, "measured", float(self.measured))
        object.__setattr__(self, "bound", float(self.bound))
        object.__setattr__(self, "passed", bool(self.passed))

    def to_dict(self) -> dict:
        return _plain(asdict(self))

    def to_json(self, indent: int | None = None) -> str:
        """Strict JSON: non-finite floats are written as the strings "inf", "-inf", "nan"."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False, sort_keys=True)


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, int):
        return x
    if hasattr(x, "tolist"):  # torch tensors, numpy arrays and numpy scalars
        return _plain(x.tolist())
    if isinstance(x, float):
        return x if math.isfinite(x) else str(x)
    return str(x)
