"""proofs/certificate.py, proofs/result.py, proofs/details.py: certificate.json round-trips through
the one typed schema (every kind's details read back by kind, non-finite floats included, a real
certificate of a reduced plan too); a file of another schema or version, an unknown kind or a
field a record lacks is refused by a clear message naming it."""

import json
import math
from dataclasses import fields

import pytest
from certificates import certificate, one_of_each_kind, result, sampling, theorem1, theorem1_pair
from plans import SMALL_PLAN

import proofs.run.plan as plan_mod
from proofs.certificate import SCHEMA_VERSION, Certificate, read_certificate
from proofs.details import KINDS, SamplingDetails, Theorem1Example
from proofs.result import CheckResult
from proofs.run.certify import certify
from refdec.errors import LoopcertError


def small() -> Certificate:
    return certificate(*one_of_each_kind())


def test_every_kind_round_trips_through_the_json(tmp_path):
    cert = small()
    assert {c.kind for c in cert.checks} == set(KINDS)  # the fixture covers the whole schema
    path = tmp_path / "certificate.json"
    path.write_text(cert.dumps())
    back = read_certificate(path)
    assert back == cert and back.to_json() == cert.to_json()
    for a, b in zip(back.checks, cert.checks, strict=True):
        assert type(a.details) is type(b.details) and a == b, a.name
    assert back.verdict == "FAIL" and not back.passed and back.failed == ("theorem1_search",)
    assert back.skipped == {"bitwise_skipped": "no fixed-width mode"}
    assert back.check("sampling[tiny-raven: pipelined]").power == "TV >= 0.05"
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION == 2
    assert [c["kind"] for c in data["checks"]] == [c.kind for c in cert.checks]


def test_non_finite_floats_are_strings_in_the_file_and_floats_again_when_read():
    worst = Theorem1Example(theorem1_pair(ratio_gated=math.nan, lemma_bound=math.inf))
    c = result(theorem1(max_lemma_ratio=math.nan, worst={"ratio_gated": worst}), "t1", math.inf, 2.0, False)
    data = json.loads(c.to_json())  # strict JSON: a bare NaN / Infinity would not parse as such
    assert data["measured"] == "inf" and data["details"]["max_lemma_ratio"] == "nan"
    assert data["details"]["worst"]["ratio_gated"]["pair"]["lemma_bound"] == "inf"
    back = CheckResult.from_dict(data)
    assert back == c and back.measured == math.inf and math.isnan(back.details.max_lemma_ratio)
    assert isinstance(back.details.worst["ratio_gated"].pair.ratio_gated, float)


def test_an_unsampled_sampling_check_round_trips():
    unsampled = SamplingDetails.unsampled("tiny-raven", "the certified model", 60.0)
    c = result(unsampled, "sampling[tiny-raven: mine]", math.nan, math.nan, not_applicable="own model only")
    assert CheckResult.from_dict(json.loads(c.to_json())) == c and c.details.cases == ()


@pytest.mark.tier2
def test_a_real_certificate_round_trips(monkeypatch, tmp_path):
    """certify() of the reduced plan on tiny-ouro: the certificate read back equals the one written."""
    monkeypatch.setitem(plan_mod.PLANS, "quick", SMALL_PLAN)
    cert = certify("tiny-ouro")
    # SMALL_PLAN has no false alarms and no per-position test (tests/proofs/checks/test_positions.py
    # certifies with one); fastdec has no --relative-to and samples temperature-first
    # (tests/proofs/run/test_certify_relative.py writes and reads back those two kinds)
    assert {c.kind for c in cert.checks} >= set(KINDS) - {
        "false_alarm",
        "relative_sampling",
        "sampler_convention",
        "positions",
    }
    back = Certificate.from_json(json.loads(cert.dumps()))
    assert back == cert
    assert back.check("mutation").details.rows[0].id == SMALL_PLAN.mutant_ids[0]


def test_an_old_or_foreign_file_is_refused_by_name(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"verdict": "PASS", "passed": True, "failed": [], "stamp": {}, "checks": []}))
    with pytest.raises(LoopcertError, match=r"old\.json is not a loopcert certificate"):
        read_certificate(old)
    v1 = {**small().to_json(), "schema_version": 1}  # before the details were typed
    with pytest.raises(LoopcertError, match="v1.json has schema_version 1; this loopcert reads version 2"):
        Certificate.from_json(v1, "v1.json")
    newer = {**small().to_json(), "schema_version": SCHEMA_VERSION + 1}
    with pytest.raises(LoopcertError, match=f"schema_version {SCHEMA_VERSION + 1}"):
        Certificate.from_json(newer, "newer.json")
    broken = small().to_json()
    del broken["checks"][0]["passed"]
    with pytest.raises(LoopcertError, match=r"'greedy_float64' lacks field\(s\) \['passed'\]"):
        Certificate.from_json(broken)


def test_a_wrong_kind_or_field_is_refused_by_name():
    data = small().to_json()
    unknown = json.loads(json.dumps(data))
    unknown["checks"][0]["kind"] = "greedyish"
    with pytest.raises(LoopcertError, match="unknown kind 'greedyish'"):
        Certificate.from_json(unknown)
    extra = json.loads(json.dumps(data))
    extra["checks"][1]["details"]["runs"][0]["colour"] = "red"
    with pytest.raises(LoopcertError, match=r"'bitwise_fixed_width' details\.runs\[0\] has unknown field"):
        Certificate.from_json(extra)
    lacking = json.loads(json.dumps(data))
    del lacking["checks"][2]["details"]["cases"][0]["views"][0]["p_value"]
    with pytest.raises(LoopcertError, match=r"views\[0\] lacks field\(s\) \['p_value'\]"):
        Certificate.from_json(lacking)
    stamp = json.loads(json.dumps(data))
    del stamp["stamp"]["seeds"]["greedy"]
    with pytest.raises(LoopcertError, match=r"certificate stamp\.seeds lacks field\(s\) \['greedy'\]"):
        Certificate.from_json(stamp)
    typed = json.loads(json.dumps(data))
    typed["checks"][0]["details"]["real_bugs"] = "none"
    with pytest.raises(LoopcertError, match=r"real_bugs must be a number, got 'none'"):
        Certificate.from_json(typed)


def test_a_check_result_states_its_kind():
    with pytest.raises(LoopcertError, match="its kind must be one of"):
        CheckResult("bitwise_fixed_width", 0, 0, True, skipped="no fixed-width mode")  # no kind
    with pytest.raises(LoopcertError, match="kind 'greedy' but 'sampling' details"):
        CheckResult("x", 0, 0, True, sampling(), kind="greedy")
    with pytest.raises(LoopcertError, match="typed checks only"):
        certificate(CheckResult("gate", 0, 0, True, {"message": "untyped: the bench gates"}))
    c = result(sampling(), "s")
    assert c.with_details(budget_s=9.0).details.budget_s == 9.0
    with pytest.raises(LoopcertError, match=r"SamplingDetails has no field\(s\) \['colour'\]"):
        c.with_details(colour="red")


def test_every_details_field_is_typed_for_the_reader():
    """Each kind's record declares a type for every field (the reader coerces by it)."""
    for kind, cls in KINDS.items():
        assert cls.kind == kind
        for f in fields(cls):
            assert f.type not in ("dict", "list", "object"), (kind, f.name)


def test_a_missing_check_is_named():
    with pytest.raises(LoopcertError, match="no check 'speed_x'"):
        small().check("speed_x")
