"""proofs/certificate.py: certificate.json round-trips through the one schema; a file of another
schema or version is refused by a clear message naming it."""

import json
import math

import pytest

from proofs.certificate import SCHEMA_VERSION, Certificate, read_certificate
from proofs.result import CheckResult
from refdec.errors import LoopcertError


def small() -> Certificate:
    checks = (
        CheckResult("greedy_float64", 0, 0, True, {"runs": [{"model": "m", "equal": True}]}),
        CheckResult("mutation", 3, 3, False, {"rows": [{"detectable_tv": math.inf}]}, power="TV >= 0.05"),
    )
    return Certificate("FAIL", ("mutation",), {"speed": "no GPU"}, {"model": "m", "seed": 0}, checks)


def test_the_certificate_round_trips_through_its_json(tmp_path):
    cert = small()
    path = tmp_path / "certificate.json"
    path.write_text(cert.dumps())
    back = read_certificate(path)
    assert back.to_json() == cert.to_json()
    assert back.verdict == "FAIL" and not back.passed and back.check("mutation").power == "TV >= 0.05"
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION


def test_an_old_or_foreign_file_is_refused_by_name(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"verdict": "PASS", "passed": True, "failed": [], "stamp": {}, "checks": []}))
    with pytest.raises(LoopcertError, match=r"old\.json is not a loopcert certificate"):
        read_certificate(old)
    newer = {**small().to_json(), "schema_version": SCHEMA_VERSION + 1}
    with pytest.raises(LoopcertError, match=f"schema_version {SCHEMA_VERSION + 1}"):
        Certificate.from_json(newer, "newer.json")
    broken = small().to_json()
    del broken["checks"][0]["passed"]
    with pytest.raises(LoopcertError, match=r"'greedy_float64' lacks field\(s\) \['passed'\]"):
        Certificate.from_json(broken)


def test_a_missing_check_is_named():
    with pytest.raises(LoopcertError, match="no check 'speed'"):
        small().check("speed")
