"""--predict counts what the sampling budget lets each unit sample (proofs/cost/predict.py budgeted)
and warns, naming the part and the flag that helps, when the budget cuts sampling short of the
plan's TV or the run would pass an hour (verdict)."""

from __future__ import annotations

import math

import pytest

from proofs.cost.predict import HOUR, budgeted, verdict


def row(uid, planned, need, first=0.0, check="sampling[m: s]"):
    return {
        "unit": uid,
        "check": check,
        "planned": planned,
        "predicted_seconds": need,
        "first_chunk_seconds": first,
    }


def test_units_within_their_share_take_what_they_need():
    rows = [row("a", 100, 10.0), row("b", 100, 20.0)]
    assert budgeted(rows, 600.0) == {"a": 10.0, "b": 20.0}


def test_a_short_budget_cuts_the_units_and_leftovers_go_to_the_next():
    # 300 s for three units of equal N: the first needs 10 of its 100, the second gets its 100 and
    # the first's 90 left over, the third its floor of 100 (before the floors: nothing)
    rows = [row("a", 100, 10.0), row("b", 100, 1000.0), row("c", 100, 1000.0)]
    used = budgeted(rows, 300.0)
    assert used["a"] == 10.0
    assert used["b"] == pytest.approx(190.0)
    assert used["c"] == pytest.approx(100.0)
    assert sum(used.values()) == pytest.approx(300.0)


def test_the_first_chunk_is_paid_whatever_the_share():
    """draw()'s first generate_batch call does not look at the deadline: a unit whose first chunk
    outlasts its share takes the chunk's time (a loaded machine's quick plan runs past its budget)."""
    rows = [row("a", 100, 1000.0, first=200.0), row("b", 100, 1000.0, first=50.0)]
    used = budgeted(rows, 100.0)
    assert used["a"] == 200.0 and used["b"] == 50.0


def test_no_power_and_undrawn_units_take_no_time():
    rows = [row("a", 0, 0.0), row("b", 10, math.inf)]
    assert budgeted(rows, 100.0) == {"a": 0.0, "b": pytest.approx(100.0)}


def got(rows, wall, checks=(), setup=1.0):
    return {
        "rows": rows,
        "checks": list(checks),
        "setup_seconds": setup,
        "wall_seconds": wall,
        "target_tv": 0.05,
        "sampling_budget_s": 270.0,
    }


def test_verdict_names_the_cut_sampling_and_the_flags():
    short = [
        {**row("a", 100, 3000.0), "budgeted_seconds": 270.0},
        {**row("b", 100, 10.0), "budgeted_seconds": 10.0},
    ]
    (w,) = verdict(got(short, 600.0))
    assert "1 of 2 (setting, case) units cannot reach TV 0.05" in w and "INCOMPLETE" in w
    for flag in ("--time-budget 3010", "--jobs N", "--shard I/N", "--executor ray", "--device cuda"):
        assert flag in w
    fine = [{**row("a", 100, 10.0), "budgeted_seconds": 10.0}]
    assert verdict(got(fine, 600.0)) == []


def test_verdict_names_the_part_that_keeps_a_run_past_an_hour():
    fine = [{**row("a", 100, 10.0), "budgeted_seconds": 10.0}]
    checks = [
        {"check": "greedy_float64", "predicted_seconds": 5000.0},
        {"check": "speed", "predicted_seconds": 900.0},
    ]
    (w,) = verdict(got(fine, HOUR + 2000.0, checks))
    assert "cannot finish within 1 h" in w and "greedy_float64 (83 min)" in w
    for flag in ("--shard I/N", "--executor ray", "--dtype float64", "--device cuda"):
        assert flag in w
    assert verdict(got(fine, HOUR - 1.0, checks)) == []
    slow_setup = verdict(got(fine, HOUR + 1.0, checks, setup=9000.0))
    assert "its largest part is setup (150 min)" in slow_setup[0]
