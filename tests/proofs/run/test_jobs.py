"""`loopcert certify --jobs N`: the plan's work units run in N forked worker processes give the
certificate of --jobs 1, apart from timings (proofs/run/jobs.py). Negative control: the same
comparison tells two runs of different seeds apart, so the equality is not vacuous."""

from __future__ import annotations

import json
import os

import pytest
from plans import SHARD_PLAN, SMALL_PLAN, untimed

import proofs.run.jobs as jobs_mod
import proofs.run.plan as plan_mod
from loopcert.cli import main
from proofs.run.budget import SHARE_SLACK
from proofs.run.jobs import default_jobs
from proofs.run.run import CertifyRun
from proofs.run.sampling_units import pool_sampling, sampling_checks, units_by_id
from proofs.run.units import dispatch_order, plan_units
from refdec.errors import LoopcertError


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setitem(plan_mod.PLANS, "quick", SHARD_PLAN)
    root = tmp_path_factory.mktemp("jobs")
    log = root / "pids"  # each unit appends the pid of the process that ran it
    real = jobs_mod.run_units  # patched where LocalExecutor calls it

    def logged(units, *a):
        def wrap(fn):
            def run(share=None):
                with open(log, "a") as f:
                    f.write(f"{os.getpid()}\n")
                return fn(share)

            return run

        return real([(uid, wrap(fn)) for uid, fn in units], *a)

    mp.setattr(jobs_mod, "run_units", logged)
    try:
        rcs = {
            name: main(["certify", "tiny-ouro", "--seed", seed, "--jobs", j, "--out", str(root / name)])
            for name, seed, j in (
                ("serial", "2", "1"),
                ("two", "2", "2"),
                ("three", "2", "3"),
                ("other", "5", "2"),
            )
        }
    finally:
        mp.undo()
    certs = {name: json.loads((root / name / "certificate.json").read_text()) for name in rcs}
    return rcs, certs, [int(x) for x in log.read_text().split()]


@pytest.mark.tier2
def test_jobs_give_the_serial_certificate(runs):
    rcs, certs, pids = runs
    assert rcs == {"serial": 0, "two": 0, "three": 0, "other": 0}
    assert untimed(certs["two"]) == untimed(certs["serial"])
    assert untimed(certs["three"]) == untimed(certs["serial"])
    units = certs["serial"]["stamp"]["work_units"]
    assert units > 10 and len(pids) == 3 * units  # every unit of the 3 parallel runs, once
    assert os.getpid() not in pids and len(set(pids)) >= 2  # in other processes, more than one


@pytest.mark.tier2
def test_the_comparison_sees_another_seed(runs):
    """Negative control: a run with another seed draws other samples, and the comparison says so."""
    _, certs, _ = runs
    assert untimed(certs["other"]) != untimed(certs["serial"])


def test_jobs_share_the_time_budget_as_wall_time():
    """With N workers the sampling pool holds N x the budget (worker-seconds): each worker gets
    about the budget's worth of wall time, as a serial run does."""
    import torch

    run = CertifyRun(SMALL_PLAN, "tiny-ouro", None, "cpu", torch.float32, 0, lambda _m: None)
    units = [u for c in sampling_checks(run) for u in c.units]
    pool = pool_sampling(run, [u.id for u in units], workers=2)
    assert run.pool is pool and pool.seconds == pytest.approx(2 * SMALL_PLAN.sampling_budget_s)
    start = pool.seconds
    first = pool.reserve(units[0].id)  # its proportion: no leftover yet, the others' floors kept ...
    fair = start / len(units)
    assert first == pytest.approx(fair) and SHARE_SLACK * fair > fair
    assert pool.seconds == pytest.approx(start - fair)  # ... but reserves only its proportion
    if len(units) > 1:  # a unit dispatched beside it still gets its own share, not what is left of 2x
        assert pool.reserve(units[1].id) > 0
    assert pool.reserve("check/speed") is None
    left = pool.seconds
    pool.settle(units[0].id, 1.0)  # used 1 s
    assert pool.seconds == pytest.approx(left + fair - 1.0)


@pytest.mark.parametrize("argv", [["--jobs", "0"], ["--jobs", "2", "--device", "cuda"]])
def test_bad_jobs_exit_2(argv, tmp_path, capsys):
    assert main(["certify", "tiny-ouro", *argv, "--out", str(tmp_path)]) == 2
    assert "--jobs" in capsys.readouterr().err


def test_default_jobs():
    assert 1 <= default_jobs() <= jobs_mod.MAX_DEFAULT_JOBS
    assert default_jobs("cuda") == 1
    with pytest.raises(LoopcertError, match="--jobs"):
        jobs_mod.check_jobs(2, "cuda:0")


def test_dispatch_order_puts_whole_checks_first_then_sampling_by_n():
    """The order decides the wall time, never the results: whole checks first (the speed check
    cannot be split), then sampling units by decreasing N, then the mutants; each unit once."""
    import torch

    run = CertifyRun(SHARD_PLAN, "tiny-ouro", None, "cpu", torch.float32, 0, lambda _m: None)
    units, _ = plan_units(run, "float32")
    order = [uid for uid, _ in dispatch_order(run, units)]
    assert sorted(order) == sorted(uid for uid, _ in units)
    kinds = [0 if u.startswith("check/") else 1 if u.startswith("sampling/") else 2 for u in order]
    assert kinds == sorted(kinds) and set(kinds) == {0, 1, 2}
    n = {uid: u.samples for uid, u in units_by_id(run).items()}
    ns = [n[u] for u in order if u in n]
    assert ns == sorted(ns, reverse=True) and len(set(ns)) > 1  # two cases of different N
    assert order.index("check/speed") < order.index(next(u for u in order if u in n))


def shard_plan_units() -> int:
    import torch

    run = CertifyRun(SHARD_PLAN, "tiny-ouro", None, "cpu", torch.float32, 0, lambda _m: None)
    return len(plan_units(run, "float32")[0])


@pytest.mark.parametrize("part", ["two", "last", "one"])
def test_jobs_are_capped_by_the_work_units(tmp_path, monkeypatch, part):
    """`--jobs 6 --shard 37/37` forked 6 workers of ~200 MB for one unit. Of the shard plan's U
    units, a shard of two units gets 2 workers, and a shard of one runs in this process."""
    units = shard_plan_units()
    count = (units + 1) // 2  # shard i of count takes units i - 1, i - 1 + count, ...
    shard, workers = {
        "two": ("1/" + str(count), 2),
        "last": (f"{count}/{count}", 2 if units % 2 == 0 else None),
        "one": (f"{units}/{units}", None),
    }[part]
    monkeypatch.setitem(plan_mod.PLANS, "quick", SHARD_PLAN)
    seen = []
    real = jobs_mod.run_units
    monkeypatch.setattr(jobs_mod, "run_units", lambda units, n, pool: seen.append(n) or real(units, n, pool))
    argv = ["certify", "tiny-ouro", "--jobs", "6", "--shard", shard, "--out", str(tmp_path)]
    assert main(argv) == 0
    assert seen == ([] if workers is None else [workers])
