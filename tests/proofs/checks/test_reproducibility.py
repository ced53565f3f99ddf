"""Reproducible certificates: two certify runs with the same seed write the same
certificate.json apart from timing and date fields. The default run compares two reduced-plan
runs on tiny-ouro in process; the slow test runs `loopcert certify --quick` twice as a user does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from plans import SMALL_PLAN as TEST_PLAN

import proofs.run.plan as plan_mod
from loopcert.cli import main
from proofs.certificate import read_certificate

ROOT = Path(__file__).resolve().parents[3]
# Wall-clock figures: the date, how long things took (*seconds), rates (*_per_s), speed ratios.
TIMING = {"date", "speedup"}
TIMING_SUFFIXES = ("seconds", "_per_s")


def is_timing(key) -> bool:
    return key in TIMING or str(key).endswith(TIMING_SUFFIXES)


def comparable(cert: dict) -> dict:
    """The certificate without its timing fields (is_timing keys anywhere; the speed check's
    measured value and details, all ratios of timings)."""

    def strip(v):
        if isinstance(v, dict):
            out = {k: strip(x) for k, x in v.items() if not is_timing(k)}
            if v.get("kind") == "speed":
                out.pop("measured", None)  # the speed check: every figure in it is a timing
                out["details"] = {}
            return out
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v

    return strip(cert)


def first_difference(a, b, path="certificate"):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            d = first_difference(a.get(k), b.get(k), f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r:.80} vs {b!r:.80}"


def test_comparable_keeps_everything_but_timing():
    cert = {
        "stamp": {"date": "d", "seed": 3},
        "checks": [
            {
                "name": "speed",
                "kind": "speed",
                "measured": 1.3,
                "details": {"rows": [{"speedup": 2.0}]},
            },
            {
                "name": "sampling[x]",
                "kind": "sampling",
                "measured": 0.4,
                "seconds": 3.0,
                "details": {"samples_per_s": 9.0, "counts": [1, 2]},
            },
        ],
    }
    assert comparable(cert) == {
        "stamp": {"seed": 3},
        "checks": [
            {"name": "speed", "kind": "speed", "details": {}},
            {"name": "sampling[x]", "kind": "sampling", "measured": 0.4, "details": {"counts": [1, 2]}},
        ],
    }
    other = json.loads(json.dumps(cert))
    other["checks"][1]["details"]["counts"][1] = 3  # a sampled count that moved: not timing
    assert (
        first_difference(comparable(cert), comparable(other))
        == "certificate.checks[1].details.counts[1]: 2 vs 3"
    )


@pytest.mark.tier2
def test_same_seed_same_certificate_tiny(tmp_path, monkeypatch):
    monkeypatch.setitem(plan_mod.PLANS, "quick", TEST_PLAN)  # test_certify's reduced plan
    certs = []
    for run in ("a", "b"):
        assert main(["certify", "tiny-ouro", "--out", str(tmp_path / run), "--seed", "5"]) == 0
        certs.append(json.loads((tmp_path / run / "certificate.json").read_text()))
    a, b = map(comparable, certs)
    assert first_difference(a, b) is None
    typed = read_certificate(tmp_path / "a" / "certificate.json")
    assert typed.stamp.seed == 5 and any(c.kind == "sampling" for c in typed.checks)
    assert '"stopped_by_deadline": true' not in json.dumps(certs)  # every sample drawn, none cut by time


@pytest.mark.slow
def test_same_seed_same_certificate_quick_plan(tmp_path):
    """`loopcert certify --quick` twice on the default model (minutes each: docs/measurements.md).
    The sampling time budget is lifted: a unit that hits it draws as many samples as the machine
    managed (its details say stopped_by_deadline), and that count is a timing."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    certs = []
    for run in ("a", "b"):
        argv = ["certify", "--quick", "--seed", "7", "--time-budget", "100000", "--out", str(tmp_path / run)]
        subprocess.run(
            [sys.executable, "-m", "loopcert", *argv], cwd=ROOT, env=env, check=True, capture_output=True
        )
        certs.append(json.loads((tmp_path / run / "certificate.json").read_text()))
    assert first_difference(*map(comparable, certs)) is None
