"""docs/distributed.md's SLURM recipe, run as it stands: its two bash blocks, with `srun` and
`sbatch` replaced by shims that run each command here (the array's tasks one after another) and
`loopcert` by one that runs the reduced shard plan on the tiny model and the CPU. The merged
certificate equals an unsharded run's apart from timings. Slow (nightly): ten processes."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from plans import SHARD_PLAN, untimed

import proofs.run.plan as plan_mod
from loopcert.cli import main

pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parents[3] / "docs" / "distributed.md"
PLANS_PY = Path(__file__).resolve().parents[2] / "plans.py"

LOOPCERT = f"""#!{sys.executable}
# the recipe's loopcert, on the reduced shard plan, the tiny model and the CPU
import importlib.util, sys
spec = importlib.util.spec_from_file_location("plans", {str(PLANS_PY)!r})
plans = importlib.util.module_from_spec(spec); spec.loader.exec_module(plans)
import proofs.run.plan as plan_mod
plan_mod.PLANS["quick"] = plans.SHARD_PLAN
swap = {{"/models/ouro-1.4b": "tiny-ouro", "--full": "--quick", "cuda": "cpu", "bfloat16": "float32"}}
from loopcert.cli import main
sys.exit(main([swap.get(a, a) for a in sys.argv[1:]]))
"""
SRUN = """#!/bin/bash
# srun OPTIONS... COMMAND...: run COMMAND here
while [[ "$1" == --* ]]; do shift; done
exec "$@"
"""
SBATCH = """#!/bin/bash
# sbatch [--parsable] [--dependency=...] (--wrap CMD | SCRIPT): run it here, now (in order)
set -e
wrap=""; script=""
while [ $# -gt 0 ]; do
  case "$1" in
    --wrap) wrap="$2"; shift 2;;
    --*) shift;;
    *) script="$1"; shift;;
  esac
done
if [ -n "$wrap" ]; then bash -c "$wrap" >&2; echo 2; exit 0; fi
range=$(sed -n 's/^#SBATCH .*--array=\\([0-9]*-[0-9]*\\).*/\\1/p' "$script")
for i in $(seq ${range%-*} ${range#*-}); do SLURM_ARRAY_TASK_ID=$i bash "$script" >&2; done
echo 1
"""


def recipe_blocks() -> tuple[str, str]:
    """(certify.sbatch, the commands) as docs/distributed.md shows them."""
    text = DOC.read_text()
    section = text[text.index("### SLURM array") :]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    return blocks[0], blocks[1]


def test_the_slurm_recipe_merges_to_the_unsharded_certificate(tmp_path, monkeypatch):
    sbatch_file, commands = recipe_blocks()
    shards = int(re.search(r"--shard \$\{SLURM_ARRAY_TASK_ID\}/(\d+)", sbatch_file).group(1))
    assert f"--array=1-{shards}" in sbatch_file and f"shards/{{1..{shards}}}" in commands
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("loopcert", LOOPCERT), ("srun", SRUN), ("sbatch", SBATCH)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(stat.S_IRWXU)
    work = tmp_path / "work"
    work.mkdir()
    (work / "certify.sbatch").write_text(sbatch_file)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["bash", "-e", "-c", commands], cwd=work, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (work / "plan.json").is_file()
    assert sorted(p.name for p in (work / "shards").iterdir()) == sorted(str(i) for i in range(1, shards + 1))

    monkeypatch.setitem(plan_mod.PLANS, "quick", SHARD_PLAN)
    assert main(["certify", "tiny-ouro", "--jobs", "1", "--out", str(tmp_path / "whole")]) == 0
    whole = json.loads((tmp_path / "whole" / "certificate.json").read_text())
    merged = json.loads((work / "reports" / "out" / "certificate.json").read_text())
    assert merged["verdict"] == "PASS" and untimed(merged) == untimed(whole)
