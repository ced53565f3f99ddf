"""One plan for every machine: a worker (RunSpec, what a Ray task rebuilds its run from) and a
shard given the parent's plan (--plan FILE) sample the parent's cases and N even where their own
planning would choose otherwise (simulated: choose_case patched to choose another case). Negative
control: the same patch, planning for itself, does choose otherwise. A plan of another run, or
whose bins this machine's laws would draw otherwise, is refused by name."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from plans import SMALL_PLAN

import proofs.run.cases as cases_mod
import proofs.run.plan as plan_mod
from loopcert.cli import main
from proofs.run.remote import RunSpec
from proofs.run.run import CertifyRun
from proofs.run.sampling_units import units_by_id
from proofs.run.units import plan_units


def elsewhere(monkeypatch):
    """Planning as on a machine whose float64 maths chose another case."""
    real = cases_mod.choose_case

    def other(oracle, prompt, entry, plan, *order):
        law = real(oracle, prompt, entry, plan, *order)
        return replace(law, case=replace(law.case, name=law.case.name + "-elsewhere"))

    monkeypatch.setattr(cases_mod, "choose_case", other)


def planned(run):
    return {uid: (u.case, u.samples) for uid, u in units_by_id(run).items()}


def test_a_worker_runs_its_parents_plan(monkeypatch):
    parent = CertifyRun(SMALL_PLAN, "tiny-ouro", None, "cpu", torch.float32, 0, lambda _m: None)
    units, _ = plan_units(parent, "float32")
    spec = RunSpec.of(parent, units)
    elsewhere(monkeypatch)
    worker, fns = spec.build(lambda _m: None)
    assert planned(worker) == planned(parent) and list(fns) == [u for u, _ in units]
    own = CertifyRun(SMALL_PLAN, "tiny-ouro", None, "cpu", torch.float32, 0, lambda _m: None)
    assert all(c.endswith("-elsewhere") for c, _ in planned(own).values())  # negative control


@pytest.fixture()
def small(monkeypatch):
    monkeypatch.setitem(plan_mod.PLANS, "quick", SMALL_PLAN)


def test_a_shard_given_the_plan_file_samples_its_cases(small, monkeypatch, tmp_path):
    argv = ["certify", "tiny-ouro", "--seed", "3"]
    assert main([*argv, "--plan-out", str(tmp_path / "plan.json")]) == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert not (tmp_path / "certificate.json").exists()
    elsewhere(monkeypatch)
    assert main([*argv, "--plan-out", str(tmp_path / "own.json")]) == 0  # negative control
    own = json.loads((tmp_path / "own.json").read_text())
    assert (
        own["units"] != plan["units"]
        and own["identity"]["sampling_plan"] != plan["identity"]["sampling_plan"]
    )
    # positions 4 and 12 of 16: a sampling unit and a whole check
    out = tmp_path / "s5"
    assert main([*argv, "--plan", str(tmp_path / "plan.json"), "--shard", "5/8", "--out", str(out)]) == 0
    shard = json.loads((out / "shard.json").read_text())
    assert shard["units"] == plan["units"] and shard["sampling"] == plan["sampling"]
    assert shard["identity"]["sampling_plan"] == plan["identity"]["sampling_plan"]
    assert any(u.startswith("sampling/") and not u.endswith("-elsewhere") for u in shard["results"])


def test_a_plan_of_another_run_or_other_bins_is_refused(small, tmp_path, capsys):
    argv = ["certify", "tiny-ouro", "--out", str(tmp_path / "out")]
    assert main([*argv, "--seed", "3", "--plan-out", str(tmp_path / "plan.json")]) == 0
    assert main([*argv, "--seed", "4", "--plan", str(tmp_path / "plan.json")]) == 2
    assert "seed 3" in capsys.readouterr().err
    data = json.loads((tmp_path / "plan.json").read_text())
    case = data["sampling"]["tiny-ouro"]["cases"][0]
    case["bins"] = "0" * 16  # as if the planner's law had binned otherwise
    (tmp_path / "bins.json").write_text(json.dumps(data))
    assert main([*argv, "--seed", "3", "--plan", str(tmp_path / "bins.json")]) == 2
    err = capsys.readouterr().err
    assert f"case {case['name']} on tiny-ouro" in err and "bins" in err
    assert main([*argv, "--plan", str(tmp_path / "missing.json")]) == 2
    assert not (tmp_path / "out" / "certificate.json").exists()
