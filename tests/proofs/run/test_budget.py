"""The sampling time pool on its own (proofs/run/budget.py), without a model: the serial rule
(share, spend), the parallel one (reserve, settle), and a shard's part of the budget. Each rule is
checked against the arithmetic the docstring states, the slack against a unit that would be
handed more than is left, and the floors against slow units that would starve the last one."""

from __future__ import annotations

import pytest

from proofs.run.budget import SamplingPool

PLANNED = {"a": 100, "b": 300, "c": 600}  # unit id -> N


def test_a_unit_may_use_twice_its_proportion_out_of_what_earlier_units_left():
    pool = SamplingPool.over(PLANNED, PLANNED, budget_s=100.0)
    assert (pool.seconds, pool.samples, pool.units) == (100.0, 1000, 3)
    assert pool.share("a") == pytest.approx(10.0)  # its proportion: b's and c's floors (90 s) stay whole
    assert (pool.samples, pool.units) == (900, 2)
    pool.spend(5.0)  # used 5 s of its 10: the rest stays for the units after it
    assert pool.seconds == pytest.approx(95.0)
    # fair part 95 x 300/900 = 31.7 s; slack up to 2x that, out of what leaves c's 60 s floor: 35 s
    assert pool.share("b") == pytest.approx(95.0 - 60.0)
    pool.spend(10.0)
    assert pool.share("c") == pytest.approx(85.0)  # 2x its whole proportion would be 170 s: what is left
    assert (pool.samples, pool.units) == (0, 0)
    pool.spend(1000.0)
    assert pool.seconds == 0.0  # never below nothing


def test_a_leftover_gives_the_next_unit_up_to_twice_its_part():
    pool = SamplingPool.over({"a": 100, "b": 100, "c": 100, "d": 100}, ["a", "b", "c", "d"], budget_s=100.0)
    pool.share("a")
    pool.spend(0.0)  # a fast unit: its whole 25 s left over
    # fair part 33.3 s (a third of the 100 s left); its own 25 s and a's 25 s: c's and d's 50 s kept
    assert pool.share("b") == pytest.approx(50.0)
    pool.spend(50.0)
    assert pool.share("c") == pytest.approx(25.0)  # no leftover: its floor
    pool.spend(25.0)
    assert pool.share("d") == pytest.approx(25.0)


def test_slow_units_split_the_pool_by_n_and_the_last_one_is_not_starved():
    """Every unit uses all it is handed (a 24-layer, 49k-vocabulary model on a CPU): before the
    floors, each took twice its part of what was left and the sixth unit was handed 3% of its
    proportion (the third setting of a quick run drew no sample). Now each gets its proportion."""
    planned = {f"u{i}": n for i, n in enumerate([8000, 3500, 8000, 3500, 8000, 3500])}
    pool = SamplingPool.over(planned, planned, budget_s=270.0)
    total = sum(planned.values())
    for uid, n in planned.items():
        share = pool.share(uid)
        assert share == pytest.approx(270.0 * n / total)
        pool.spend(share)
    # an overspend (draw's first chunk of 64 outlasting a share) is carried by the units after it,
    # in proportion, never leaving one of them nothing
    pool = SamplingPool.over(planned, planned, budget_s=270.0)
    first = pool.share("u0")
    pool.spend(first + 20.0)
    rest = []
    for uid in list(planned)[1:]:
        rest.append(pool.share(uid))
        pool.spend(rest[-1])
    assert min(rest) > 0.5 * 270.0 * 3500 / total


def test_a_parallel_unit_reserves_its_proportion_and_pays_what_it_used():
    pool = SamplingPool.over(PLANNED, PLANNED, budget_s=100.0, workers=2)
    assert pool.seconds == pytest.approx(200.0)  # worker-seconds: the budget stays wall time
    first = pool.reserve("c")
    assert first == pytest.approx(120.0)  # its proportion; a's and b's floors (80 s) stay whole
    assert pool.seconds == pytest.approx(200.0 - 120.0)  # only the proportional 120 s left the pool
    second = pool.reserve("a")
    assert second == pytest.approx(80.0 * 100 / 400)  # its own share, beside the first
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
