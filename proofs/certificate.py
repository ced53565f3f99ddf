"""The certificate as data: what `proofs.run.certify.certify` returns, what certificate.json
holds, what reports/render.py renders (docs/design.md section 9).

One schema, with a version: `to_json` writes it, `from_json` reads it back and refuses a file
of another schema or version by name, so a reader never guesses at an old layout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from proofs.result import CheckResult
from refdec.errors import LoopcertError
from refdec.values import jsonable

SCHEMA = "loopcert-certificate"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Certificate:
    verdict: str  # PASS, FAIL or NON-REPRODUCIBLE (proofs.run.certify.verdict_of)
    failed: tuple[str, ...]  # names of the failed checks, in certificate order
    skipped: dict[str, str]  # check name -> why it (or part of it) did not run
    stamp: dict  # where it came from: commit, versions, device, dtype, seeds, plan (proofs/stamp.py)
    checks: tuple[CheckResult, ...] = field(default=())

    @property
    def passed(self) -> bool:
        return not self.failed

    def check(self, name: str) -> CheckResult:
        """The check called `name`; LoopcertError naming the checks there are otherwise."""
        for c in self.checks:
            if c.name == name:
                return c
        raise LoopcertError(f"the certificate has no check {name!r}; it has {[c.name for c in self.checks]}")

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "verdict": self.verdict,
            "passed": self.passed,
            "failed": list(self.failed),
            "skipped": dict(self.skipped),
            "stamp": jsonable(self.stamp),
            "checks": [c.to_dict() for c in self.checks],
        }

    def dumps(self) -> str:
        """certificate.json's text: strict JSON (non-finite floats as strings, see refdec.values)."""
        return json.dumps(self.to_json(), indent=1, allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, data, source: str = "certificate") -> Certificate:
        """Read `to_json`'s layout back; another schema or version is refused, naming `source`."""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise LoopcertError(
                f"{source} is not a loopcert certificate of schema {SCHEMA!r} version {SCHEMA_VERSION} "
                "(certificates written before the schema was versioned are not read: certify again)"
            )
        if data.get("schema_version") != SCHEMA_VERSION:
            raise LoopcertError(
                f"{source} has schema_version {data.get('schema_version')!r}; this loopcert reads "
                f"version {SCHEMA_VERSION} (certify again with this version)"
            )
        try:
            return cls(
                verdict=data["verdict"],
                failed=tuple(data["failed"]),
                skipped=dict(data["skipped"]),
                stamp=dict(data["stamp"]),
                checks=tuple(CheckResult.from_dict(c) for c in data["checks"]),
            )
        except KeyError as e:
            raise LoopcertError(f"{source} lacks the field {e.args[0]!r}") from None


def read_certificate(path) -> Certificate:
    """certificate.json -> Certificate (LoopcertError naming the file when it is not one)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise LoopcertError(f"cannot read certificate {path}: {e}") from None
    return Certificate.from_json(data, str(path))
