"""The one return type of every check (docs/design.md section 6: checks return data).

A check states what it measured, the bound it held the measurement to, and whether it
passed; `details` is its kind's typed record (proofs/details.py) with whatever a reader needs to
reproduce or diagnose it, and `power` says in words what deviation the check would have caught
(statistical checks only). What every kind can have is a field here: the wall time, the error
that stopped it, and why the whole check was skipped or does not apply.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields, replace

from proofs.details import KINDS, Details
from proofs.record import coerce
from refdec.errors import LoopcertError
from refdec.values import jsonable


@dataclass(frozen=True)
class CheckResult:
    name: str
    measured: float
    bound: float
    passed: bool
    # The kind's record; None when the check measured nothing (skipped, not applicable, or it
    # could not run: `error`). A plain dict only for results that never enter a certificate
    # (the bench gates' figures, proofs/gates/baseline.py): those have no kind.
    details: Details | dict | None = None
    power: str | None = None  # e.g. "detects TV >= 0.012 with prob 0.99 at alpha 1e-3"
    kind: str | None = None  # details.kind; given only when details is None
    seconds: float | None = None  # wall time of the check (proofs.run.units runs it timed)
    error: str | None = None  # what stopped it, or what it lacked to have power: it then failed
    skipped: str | None = None  # why the whole check did not run (it passes; the certificate names it)
    not_applicable: str | None = None  # why the whole check does not apply to the candidate
    # why it stopped short of its planned power with no evidence against the decoder (its time
    # budget ran out), and the power it reached against the plan: not passed, and not failed either
    incomplete: str | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise LoopcertError(f"CheckResult.name must be a non-empty string, got {self.name!r}")
        d = self.details
        if isinstance(d, Details):
            if self.kind not in (None, d.kind):
                raise LoopcertError(f"check {self.name!r}: kind {self.kind!r} but {d.kind!r} details")
            object.__setattr__(self, "kind", d.kind)
        elif d is None:
            if self.kind not in KINDS:
                raise LoopcertError(
                    f"check {self.name!r} has no details: its kind must be one of {sorted(KINDS)}, "
                    f"got {self.kind!r}"
                )
        elif not isinstance(d, dict):
            raise LoopcertError(f"CheckResult.details must be a Details record, got {type(d).__name__}")
        elif self.kind is not None:
            raise LoopcertError(f"check {self.name!r} of kind {self.kind!r} has untyped details")
        # Callers compute these with torch/numpy; store plain Python values so results compare
        # and serialise the same whatever produced them.
        for name in ("measured", "bound", "seconds"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, coerce(float, value, f"check {self.name!r}: {name}"))
        object.__setattr__(self, "passed", bool(self.passed))
        if self.incomplete is not None and self.passed:
            raise LoopcertError(f"check {self.name!r} passed, so it cannot be incomplete ({self.incomplete})")

    @property
    def failed(self) -> bool:
        """Not passed, and not merely incomplete: evidence against the decoder, or no way to get any."""
        return not self.passed and self.incomplete is None

    @classmethod
    def errored(cls, name: str, kind: str, error: BaseException) -> CheckResult:
        """A check that could not run has failed: the result names the exception."""
        return cls(name, math.nan, math.nan, False, kind=kind, error=f"{type(error).__name__}: {error}")

    def timed(self, seconds: float) -> CheckResult:
        """This result with the wall time its check took."""
        return replace(self, seconds=float(seconds))

    def with_details(self, **changes) -> CheckResult:
        """This result with fields of its details replaced (LoopcertError naming an unknown one)."""
        if not isinstance(self.details, Details):
            raise LoopcertError(f"check {self.name!r} has no typed details to change")
        unknown = sorted(set(changes) - {f.name for f in fields(self.details)})
        if unknown:
            raise LoopcertError(f"{type(self.details).__name__} has no field(s) {unknown}")
        return replace(self, details=replace(self.details, **changes))

    def to_dict(self) -> dict:
        d = self.details
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "details"}
        out["details"] = d.to_plain() if isinstance(d, Details) else d
        return jsonable(out)

    @classmethod
    def from_dict(cls, data: dict) -> CheckResult:
        """The inverse of to_dict (a certificate's, a shard's or a worker's result read back): the
        details by kind; unknown and missing fields are refused by name."""
        if not isinstance(data, dict):
            raise LoopcertError(f"a check result must be a mapping, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        extra = sorted(set(data) - known)
        if extra:
            raise LoopcertError(f"a check result has unknown field(s) {extra}")
        name = data.get("name")
        missing = sorted(k for k in ("name", "measured", "bound", "passed", "kind") if k not in data)
        if missing:
            raise LoopcertError(f"check result {name!r} lacks field(s) {missing}")
        kind, details = data["kind"], data.get("details")
        if kind is not None and kind not in KINDS:
            raise LoopcertError(f"check result {name!r} has unknown kind {kind!r}; known: {sorted(KINDS)}")
        if kind is not None and details is not None:
            details = KINDS[kind].from_plain(details, f"check {name!r} details")
        floats = {k: coerce(float | None, data.get(k), f"check {name!r}: {k}") for k in ("measured", "bound")}
        return cls(**{**data, **floats, "details": details})

    def to_json(self, indent: int | None = None) -> str:
        """Strict JSON: non-finite floats are written as the strings "inf", "-inf", "nan"."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False, sort_keys=True)
