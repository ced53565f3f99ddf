"""One plan for every machine: `loopcert certify --plan-out FILE` and `--plan FILE` (docs/design.md
section 8, docs/distributed.md).

Which case a plan path samples, its N and its views' bins all come from float64 maths on the
model (proofs/run/cases.py); a machine whose SIMD kernels round otherwise could choose otherwise.
Workers of one run get the parent's plan with the run (fork, or proofs/run/remote.py RunSpec);
shards on other machines get it from a file: `--plan-out` plans once and writes the run's
identity, its work units and every sampled model's choices (cases.setup_record); a run given
`--plan` never rechooses: it takes the cases and N from the file, refuses a file of another run
(naming the field), and refuses to sample a case whose bins its own law would draw otherwise
(cases.planned_cases). The file is plain JSON, written by the one artefact writer.
"""

from __future__ import annotations

from pathlib import Path

from refdec.errors import LoopcertError
from refdec.files import read_json, write_json

FORMAT = 1
# what a plan file and the run given it must share (the shard identity but the time budget,
# which does not choose cases)
SAME = (
    "commit",
    "plan",
    "plan_hash",
    "model",
    "model_fingerprint",
    "seed",
    "decoder",
    "device",
    "dtype",
    "relative_to",
)


def write_plan(path, identity: dict, units: list[str], sampling: dict) -> Path:
    try:
        return write_json(
            Path(path), {"format": FORMAT, "identity": identity, "units": units, "sampling": sampling}
        )
    except (OSError, ValueError) as e:
        raise LoopcertError(f"cannot write the plan to {path}: {e}") from None


def read_plan(path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise LoopcertError(f"--plan {path}: no such file (write one with --plan-out)")
    data = read_json(path, "plan file")
    if not isinstance(data, dict) or data.get("format") != FORMAT or "sampling" not in data:
        raise LoopcertError(f"--plan {path}: not a loopcert plan file of format {FORMAT}")
    data["_path"] = str(path)
    return data


def check_plan(data: dict, identity: dict, units: list[str]) -> None:
    """A LoopcertError unless the plan file was made for this run, naming the first difference."""
    where = f"--plan {data['_path']}"
    for key in SAME:
        if data["identity"].get(key) != identity.get(key):
            raise LoopcertError(
                f"{where} was planned with {key} {data['identity'].get(key)!r}, this run has "
                f"{identity.get(key)!r}: a plan serves only its own run"
            )
    if list(data["units"]) != list(units):
        k = next((k for k, (a, b) in enumerate(zip(data["units"], units)) if a != b), None)
        what = f"{len(data['units'])} units against {len(units)}" if k is None else f"unit {k + 1}"
        raise LoopcertError(f"{where} plans other work units than this run ({what})")
