"""The one return type of every check (docs/design.md section 6: checks return data).

A check states what it measured, the bound it held the measurement to, and whether it
passed; `details` carries whatever a reader needs to reproduce or diagnose it, and `power`
says in words what deviation the check would have caught (statistical checks only).
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, fields, replace

from refdec.errors import LoopcertError
from refdec.values import jsonable


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

    @classmethod
    def errored(cls, name: str, error: BaseException) -> CheckResult:
        """A check that could not run has failed: the result names the exception."""
        return cls(name, math.nan, math.nan, False, {"error": f"{type(error).__name__}: {error}"})

    def timed(self, seconds: float) -> CheckResult:
        """This result with the wall time its check took."""
        return self.with_details(seconds=float(seconds))

    def with_details(self, **extra) -> CheckResult:
        """This result with `extra` added to (or replacing keys of) its details."""
        return replace(self, details={**self.details, **extra})

    def to_dict(self) -> dict:
        return jsonable(asdict(self))

    @classmethod
    def from_dict(cls, data: dict) -> CheckResult:
        """The inverse of to_dict (a shard's or a worker's result read back); unknown keys are
        refused by name."""
        known = {f.name for f in fields(cls)}
        extra = sorted(set(data) - known)
        if extra:
            raise LoopcertError(f"a check result has unknown field(s) {extra}")
        missing = sorted(f.name for f in fields(cls) if f.name not in data and f.default is MISSING)
        if missing:
            raise LoopcertError(f"check result {data.get('name')!r} lacks field(s) {missing}")
        return cls(**{k: _finite_or_str(v) if k in ("measured", "bound") else v for k, v in data.items()})

    def to_json(self, indent: int | None = None) -> str:
        """Strict JSON: non-finite floats are written as the strings "inf", "-inf", "nan"."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False, sort_keys=True)


def _finite_or_str(x):
    """to_dict writes a non-finite measured/bound as "nan" / "inf": read it back as a float."""
    return float(x) if isinstance(x, str) else x
