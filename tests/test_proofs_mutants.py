"""proofs/mutants.py and proofs/false_alarm.py: every mutant is rejected, no control is
flagged, and the false-alarm rate of the sampling check is about alpha."""

from __future__ import annotations

import pytest
import torch

import refdec
from proofs.false_alarm import check_false_alarm
from proofs.mutants import LIBRARY, Mutant, check_mutants
from proofs.specref import Bugs, SpecRef

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
    assert all(m.case is None or m.case in {"T=0.5", "top-k=2", "top-p=0.5"} for m in LIBRARY)


def test_a_sample_of_the_library_behaves(model):
    """Two sampling mutants, the greedy one and a control, with a small N (the whole library runs
    in `loopcert certify` and in the slow test below)."""
    names = ("always-accept", "stale-kv", "greedy-near-miss", "control: gate inverted")
    lib = tuple(BY_NAME[n] for n in names)
    r = check_mutants(400, 0, 1e-3, lib, model=model)
    rows = {row["name"]: row for row in r.details["rows"]}
    assert r.passed, r.details["wrong"]
    assert rows["always-accept"]["rejected_by"] == ["sampling"]
    assert "greedy" in rows["stale-kv"]["rejected_by"] and "sampling" in rows["stale-kv"]["rejected_by"]
    assert rows["greedy-near-miss"]["rejected_by"] == ["greedy"]
    ctl = rows["control: gate inverted"]
    assert not ctl["rejected"] and ctl["ok"] and ctl["tv"] < 1e-12
    for name in ("always-accept", "stale-kv"):
        assert rows[name]["binned_tv"] > rows[name]["detectable_tv"]  # designed to be caught


def test_a_surviving_mutant_fails_the_check(model):
    """Negative control: a 'mutant' with no bug survives, so the mutation check must fail."""
    harmless = Mutant("not really a bug", "none", {"d1": 1}, case="top-k=2")
    r = check_mutants(200, 0, 1e-3, (harmless,), model=model)
    assert not r.passed and r.details["survivors"] == 1 and r.details["wrong"] == ["not really a bug"]


def test_a_flagged_control_fails_the_check(model):
    """Negative control: a wrong decoder filed as a control is flagged, so the check must fail."""
    fake = Mutant("control: secretly wrong", "u = 0", {"d1": 1, "bugs": Bugs(always_accept=True)},
                  control=True)
    r = check_mutants(200, 0, 1e-3, (fake,), model=model)
    assert not r.passed and r.details["controls_flagged"] == 1


@pytest.mark.slow
def test_whole_library(model):
    r = check_mutants(1000, 0, 1e-3, model=model, blackbox_samples=300)
    assert r.passed, r.details["wrong"]
    for row in r.details["rows"]:
        if not row["control"] and row["binned_tv"] is not None:
            assert row["binned_tv"] > 1.5 * row["detectable_tv"], row["name"]


def test_false_alarm_rate_of_the_lossless_decoder_is_plausible(model):
    r = check_false_alarm(10, 150, 0, alpha=0.05, model=model)
    assert r.passed and r.details["rejections"] <= 3
    assert r.details["binomial_tail_p"] >= 1e-3


def test_false_alarm_check_fails_on_a_wrong_decoder(model):
    from proofs.oracle import Oracle

    bad = SpecRef(Oracle(model), d1=1, bugs=Bugs(always_accept=True))
    r = check_false_alarm(6, 300, 0, alpha=0.05, model=model, decoder=bad)
    assert not r.passed and r.details["rejections"] >= 3  # vs 0.3 expected at alpha
