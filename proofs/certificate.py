"""The certificate as data: what `proofs.run.certify.certify` returns, what certificate.json
holds, what reports/render.py renders (docs/design.md section 9).

One schema, with a version: `to_json` writes it, `from_json` reads it back and refuses a file
of another schema or version by name, so a reader never guesses at an old layout. Every part is
typed: the stamp here, each check a `proofs.result.CheckResult` whose details are its kind's
record (proofs/details.py), read back by kind; `from_json(to_json(c)) == c`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from proofs.record import Record
from proofs.result import CheckResult
from refdec.errors import LoopcertError
from refdec.files import json_text, read_json

SCHEMA = "loopcert-certificate"
SCHEMA_VERSION = 2  # 2: typed details by kind, common fields on the check, a typed stamp


@dataclass(frozen=True)
class Seeds(Record):
    """What each seed of a certify run drives (proofs.run.certify.certificate_stamp)."""

    sampling: str  # "<base> + i for sample i of each case"
    mutants: str
    theorem1_random: int
    greedy: int


@dataclass(frozen=True)
class Stamp(Record):
    """Where a certificate came from: refdec.stamp.stamp's fields, then what a certificate adds."""

    commit: str  # HEAD, "(with uncommitted changes)" when the tree differs
    date: str  # UTC, ISO 8601
    python: str
    torch: str
    numpy: str
    cuda: str
    platform: str
    device: str
    device_name: str
    threads: int  # torch threads
    cpu_count: int | None
    dtype: str
    model: str
    seeds: Seeds
    mode: str  # the plan: quick or full
    decoder: str  # "fastdec" or the --decoder spec
    seed: int  # the base seed
    R: int
    vocab_size: int
    settings: tuple[str, ...]  # the candidate settings certified
    default_depths: tuple[int, int | None]  # fastdec's (d1, d2) for this R; d2 None: none between d1, R
    alpha: float
    target_tv: float
    power: float
    sampling_budget_s: float
    work_units: int
    seconds: float  # the run's wall time (merged: the shards' and the merge's)
    command: str | None = None  # the command line that reruns it (the CLI sets it)
    merged_from: tuple[str, ...] | None = None  # the shard folders `loopcert merge` read
    # the sampler convention the decoder declares; every sampling law is judged under it
    # (refdec.sampling.SAMPLER_ORDERS; absent in a certificate written before: temperature-first)
    sampler_order: str = "temperature-first"
    relative_to: str | None = None  # --relative-to: the engine-relative check's reference decoder
    # the engines' other sampling parameters the decoder declares it honours, and its conventions
    # for them (proofs.decoder_attributes.declared_sampling; None: a certificate written before)
    sampling_fields: tuple[str, ...] | None = None
    sampling_conventions: dict | None = None  # min_p_order, penalty_scope, penalty_window, penalty_sign
    # the plan's cases it was not sampled under, as "<case> (<fields it does not declare>)"
    not_declared: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refusal(Record):
    """A sampling case the decoder's engine refused (proofs.decoders.protocol.Refused): not sampled.
    A refusal of the core parameters (temperature, top_k, top_p) fails its check; one of a case
    that sets the engines' other parameters (refdec.sampling.ENGINE_FIELDS) is named, not failed."""

    check: str
    case: str
    parameters: tuple[str, ...]  # what the refusal is taken to be of (proofs.checks.distribution)
    core: bool  # of a case setting core parameters only: the check failed on it
    message: str  # the engine's


@dataclass(frozen=True)
class Scope(Record):
    """What the verdict covers: the engines' other sampling parameters the decoder declares and does
    not (proofs.decoder_attributes.declared_sampling), the plan's cases it was therefore not
    sampled under, and the cases its engine refused. A PASS says nothing of what is named here."""

    declared: tuple[str, ...]  # ENGINE_FIELDS the decoder declares it honours
    not_declared: tuple[str, ...]  # ENGINE_FIELDS it does not: never sampled
    not_sampled: tuple[str, ...]  # the plan's cases left out, "<case> (<fields>)" (Stamp.not_declared)
    refused: tuple[Refusal, ...] = ()

    @property
    def refused_core(self) -> tuple[Refusal, ...]:
        return tuple(r for r in self.refused if r.core)


@dataclass(frozen=True)
class Certificate:
    verdict: str  # PASS, FAIL, NON-REPRODUCIBLE or INCOMPLETE (proofs.run.certify.verdict_of)
    failed: tuple[str, ...]  # names of the failed checks, in certificate order
    skipped: dict[str, str]  # check name -> why it did not run (CheckResult.skipped)
    stamp: Stamp
    checks: tuple[CheckResult, ...] = field(default=())
    # names of the checks a time budget stopped short of their planned power with no evidence
    # against the decoder (CheckResult.incomplete); () in a certificate written before
    incomplete: tuple[str, ...] = ()
    scope: Scope | None = None  # None: a certificate written before, or a bare one (tests)

    def __post_init__(self):
        if not isinstance(self.stamp, Stamp):
            raise LoopcertError(f"Certificate.stamp must be a Stamp, got {type(self.stamp).__name__}")
        object.__setattr__(self, "failed", tuple(self.failed))
        object.__setattr__(self, "skipped", dict(self.skipped))
        object.__setattr__(self, "checks", tuple(self.checks))
        object.__setattr__(self, "incomplete", tuple(self.incomplete))
        if self.scope is not None and not isinstance(self.scope, Scope):
            raise LoopcertError(f"Certificate.scope must be a Scope, got {type(self.scope).__name__}")
        untyped = [c.name for c in self.checks if c.kind is None]
        if untyped:
            raise LoopcertError(f"a certificate holds typed checks only; untyped: {untyped}")

    @property
    def passed(self) -> bool:
        """PASS only: a failure, a seed that does not reproduce, or a check cut short is not a pass."""
        return self.verdict == "PASS"

    def check(self, name: str) -> CheckResult:
        """The check called `name`; LoopcertError naming the checks there are otherwise."""
        for c in self.checks:
            if c.name == name:
                return c
        raise LoopcertError(f"the certificate has no check {name!r}; it has {[c.name for c in self.checks]}")

    def with_stamp(self, **changes) -> Certificate:
        """This certificate with stamp fields replaced (the CLI adds the command, merge the shards)."""
        return replace(self, stamp=replace(self.stamp, **changes))

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "verdict": self.verdict,
            "passed": self.passed,
            "failed": list(self.failed),
            "incomplete": list(self.incomplete),
            "skipped": dict(self.skipped),
            "scope": None if self.scope is None else self.scope.to_plain(),
            "stamp": self.stamp.to_plain(),
            "checks": [c.to_dict() for c in self.checks],
        }

    def dumps(self) -> str:
        """certificate.json's text: strict JSON (non-finite floats as strings, see refdec.values)."""
        return json_text(self.to_json())

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
                stamp=Stamp.from_plain(data["stamp"], f"{source} stamp"),
                checks=tuple(CheckResult.from_dict(c) for c in data["checks"]),
                # absent in a certificate written before INCOMPLETE and the scope existed
                incomplete=tuple(data.get("incomplete", ())),
                scope=Scope.from_plain(data["scope"], f"{source} scope") if data.get("scope") else None,
            )
        except KeyError as e:
            raise LoopcertError(f"{source} lacks the field {e.args[0]!r}") from None


def read_certificate(path) -> Certificate:
    """certificate.json -> Certificate (LoopcertError naming the file when it is not one)."""
    return Certificate.from_json(read_json(path, "certificate"), str(path))
