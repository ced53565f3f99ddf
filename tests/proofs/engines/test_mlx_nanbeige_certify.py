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

from pathlib import Path

import pytest
from engine_certify import ROOT, EngineRows, sampling_of
from mlx_models import require_mlx
from nanbeige_models import write_nanbeige

pytestmark = pytest.mark.mlx
require_mlx()

CERTIFY_TIMEOUT_S = 1500
PLAIN_BUDGET_S = 900  # a cap, not a target (test_mlx_certify.py's)
FAIL_BUDGET_S = 45
RUN = EngineRows(ROOT / "reports" / "out" / "mlx-nanbeige", "mlx-lm", CERTIFY_TIMEOUT_S)
certify = RUN.certify


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_nanbeige(tmp_path_factory.mktemp("mlx-nanbeige") / "tiny-nanbeige")


def test_plain_mlx_lm_passes_on_nanbeige(folder):
    status, cert = certify(folder, "mlx-lm", "plain", PLAIN_BUDGET_S)
    assert status == 0 and cert["verdict"] == "PASS", cert["failed"]
    sampling = sampling_of(cert)
    assert any(k["top_p"] is not None for k in sampling["details"]["cases"]), "no top-p case"


def test_one_loop_fails_by_greedy(folder):
    status, cert = certify(folder, "mlx-lm:config.num_loops=1", "one_loop", FAIL_BUDGET_S)
    assert status == 1 and cert["verdict"] == "FAIL"
    assert any(n.startswith("greedy") for n in cert["failed"]), cert["failed"]
