"""Reproducible certificates (issue 15): two certify runs with the same seed write the same
certificate.json apart from timing and date fields. The default run compares two reduced-plan
runs on tiny-ouro in process; the slow test runs `loopcert certify --quick` twice as a user does."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_certify import TEST_PLAN

import proofs.certify as certify_mod
from loopcert.cli import main

ROOT = Path(__file__).resolve().parent.parent
# Wall-clock figures: how long a check took, the date, and the speed check's measured ratios.
TIMING = {"date", "seconds", "tokens_per_s", "speedup"}


def comparable(cert: dict) -> dict:
    """The certificate without its timing fields (TIMING anywhere; the informational speed
    check's measured value, a ratio of timings)."""
    def strip(v):
        if isinstance(v, dict):
            out = {k: strip(x) for k, x in v.items() if k not in TIMING}
            if isinstance(v.get("details"), dict) and v["details"].get("informational"):
                out.pop("measured", None)
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
    cert = {"stamp": {"date": "d", "seed": 3}, "checks": [
        {"name": "speed", "measured": 1.3, "details": {"informational": True, "rows": [{"speedup": 2.0}]}},
        {"name": "sampling[x]", "measured": 0.4, "details": {"seconds": 1.0, "counts": [1, 2]}}]}
    assert comparable(cert) == {"stamp": {"seed": 3}, "checks": [
        {"name": "speed", "details": {"informational": True, "rows": [{}]}},
        {"name": "sampling[x]", "measured": 0.4, "details": {"counts": [1, 2]}}]}
    other = json.loads(json.dumps(cert))
    other["checks"][1]["details"]["counts"][1] = 3  # a sampled count that moved: not timing
    assert first_difference(comparable(cert), comparable(other)) == \
        "certificate.checks[1].details.counts[1]: 2 vs 3"


SMALL = dataclasses.replace(TEST_PLAN, samples=20, mutant_samples=100, blackbox_mutant_samples=20,
                            theorem1_random_cases=20, theorem1_search_examples=10, trace_positions=8)


def test_same_seed_same_certificate_tiny(tmp_path, monkeypatch):
    monkeypatch.setitem(certify_mod.PLANS, "quick", SMALL)
    certs = []
    for run in ("a", "b"):
        assert main(["certify", "tiny-ouro", "--out", str(tmp_path / run), "--seed", "5"]) == 0
        certs.append(json.loads((tmp_path / run / "certificate.json").read_text()))
    a, b = map(comparable, certs)
    assert first_difference(a, b) is None
    assert certs[0]["stamp"]["seed"] == 5 and any(c["name"].startswith("sampling[") for c in a["checks"])


@pytest.mark.slow
def test_same_seed_same_certificate_quick_plan(tmp_path):
    """`loopcert certify --quick` twice on the default model (about 4 minutes each on 2 cores)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    certs = []
    for run in ("a", "b"):
        subprocess.run([sys.executable, "-m", "loopcert", "certify", "--quick", "--seed", "7", "--out",
                        str(tmp_path / run)], cwd=ROOT, env=env, check=True, capture_output=True)
        certs.append(json.loads((tmp_path / run / "certificate.json").read_text()))
    assert first_difference(*map(comparable, certs)) is None
