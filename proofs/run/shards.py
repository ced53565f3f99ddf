"""Split a certification into shards and merge them back.

A certify run is a list of work units with stable ids, in plan order (proofs/run/units.py:
one per sampling case of each setting on each model, one per mutant, one per other check).
`--shard i/n` runs the units whose position k in that order has k mod n == i - 1 and writes their
raw results (sample tallies, check results) with the run's identity to DIR_i/shard.json. `merge`
reads n such files, refuses any whose identity differs (commit, plan, model and its
fingerprint, seed, decoder, device, dtype, time budget) naming the shard and the field,
names missing or repeated shards and missing units (each file's fields are checked first:
proofs/run/shard_schema.py) (with `--plan FILE` every shard samples the
cases and N planned once: proofs/run/planfile.py), and hands the union of the raw results to
the same code that assembles an unsharded certificate: Holm across all cases of a check, one
verdict. Only timings differ from a single run (and what a time budget cut, which depends on
the machine: a unit that stopped at its deadline is flagged in its tally either way).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from proofs.run.shard_schema import check_shard
from refdec.errors import LoopcertError
from refdec.files import read_versioned, write_versioned

SHARD_FILE = "shard.json"
FORMAT = 1
IDENTITY = (
    "commit",
    "plan",
    "plan_hash",
    "model",
    "model_fingerprint",
    "seed",
    "decoder",
    "device",
    "dtype",
    "time_budget",
    "sampling_plan",  # the cases, N and bins it sampled (give every shard --plan FILE: one plan)
    "relative_to",  # --relative-to (None: no engine-relative check)
)


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int

    def __post_init__(self):
        if not (
            isinstance(self.count, int)
            and self.count >= 1
            and isinstance(self.index, int)
            and 1 <= self.index <= self.count
        ):
            raise LoopcertError(f"--shard must be i/n with 1 <= i <= n, got {self.index}/{self.count}")

    @classmethod
    def parse(cls, spec: str) -> Shard:
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(spec))
        if not m:
            raise LoopcertError(f"--shard must look like i/n (e.g. 2/8), got {spec!r}")
        return cls(int(m.group(1)), int(m.group(2)))

    def takes(self, position: int) -> bool:
        """Round robin over the plan order: neighbouring units (one check's cases) spread out."""
        return position % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def plan_hash(plan) -> str:
    """A stable digest of a frozen plan dataclass (its repr lists every field)."""
    return hashlib.sha256(repr(plan).encode()).hexdigest()[:16]


def refuse_other_run(mine: dict, theirs: dict, keys, said: str, other: str, why: str) -> None:
    """Two run identities must agree on `keys`: else a LoopcertError naming the first that differs,
    "{said} KEY MINE, {other} THEIRS: {why}"."""
    key = next((k for k in keys if mine.get(k) != theirs.get(k)), None)
    if key is not None:
        raise LoopcertError(f"{said} {key} {mine.get(key)!r}, {other} {theirs.get(key)!r}: {why}")


def write_shard(out: Path, data: dict) -> Path:
    """OUT/shard.json, through the one artefact writer (refdec.files.write_json); a shard that
    cannot be written is a LoopcertError naming the file and why (the command exits 2)."""
    return write_versioned(Path(out) / SHARD_FILE, "shard", FORMAT, data)


def read_shard(folder: Path) -> dict:
    path = Path(folder) / SHARD_FILE
    missing = f"{folder}: no {SHARD_FILE} (not the --out of a `certify --shard` run)"
    data = read_versioned(path, "shard", FORMAT, "shard", where=str(path), missing=missing)
    check_shard(data, folder)  # every field, before merge trusts one (proofs/run/shard_schema.py)
    data["_folder"] = str(folder)
    return data


def combine(shards: Sequence[dict]) -> tuple[dict, dict]:
    """(identity, {unit id: raw result}) of compatible, complete shards; else a LoopcertError
    naming the shard and what is wrong."""
    if not shards:
        raise LoopcertError("merge needs at least one shard folder")
    first = shards[0]
    ref = first["identity"]
    n = first["shard"][1]
    seen: dict[int, str] = {}
    for s in shards:
        where = f"shard {s['shard'][0]}/{s['shard'][1]} ({s['_folder']})"
        other = f"but shard {first['shard'][0]}/{n} ({first['_folder']}) has"
        refuse_other_run(
            s["identity"], ref, IDENTITY, f"{where} has", other, "shards of different runs cannot be merged"
        )
        if s["shard"][1] != n:
            raise LoopcertError(
                f"{where} is one of {s['shard'][1]} shards, but {first['_folder']} is one of {n}"
            )
        if s["units"] != first["units"]:
            # e.g. a full-plan case chosen otherwise from a law computed with other last bits
            k = next((k for k, (a, b) in enumerate(zip(s["units"], first["units"])) if a != b), None)
            if k is None:
                diff = f"{len(s['units'])} units against {len(first['units'])}"
            else:
                diff = f"unit {k + 1}: {s['units'][k]!r} against {first['units'][k]!r}"
            raise LoopcertError(f"{where} plans other work units than {first['_folder']} ({diff})")
        i = s["shard"][0]
        if i in seen:
            raise LoopcertError(f"shard {i}/{n} given twice: {seen[i]} and {s['_folder']}")
        seen[i] = s["_folder"]
    missing = [f"{i}/{n}" for i in range(1, n + 1) if i not in seen]
    if missing:
        raise LoopcertError(
            f"missing shard(s) {', '.join(missing)} of {n} (got {', '.join(sorted(seen.values()))})"
        )
    results: dict[str, dict] = {}
    for s in shards:
        results.update(s["results"])
    lost = [u for u in first["units"] if u not in results]
    if lost:
        raise LoopcertError(f"work unit(s) {', '.join(lost)} are in no shard's results")
    return ref, results
