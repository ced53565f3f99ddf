"""mlx-lm 0.32.2 certified on Nanbeige (`tox -e mlx`; docs/decoders.md, "Certify mlx-lm").

tiny-nanbeige written by refdec in the published layout (two loops, a trained LM's activation
scales), certified with the quick plan as a user would (`loopcert certify DIR --quick --decoder
SPEC`, a subprocess):

    plain      mlx-lm                      must PASS (greedy; sampling judged filters-first)
    one loop   mlx-lm:config.num_loops=1   the negative control: must FAIL by greedy

Speculative mlx-lm on Nanbeige is greedy-exact in tests/proofs/engines/test_mlx_nanbeige.py; its
certificate (one call per seed: the quick plan's samples take many minutes) is measured in
docs/measurements.md rather than run in CI. Certificates and logs: reports/out/mlx-nanbeige/<row>/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlx_models import require_mlx
from nanbeige_models import write_nanbeige

pytestmark = pytest.mark.mlx
require_mlx()

ROOT = Path(__file__).resolve().parents[3]
OUT = ROOT / "reports" / "out" / "mlx-nanbeige"
CERTIFY_TIMEOUT_S = 1500
PLAIN_BUDGET_S = 900  # a cap, not a target (test_mlx_certify.py's)
FAIL_BUDGET_S = 45
JOBS = 2


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_nanbeige(tmp_path_factory.mktemp("mlx-nanbeige") / "tiny-nanbeige")


def certify(folder: Path, spec: str, name: str, budget: float) -> tuple[int, dict]:
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "loopcert", "certify", str(folder), "--quick", "--decoder", spec]
    cmd += ["--jobs", str(JOBS), "--time-budget", str(budget), "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=CERTIFY_TIMEOUT_S)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.log").write_text(done.stdout + done.stderr)
    path = out / "certificate.json"
    assert path.exists(), f"no certificate ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.returncode, json.loads(path.read_text())


def test_plain_mlx_lm_passes_on_nanbeige(folder):
    status, cert = certify(folder, "mlx-lm", "plain", PLAIN_BUDGET_S)
    assert status == 0 and cert["verdict"] == "PASS", cert["failed"]
    sampling = next(c for c in cert["checks"] if c["name"].startswith("sampling["))
    assert any(k["top_p"] is not None for k in sampling["details"]["cases"]), "no top-p case"


def test_one_loop_fails_by_greedy(folder):
    status, cert = certify(folder, "mlx-lm:config.num_loops=1", "one_loop", FAIL_BUDGET_S)
    assert status == 1 and cert["verdict"] == "FAIL"
    assert any(n.startswith("greedy") for n in cert["failed"]), cert["failed"]
