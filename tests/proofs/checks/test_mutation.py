"""proofs/checks/mutation.py and proofs/checks/false_alarm.py: every mutant is rejected, no control is
flagged, and the false-alarm rate of the sampling check is about alpha."""

from __future__ import annotations

import pytest
import torch

import refdec
from proofs.checks.distribution import Target
from proofs.checks.false_alarm import check_false_alarm
from proofs.checks.mutation import CASES, LIBRARY, Mutant, check_mutants
from proofs.decoders.specref import Bugs, SpecRef
from refdec.errors import LoopcertError

QUICK = Target(0.05)

BY_ID = {m.id: m for m in LIBRARY}


@pytest.fixture(scope="module")
def model():
    return refdec.load_model("tiny-ouro", dtype=torch.float64)


def test_library_has_at_least_8_mutants_and_the_named_controls():
    mutants = [m for m in LIBRARY if not m.control]
    controls = [m for m in LIBRARY if m.control]
    assert len(mutants) >= 8 and len(controls) >= 3
    assert any(m.fastdec and m.fastdec["strategy"] == "adaptive-verify" for m in mutants)
    text = " ".join(m.id for m in controls)
    for word in ("inverted", "unfiltered", "depths"):
        assert word in text
    assert all(m.case is None or m.case in {c.name for c in CASES} for m in LIBRARY)
    for field_bug in (
        "int8",
        "reported-q",
        "accept-iff-equals",
        "first-draft-unverified",
        "rejected-lane",
        "top-k-default",
    ):
        assert any(field_bug in m.id for m in mutants), field_bug
    assert len(BY_ID) == len(LIBRARY)  # ids are unique: they name work units (mutant/<id>)
    assert all(m.description and m.bug for m in LIBRARY)


@pytest.mark.parametrize(
    "mutant_id,control,why",
    [
        ("Always accept", False, "lowercase words joined by hyphens"),
        ("draft int8, scored exact", False, "lowercase words joined by hyphens"),
        ("gate-inverted", True, "starts 'control-'"),  # a control must say so in its id
        ("control-always-accept", False, "starts 'control-'"),  # and only a control
    ],
)
def test_a_mutant_id_says_what_it_is(mutant_id, control, why):
    with pytest.raises(LoopcertError, match=why):
        Mutant(mutant_id, "x", "x", {"d1": 1}, control=control)
    Mutant("control-x" if control else "x-y", "x", "x", {"d1": 1}, control=control)  # the rule, met


def test_a_sample_of_the_library_behaves(model):
    """Two sampling mutants, the greedy one and a control, with a small N (the whole library runs
    in `loopcert certify` and in the slow test below)."""
    ids = ("always-accept", "stale-kv", "greedy-near-miss", "control-gate-inverted")
    lib = tuple(BY_ID[i] for i in ids)
    r = check_mutants(QUICK, 0, lib, model=model)
    rows = {row.id: row for row in r.details.rows}
    assert r.kind == "mutation" and r.passed, r.details.wrong
    assert rows["always-accept"].rejected_by == ("sampling",)
    assert "greedy" in rows["stale-kv"].rejected_by and "sampling" in rows["stale-kv"].rejected_by
    assert rows["greedy-near-miss"].rejected_by == ("greedy",)
    ctl = rows["control-gate-inverted"]
    assert ctl.control and not ctl.rejected and ctl.ok and ctl.tv < 1e-12
    for i in ("always-accept", "stale-kv"):
        assert rows[i].promised and rows[i].power_margin > 1  # designed to be caught


def test_a_surviving_mutant_fails_the_check(model):
    """Negative control: a 'mutant' with no bug survives, so the mutation check must fail."""
    harmless = Mutant("not-really-a-bug", "not really a bug", "none", {"d1": 1}, case="top-k=2")
    r = check_mutants(QUICK, 0, (harmless,), model=model, require_all=True)
    assert not r.passed and r.details.survivors == 1 and r.details.wrong == ("not-really-a-bug",)


def test_a_flagged_control_fails_the_check(model):
    """Negative control: a wrong decoder filed as a control is flagged, so the check must fail."""
    fake = Mutant(
        "control-secretly-wrong",
        "control: secretly wrong",
        "u = 0",
        {"d1": 1, "bugs": Bugs(always_accept=True)},
        control=True,
    )
    r = check_mutants(QUICK, 0, (fake,), model=model)
    assert not r.passed and r.details.controls_flagged == 1


def test_quick_kills_every_mutant_it_promises_and_reports_the_rest(model):
    """The serving stacks' mutants at the quick plan's target: each one whose binned shift reaches
    its detectable TV dies; the subtle ones (int8 draft, rejected lane) are reported below power."""
    lib = tuple(
        m
        for m in LIBRARY
        if m.model == "tiny-ouro"
        and not m.fastdec
        and not m.control
        and m.specref.get("bugs") is not None
        and m.id
        in {
            "draft-int8-scored-exact",
            "reported-q-not-sampled-q",
            "accept-iff-equals-target-sample",
            "first-draft-unverified",
            "rejected-lane-left-in-place",
        }
    )
    assert len(lib) == 5
    r = check_mutants(QUICK, 0, lib, model=model)
    assert r.passed, r.details.wrong
    for row in r.details.rows:
        assert row.rejected or not row.promised, row.id
        assert row.tv > 0
    assert "draft-int8-scored-exact" in r.details.below_power


@pytest.mark.slow
def test_whole_library_at_the_full_target(model):
    r = check_mutants(Target(0.01), 0, model=model, blackbox_samples=300, require_all=True)
    assert r.passed, r.details.wrong


@pytest.mark.tier2
def test_false_alarm_rate_of_the_lossless_controls_is_plausible(model):
    r = check_false_alarm(25, Target(0.1), 0, model=model)
    d = r.details
    sampled = [m.id for m in LIBRARY if m.control and m.edge is None]
    assert r.kind == "false_alarm" and r.passed and d.replicates == 25 * len(sampled)
    assert d.at_alpha.rejections <= 2 and d.second_level.rejections <= 15
    assert d.at_alpha.rate_ci95[0] <= 1e-3 <= d.at_alpha.rate_ci95[1] or d.at_alpha.rejections == 0
    assert [c.control for c in d.per_control] == sampled


def test_false_alarm_check_fails_on_a_wrong_decoder(model):
    """Negative control: a wrong decoder filed as lossless is rejected far above alpha."""
    from proofs.stats.exact_laws import Oracle

    bad = SpecRef(Oracle(model), d1=1, bugs=Bugs(always_accept=True))
    r = check_false_alarm(10, Target(0.1), 0, model=model, decoders={"always-accept": bad})
    assert not r.passed and r.details.at_alpha.rejections >= 8


# -- at boundaries: each dies in the quick plan's greedy-at-depth check on a LoopCoder of
# window 64, at the position its bug lives; the lossless control passes -----------------------------

EDGE_WHERE = {  # mutant -> (the first real bug's absolute position, what it is relative to)
    "window-cache-untrimmable": (66, "window cache of 64 wraps (position 64) + 2"),
    "positions-not-rewound-at-block-edge": (32, "KV block of 16 (position 16) + 16"),
    "k-plus-1-prompt-as-verify": (4, "a prompt of 4 tokens (speculation width 3) (position 4) + 0"),
    "page-edge-off-by-one": (128, "cache page of 128 slots (position 128) + 0"),
    "lossy-past-undeclared-position": (201, "window cache of 64 wraps (position 64) + 137"),
    "window-trimmed-per-token": (149, "window cache of 64 wraps (position 64) + 85"),
}


@pytest.mark.slow  # 6 certify runs of uncached speculation over 260 tokens (docs/measurements.md)
def test_boundary_mutants_die_where_their_bug_lives_and_the_control_passes():
    from proofs.checks.mutation import MutantRun

    run = MutantRun(QUICK, 0)
    edge = [m for m in LIBRARY if m.edge is not None]
    assert {m.id for m in edge if not m.control} == set(EDGE_WHERE)
    for m in edge:
        row = run.row(m)
        assert row["ok"], m.id
        if not m.control:
            pos, near = EDGE_WHERE[m.id]
            assert row["rejected_by"] == ["greedy_depth"]
            assert f"first found at position {pos} ({near})" in row["bug"], row["bug"]


ISSUE_37 = (
    "residual-rejecting-uniform",
    "recovery-draft-noise",
    "coarse-uniform-accept",
    "penalty-state-per-step",
    "min-p-draft-only",
    "logit-bias-draft-only",
    "penalties-draft-only",
    "verify-other-filter-order",
    "tokens-after-stop",
    "argmax-recovery",
)


def test_quick_kills_the_sampling_parameter_mutants(model):
    """The classes of the recovery draw, the acceptance test and the engines' other parameters,
    each on the case of its path: every one is rejected at the quick plan's target (and so also by
    the full plan, which requires all)."""
    lib = tuple(m for m in LIBRARY if m.id in ISSUE_37)
    assert len(lib) == len(ISSUE_37) and all(m.case for m in lib)
    r = check_mutants(QUICK, 0, lib, model=model)
    assert r.passed, r.details.wrong
    for row in r.details.rows:
        assert row.rejected and row.tv > 0, row.id
    stop = next(row for row in r.details.rows if row.id == "tokens-after-stop")
    assert stop.rejected_by == ("sampling",)
