"""proofs.gates.paired: the paired speed gate times this tree and a reference tree in the same job.
It passes a tree against itself and fails a setting made dearer on the current side only, naming
the figure, the measured value and the tolerance; a reference it cannot use (a commit this
checkout lacks, a folder without loopcert, a worker of another protocol or other weights) is an
error naming it; `git archive` of HEAD gives a reference that imports its own code."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from proofs.gates import baseline as gates
from proofs.gates import paired
from refdec.errors import LoopcertError
from speed.round_worker import PAIRED_PROTOCOL, Worker
from speed.timing import Workload

ROOT = paired.ROOT
MODEL = "tiny-raven"  # R = 4: autoregressive, pipelined d1=2 (gate_settings(4))
SETTINGS = ["autoregressive", "pipelined d1=2"]
PROMPTS = [(1, 2, 3, 4, 5, 6), (7, 3, 9, 1, 4)]
PLAN = Workload(prompts=2, prompt_len=8, tokens=24, repeats=6)


def synthetic(x: float, deterministic: bool = True) -> dict:
    fig = {"relative_speed": x, "rounds": [x] * 3, "speedup": 1.5, "reference_speedup": 1.6}
    base = {"relative_speed": 1.0, "rounds": [1.0] * 3, "speedup": 1.0, "reference_speedup": 1.0}
    return {
        "figures": {"greedy": {"autoregressive": base, "pipelined d1=2": fig}},
        "deterministic": {"greedy": {"autoregressive": True, "pipelined d1=2": deterministic}},
    }


def test_a_relative_speed_below_the_tolerance_fails_naming_figure_measured_and_tolerance():
    ok = paired.compare_paired(synthetic(0.95), 0.1, label="commit abc")
    assert [r.passed for r in ok] == [True, True]
    assert ok[1].details.message == (
        "greedy / pipelined d1=2 / relative speed (commit abc's time / this tree's, timed in this job): "
        "measured 0.950, tolerance 0.1: at least 0.900 passes (speedup over autoregressive 1.500x, "
        "commit abc 1.600x)"
    )
    bad = gates.failures(paired.compare_paired(synthetic(0.85), 0.1))
    assert bad == [
        "greedy / pipelined d1=2 / relative speed (the reference's time / this tree's, timed in this job): "
        "measured 0.850, tolerance 0.1: below 0.900, REGRESSION (speedup over autoregressive 1.500x, "
        "the reference 1.600x)"
    ]
    odd = gates.failures(paired.compare_paired(synthetic(1.0, deterministic=False), 0.1))
    assert odd == [
        "greedy / pipelined d1=2 / deterministic (paired rounds): this tree's timed rounds gave "
        "different tokens (nondeterminism)"
    ]


def test_relative_speed_is_the_references_time_over_this_trees():
    """The direction of the figure: this tree twice as slow in pipelined is 0.5 (fails), twice as
    fast is 2 (passes), and the speedups are each side's own over autoregressive."""
    ref = {"autoregressive": [4.0] * 5, "pipelined d1=2": [2.0] * 5}
    slower = {"autoregressive": [4.0] * 5, "pipelined d1=2": [4.0] * 5}
    got = paired.paired_figures(slower, ref)
    assert got["pipelined d1=2"]["relative_speed"] == pytest.approx(0.5)
    assert got["autoregressive"]["relative_speed"] == pytest.approx(1.0)
    assert (got["pipelined d1=2"]["speedup"], got["pipelined d1=2"]["reference_speedup"]) == (1.0, 2.0)
    faster = paired.paired_figures({**slower, "pipelined d1=2": [1.0] * 5}, ref)
    assert faster["pipelined d1=2"]["relative_speed"] == pytest.approx(2.0)
    results = paired.compare_paired(
        {"figures": {"greedy": got}, "deterministic": {"greedy": dict.fromkeys(got, True)}}
    )
    assert [r.passed for r in results] == [True, False]


def test_the_worker_times_rounds_of_its_settings():
    w = Worker()
    got = w.handle(
        {
            "op": "setup",
            "model": MODEL,
            "seed_weights": 0,
            "dtype": "float32",
            "prompts": [list(p) for p in PROMPTS],
            "tokens": 6,
            "seed": 0,
            "settings": SETTINGS,
            "modes": ["greedy"],
            "slow": None,
        }
    )
    assert got["protocol"] == PAIRED_PROTOCOL and Path(got["source"]) == ROOT
    one, two = w.handle({"op": "round", "mode": "greedy"}), w.handle({"op": "round", "mode": "greedy"})
    assert set(one["cpu"]) == set(SETTINGS) and all(t > 0 for t in one["cpu"].values())
    assert one["tokens_sha"] == two["tokens_sha"]
    with pytest.raises(ValueError, match="no gate setting"):
        Worker().handle({**w.setup, "settings": ["autoregressive", "draft-verify d1=9 k=9"]})


# Timing-dependent, as test_gates.py's: nightly and by hand (-m slow), never in the default run.
@pytest.mark.slow
def test_the_same_tree_passes_and_a_setting_made_dearer_fails_on_its_figure_only():
    """Both sides run this tree; then the current side's pipelined setting costs twice as much per
    step (speed.slowdown, fraction 1): its relative speed falls near 0.5, far below the
    bound 0.75, while the unchanged one stays near 1 (bound 0.75: wide, this test times a tiny
    model on a shared host)."""
    same = paired.measure_paired(MODEL, PROMPTS, PLAN, SETTINGS, ROOT, modes=("greedy",))
    assert not gates.failures(paired.compare_paired(same, 0.25))
    assert same["fingerprint"] and same["clock"] == "cpu"
    slowed = paired.measure_paired(
        MODEL, PROMPTS, PLAN, SETTINGS, ROOT, modes=("greedy",), slow=("pipelined d1=2", 1.0)
    )
    bad = gates.failures(paired.compare_paired(slowed, 0.25))
    assert len(bad) == 1 and bad[0].startswith("greedy / pipelined d1=2 / relative speed"), bad
    assert "tolerance 0.25: below 0.750, REGRESSION" in bad[0]
    assert slowed["figures"]["greedy"]["pipelined d1=2"]["relative_speed"] < 0.7


@pytest.mark.tier2
def test_a_reference_that_is_no_loopcert_tree_or_another_protocol_is_an_error(tmp_path, monkeypatch):
    one = Workload(prompts=1, prompt_len=8, tokens=4, repeats=1)
    empty = tmp_path / "empty"  # the worker finds the installed loopcert instead: refused, not timed
    empty.mkdir()
    with pytest.raises(
        LoopcertError, match=r"the reference round worker imported fastdec from .*, not from .*empty"
    ):
        paired.measure_paired(MODEL, PROMPTS, one, SETTINGS, empty, modes=("greedy",))
    broken = tmp_path / "broken"  # a tree whose code does not import: the worker's last words
    (broken / "speed").mkdir(parents=True)
    (broken / "speed" / "__init__.py").write_text("raise ImportError('a broken tree')\n")
    with pytest.raises(
        LoopcertError, match=r"the reference tree's round worker \(.*broken\) ended: .*a broken tree"
    ):
        paired.measure_paired(MODEL, PROMPTS, one, SETTINGS, broken, modes=("greedy",))
    monkeypatch.setattr(paired, "PAIRED_PROTOCOL", PAIRED_PROTOCOL + 1)  # as if this gate were newer
    with pytest.raises(LoopcertError, match=f"speaks paired protocol {PAIRED_PROTOCOL}, this gate"):
        paired.measure_paired(MODEL, PROMPTS, one, SETTINGS, ROOT, modes=("greedy",))


def test_references_by_name_and_their_errors(tmp_path):
    assert not paired.has_commit("0" * 40)
    with pytest.raises(
        LoopcertError, match="commit 0000000000000000000000000000000000000000 is not in.*stored"
    ):
        paired.export_tree("0" * 40, tmp_path / "x")
    base = {"reference_commit": None}
    assert paired.reference_of("stored", base) == (None, "--reference stored")
    assert (
        paired.reference_of("auto", base)[0] is None
        and "no reference commit" in paired.reference_of("auto", base)[1]
    )
    gone = {"reference_commit": "0" * 40}
    assert (
        paired.reference_of("auto", gone)[0] is None
        and "not in this checkout" in paired.reference_of("auto", gone)[1]
    )
    assert paired.reference_of(str(tmp_path), base) == (tmp_path.resolve(), f"the tree at {tmp_path}")
    with pytest.raises(LoopcertError, match="--reference 'no-such-ref': neither a folder nor a commit"):
        paired.reference_of("no-such-ref", base)


def test_a_tree_from_before_speed_left_proofs_runs_its_own_worker(tmp_path):
    """The baseline's commit may predate speed/: its worker is proofs.speed.round_worker."""
    (tmp_path / "proofs" / "speed").mkdir(parents=True)
    (tmp_path / "proofs" / "speed" / "round_worker.py").write_text("")
    assert paired.worker_module(tmp_path) == "proofs.speed.round_worker"
    assert paired.worker_module(ROOT) == "speed.round_worker"


def head_has_the_worker() -> bool:
    got = subprocess.run(
        ["git", "cat-file", "-e", "HEAD:speed/round_worker.py"], cwd=ROOT, capture_output=True
    )
    return got.returncode == 0


@pytest.mark.tier2
@pytest.mark.skipif(not head_has_the_worker(), reason="needs a git checkout whose HEAD has the round worker")
def test_an_exported_commit_is_a_reference_that_imports_its_own_code(tmp_path):
    tree = paired.export_tree("HEAD", tmp_path / "ref")
    assert (tree / "speed" / "round_worker.py").is_file()
    got = paired.measure_paired(
        MODEL,
        PROMPTS,
        Workload(prompts=1, prompt_len=8, tokens=8, repeats=2),
        SETTINGS,
        tree,
        modes=("greedy",),
    )
    assert got["reference"] == str(tree) and set(got["figures"]["greedy"]) == set(SETTINGS)
    assert paired.code_commit() in (
        None,
        subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True).strip(),
    )


@pytest.mark.tier2
def test_cli_gates_paired_with_a_folder_and_writes_both_parts(tmp_path, capsys):
    """`loopcert bench --gate --reference FOLDER`: the exact figures against the baseline file, the
    speed paired with the tree in FOLDER (here this very tree); gate.json keeps both parts."""
    from loopcert.cli import main

    base = tmp_path / "baseline.json"
    common = ["tiny-raven", "--baseline", str(base), "--out", str(tmp_path / "out")]
    assert main(["bench", *common, "--quick", "--write-baseline", "--tokens", "8", "--repeats", "2"]) == 0
    data = json.loads(base.read_text())
    assert data["paired_tolerance"] == paired.PAIRED_TOL and "reference_commit" in data
    capsys.readouterr()
    assert main(["bench", *common, "--gate", "--reference", str(ROOT), "--tolerance", "0.9"]) == 0
    out = capsys.readouterr().out
    assert f"speed paired with the tree at {ROOT}" in out and "fails below 1 - 0.9" in out
    assert "greedy / pipelined d1=2 / relative speed (the tree at" in out  # a folder: named by its path
    report = json.loads((tmp_path / "out" / "gate.json").read_text())
    assert set(report["measured"]) == {"exact", "paired"} and not report["failures"]
    names = [r["name"] for r in report["results"]]
    assert (
        "sampling / pipelined d1=2 / relative speed" in names
        and "greedy / pipelined d1=2 / accepted" in names
    )
    assert main(["bench", *common, "--gate", "--reference", "no-such-ref"]) == 2
    assert "--reference 'no-such-ref': neither a folder nor a commit" in capsys.readouterr().err
