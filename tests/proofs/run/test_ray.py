"""`loopcert certify --executor ray` on a local Ray cluster (2 CPUs, one per test module): the
certificate of --jobs 1 apart from timings, also when a worker dies and its unit is retried
(negative control: another seed's certificate differs); a unit that keeps failing is named and
its check fails; an address nothing answers at is an error in bounded time.

Marked `ray` (tox -e ray). Without ray these tests skip, except where LOOPCERT_REQUIRE_RAY is set
(tox -e ray): there a missing ray fails."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest
from plans import SHARD_PLAN, SMALL_PLAN, untimed

import proofs.run.certify as certify_mod
import proofs.run.plan as plan_mod
from loopcert.cli import main
from proofs.run.ray_executor import Fault, RayExecutor
from proofs.run.run import CertifyRun
from proofs.run.sampling_units import pool_sampling, sampling_checks, sampling_result
from proofs.run.units import plan_units, whole_result

pytestmark = pytest.mark.ray

try:
    import ray
except ImportError:
    if os.environ.get("LOOPCERT_REQUIRE_RAY"):
        pytest.fail("LOOPCERT_REQUIRE_RAY is set (tox -e ray) but ray cannot be imported", pytrace=False)
    pytest.skip("ray is not installed (pip install 'loopcert[ray]')", allow_module_level=True)


@pytest.fixture(scope="module")
def cluster():
    """One local cluster for the module (its start takes seconds): the executor joins it."""
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def runs(cluster, tmp_path_factory):
    """--jobs 1 and --executor ray of one seed (the ray run's theorem1_search worker is killed on
    its first attempt), and --executor ray of another seed."""
    mp = pytest.MonkeyPatch()
    mp.setitem(plan_mod.PLANS, "quick", SHARD_PLAN)
    root = tmp_path_factory.mktemp("ray")
    fault = Fault("check/theorem1_search", 1, str(root / "attempts"))
    real = certify_mod.pick_executor

    def faulty(*a):
        ex = real(*a)
        if isinstance(ex, RayExecutor) and a[0] == "ray" and faulty.armed:
            ex.fault = fault
        return ex

    faulty.armed = False
    mp.setattr(certify_mod, "pick_executor", faulty)
    argv = ["certify", "tiny-ouro", "--out"]
    try:
        rcs = {"serial": main([*argv, str(root / "serial"), "--seed", "2", "--jobs", "1"])}
        faulty.armed = True
        rcs["ray"] = main([*argv, str(root / "ray"), "--seed", "2", "--executor", "ray", "--jobs", "2"])
        faulty.armed = False
        rcs["other"] = main([*argv, str(root / "other"), "--seed", "1", "--executor", "ray"])
    finally:
        mp.undo()
    certs = {name: json.loads((root / name / "certificate.json").read_text()) for name in rcs}
    return rcs, certs, root


def test_ray_gives_the_serial_certificate_after_a_worker_died(runs):
    rcs, certs, root = runs
    assert rcs == {"serial": 0, "ray": 0, "other": 0}
    assert untimed(certs["ray"]) == untimed(certs["serial"])
    assert len(list((root / "attempts").iterdir())) == 1  # the worker died once; the retry ran it


def test_the_comparison_sees_another_seed(runs):
    """Negative control: seed 1 draws other samples and other theorem-1 cases."""
    _, certs, _ = runs
    assert untimed(certs["other"]) != untimed(certs["serial"])


@pytest.mark.parametrize("raises", [False, True], ids=["worker-dies", "task-raises"])
def test_a_unit_that_keeps_failing_is_named_and_fails_its_check(cluster, tmp_path, raises):
    """Killed (or raising) on both attempts: no result, so the unit's raw result names it and the
    check assembled from it fails; the other units of the run are unaffected."""
    import torch

    run = CertifyRun(SMALL_PLAN, "tiny-ouro", None, "cpu", torch.float32, 0, lambda _m: None)
    units, _ = plan_units(run, "float32")
    chk = sampling_checks(run)[0]
    bad = chk.units[0].id
    todo = [u for u in units if u[0] in (bad, "check/theorem1_random")]
    said = []
    run.say = said.append
    ex = RayExecutor(2, "cpu", fault=Fault(bad, 2, str(tmp_path / "attempts"), raises=raises))
    got = ex.run_all(run, todo, lambda w: pool_sampling(run, [u for u, _ in todo], workers=w))
    assert len(list((tmp_path / "attempts").iterdir())) == 2  # tried twice
    assert bad in got[bad]["unit_error"] and "2 attempts" in got[bad]["unit_error"]
    result = sampling_result(run, chk, [got[u.id] for u in chk.units])
    assert not result.passed and bad in result.error
    assert any(bad in line and "FAILED" in line for line in said)
    assert whole_result("theorem1_random", "theorem1", got["check/theorem1_random"]).passed


def test_an_address_nothing_answers_at_is_an_error_in_bounded_time(tmp_path, capsys):
    with socket.socket() as s:  # a port nothing listens on once this is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    argv = ["certify", "tiny-ouro", "--executor", "ray", "--ray-address", f"127.0.0.1:{port}"]
    assert main([*argv, "--out", str(tmp_path)]) == 2
    assert time.monotonic() - t0 < 35
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err and "no Ray cluster answers" in err
    assert not (tmp_path / "certificate.json").exists()
