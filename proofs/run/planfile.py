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

from proofs.run.shards import IDENTITY, refuse_other_run
from refdec.errors import LoopcertError
from refdec.files import read_versioned, write_versioned

FORMAT = 1
# what a plan file and the run given it must share: the shard identity but the time budget,
# which does not choose cases, and the sampling plan, which is the file's to give
SAME = tuple(k for k in IDENTITY if k not in ("time_budget", "sampling_plan"))


def write_plan(path, identity: dict, units: list[str], sampling: dict) -> Path:
    return write_versioned(
        Path(path), "plan", FORMAT, {"identity": identity, "units": units, "sampling": sampling}
    )


def read_plan(path) -> dict:
    path = Path(path)
    missing = f"--plan {path}: no such file (write one with --plan-out)"
    data = read_versioned(path, "plan", FORMAT, "sampling", where=f"--plan {path}", missing=missing)
    data["_path"] = str(path)
    return data


def check_plan(data: dict, identity: dict, units: list[str]) -> None:
    """A LoopcertError unless the plan file was made for this run, naming the first difference."""
    where = f"--plan {data['_path']}"
    said, why = f"{where} was planned with", "a plan serves only its own run"
    refuse_other_run(data["identity"], identity, SAME, said, "this run has", why)
    if list(data["units"]) != list(units):
        k = next((k for k, (a, b) in enumerate(zip(data["units"], units)) if a != b), None)
        what = f"{len(data['units'])} units against {len(units)}" if k is None else f"unit {k + 1}"
        raise LoopcertError(f"{where} plans other work units than this run ({what})")
