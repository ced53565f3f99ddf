"""proofs/checks/mutation.py and proofs/checks/false_alarm.py: every mutant is rejected, no control is
flagged, and the false-alarm rate of the sampling check is about alpha."""

from __future__ import annotations

import pytest
import torch

import refdec
from proofs.checks.distribution import Target
from proofs.checks.false_alarm import check_false_alarm
from proofs.checks.mutation import LIBRARY, Mutant, check_mutants
from proofs.decoders.specref import Bugs, SpecRef

QUICK = Target(0.05)

BY_NAME = {m.name: m for m in LIBRARY}


@pytest.fixture(scope="module")
def model():
    return refdec.load_model("tiny-ouro", dtype=torch.float64)


def test_library_has_at_least_8_mutants_and_the_named_controls():
    mutants = [m for m in LIBRARY if not m.control]
    controls = [m for m in LIBRARY if m.control]
    assert len(mutants) >= 8 and len(controls) >= 3
    assert any(m.fastdec and m.fastdec["strategy"] == "adaptive-verify" for m in mutants)
    text = " ".join(m.name for m in controls)
    for word in ("inverted", "unfiltered", "depths"):
        assert word in text
    assert all(m.case is None or m.case in {"T=0.5", "top-k=2", "top-p=0.5", "T=1.5 n=2"} for m in LIBRARY)
    for field_bug in (
        "int8",
        "reported q",
        "accept iff equal",
        "first draft unverified",
        "rejected lane",
        "top-k default",
    ):
        assert any(field_bug in m.name for m in mutants), field_bug


def test_a_sample_of_the_library_behaves(model):
    """Two sampling mutants, the greedy one and a control, with a small N (the whole library runs
    in `loopcert certify` and in the slow test below)."""
    names = ("always-accept", "stale-kv", "greedy-near-miss", "control: gate inverted")
    lib = tuple(BY_NAME[n] for n in names)
    r = check_mutants(QUICK, 0, lib, model=model)
    rows = {row["name"]: row for row in r.details["rows"]}
    assert r.passed, r.details["wrong"]
    assert rows["always-accept"]["rejected_by"] == ["sampling"]
    assert "greedy" in rows["stale-kv"]["rejected_by"] and "sampling" in rows["stale-kv"]["rejected_by"]
    assert rows["greedy-near-miss"]["rejected_by"] == ["greedy"]
    ctl = rows["control: gate inverted"]
    assert not ctl["rejected"] and ctl["ok"] and ctl["tv"] < 1e-12
    for name in ("always-accept", "stale-kv"):
        assert rows[name]["promised"] and rows[name]["power_margin"] > 1  # designed to be caught


def test_a_surviving_mutant_fails_the_check(model):
    """Negative control: a 'mutant' with no bug survives, so the mutation check must fail."""
    harmless = Mutant("not really a bug", "none", {"d1": 1}, case="top-k=2")
    r = check_mutants(QUICK, 0, (harmless,), model=model, require_all=True)
    assert not r.passed and r.details["survivors"] == 1 and r.details["wrong"] == ["not really a bug"]


def test_a_flagged_control_fails_the_check(model):
    """Negative control: a wrong decoder filed as a control is flagged, so the check must fail."""
    fake = Mutant(
        "control: secretly wrong", "u = 0", {"d1": 1, "bugs": Bugs(always_accept=True)}, control=True
    )
    r = check_mutants(QUICK, 0, (fake,), model=model)
    assert not r.passed and r.details["controls_flagged"] == 1


def test_quick_kills_every_mutant_it_promises_and_reports_the_rest(model):
    """The issue-12 mutants at the quick plan's target: each one whose binned shift reaches its
    detectable TV dies; the subtle ones (int8 draft, rejected lane) are reported below power."""
    lib = tuple(
        m
        for m in LIBRARY
        if m.model == "tiny-ouro"
        and not m.fastdec
        and not m.control
        and m.specref.get("bugs") is not None
        and m.name
        in {
            "draft int8, scored exact",
            "reported q is not the sampled q",
            "accept iff equal to a target sample",
            "first draft unverified",
            "rejected lane left in place",
        }
    )
    r = check_mutants(QUICK, 0, lib, model=model)
    assert r.passed, r.details["wrong"]
    for row in r.details["rows"]:
        assert row["rejected"] or not row["promised"], row["name"]
        assert row["tv"] > 0
    assert "draft int8, scored exact" in r.details["below_power"]


@pytest.mark.slow
def test_whole_library_at_the_full_target(model):
    r = check_mutants(Target(0.01), 0, model=model, blackbox_samples=300, require_all=True)
    assert r.passed, r.details["wrong"]


def test_false_alarm_rate_of_the_lossless_controls_is_plausible(model):
    r = check_false_alarm(25, Target(0.1), 0, model=model)
    assert r.passed and r.details["replicates"] == 100
    assert r.details["rejections"] <= 2 and r.details["second_level"]["rejections"] <= 15
    assert r.details["rate_ci95"][0] <= 1e-3 <= r.details["rate_ci95"][1] or r.details["rejections"] == 0


def test_false_alarm_check_fails_on_a_wrong_decoder(model):
    """Negative control: a wrong decoder filed as lossless is rejected far above alpha."""
    from proofs.stats.exact_laws import Oracle

    bad = SpecRef(Oracle(model), d1=1, bugs=Bugs(always_accept=True))
    r = check_false_alarm(10, Target(0.1), 0, model=model, decoders={"always-accept": bad})
    assert not r.passed and r.details["rejections"] >= 8
