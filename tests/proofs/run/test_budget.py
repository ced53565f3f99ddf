"""The sampling time pool on its own (proofs/run/budget.py), without a model: the serial rule
(share, spend), the parallel one (reserve, settle), and a shard's part of the budget. Each rule is
checked against the arithmetic the docstring states, and the slack against a unit that would be
handed more than is left."""

from __future__ import annotations

import pytest

from proofs.run.budget import SHARE_SLACK, SamplingPool

PLANNED = {"a": 100, "b": 300, "c": 600}  # unit id -> N


def test_a_unit_may_use_twice_its_proportion_never_more_than_is_left():
    pool = SamplingPool.over(PLANNED, PLANNED, budget_s=100.0)
    assert (pool.seconds, pool.samples, pool.units) == (100.0, 1000, 3)
    assert pool.share("a") == pytest.approx(SHARE_SLACK * 100.0 * 100 / 1000)  # 2 x 10 s
    assert (pool.samples, pool.units) == (900, 2)
    pool.spend(5.0)  # used 5 s of its 20: the rest stays for the units after it
    assert pool.seconds == pytest.approx(95.0)
    assert pool.share("b") == pytest.approx(2 * 95.0 * 300 / 900)
    pool.spend(10.0)
    assert pool.share("c") == pytest.approx(85.0)  # 2x its whole proportion would be 170 s: what is left
    assert (pool.samples, pool.units) == (0, 0)
    pool.spend(1000.0)
    assert pool.seconds == 0.0  # never below nothing


def test_a_parallel_unit_reserves_its_proportion_and_pays_what_it_used():
    pool = SamplingPool.over(PLANNED, PLANNED, budget_s=100.0, workers=2)
    assert pool.seconds == pytest.approx(200.0)  # worker-seconds: the budget stays wall time
    first = pool.reserve("c")
    assert first == pytest.approx(min(200.0, SHARE_SLACK * 200.0 * 600 / 1000))
    assert pool.seconds == pytest.approx(200.0 - 120.0)  # only the proportional 120 s left the pool
    second = pool.reserve("a")
    assert second == pytest.approx(SHARE_SLACK * 80.0 * 100 / 400)  # its own share, beside the first
    assert pool.reserve("check/speed") is None and pool.units == 1  # not a sampling unit: untouched
    left = pool.seconds
    pool.settle("c", 30.0)  # its 120 s back, 30 s paid
    assert pool.seconds == pytest.approx(left + 120.0 - 30.0)
    pool.settle("c", 30.0)  # settled once: a second return changes nothing
    pool.settle("check/speed", 99.0)
    assert pool.seconds == pytest.approx(left + 90.0)


def test_a_shard_pools_its_part_of_the_budget_by_n():
    pool = SamplingPool.over(PLANNED, ["b", "check/greedy_float64"], budget_s=100.0)
    assert (pool.seconds, pool.samples, pool.units) == (pytest.approx(30.0), 300, 1)
    assert pool.share("b") == pytest.approx(30.0)  # 2x its proportion is 60 s: what is left
    empty = SamplingPool.over({}, [], budget_s=100.0)  # no sampling unit planned: the whole budget
    assert empty.seconds == 100.0 and empty.outlook(10.0) is None


def test_the_outlook_names_what_the_units_left_plan():
    pool = SamplingPool.over(PLANNED, PLANNED, budget_s=100.0)
    pool.share("a")
    assert pool.outlook(0.0) is None  # no rate: nothing to predict
    line = pool.outlook(90.0)
    assert "2 sampling unit(s) left plan 900 samples: ~10s at 90.0 samples/s" in line
    assert "100s of the sampling budget left" in line
