"""`loopcert certify --decoder SPEC --relative-to SPEC2` and a decoder declaring its sampler
convention, through the command: the certificate's rows, stamp and sections (the checks' own
statistics: tests/proofs/checks/test_relative.py, tests/proofs/stats/test_two_sample.py).

The engines are tests/proofs/checks/test_relative.py's fake engines (a law refdec computes)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from plans import SMALL_PLAN, untimed

import proofs.run.plan as plan_mod
from loopcert.cli import main
from proofs.certificate import read_certificate
from refdec.sampling import SamplingParams

# a top-p case whose two conventions lie TV 0.28 apart on tiny-ouro's first token, beside T=1
CONVENTION_PLAN = replace(
    SMALL_PLAN,
    sampling_cases=(
        ("T=1", SamplingParams(temperature=1.0), 3),
        ("T=0.5 top-p=0.6", SamplingParams(temperature=0.5, top_p=0.6), 3),
    ),
    tv=0.2,
)
ENGINES = "test_relative"


@pytest.fixture
def engines(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "checks"))
    monkeypatch.setitem(plan_mod.PLANS, "quick", CONVENTION_PLAN)


def certify(tmp_path, decoder, *more):
    rc = main(["certify", "tiny-ouro", "--decoder", f"{ENGINES}:{decoder}", *more, "--out", str(tmp_path)])
    return rc, read_certificate(tmp_path / "certificate.json"), (tmp_path / "certificate.md").read_text()


def test_two_lossless_modes_of_a_filters_first_engine_pass_judged_under_its_convention(engines, tmp_path):
    """The engine declares filters-first: its top-p case is judged against that law (and passes),
    the stamp says so, the conventions' difference is a reported finding, not a failure, and
    the engine-relative check of its speculative mode against its plain one is its own row."""
    rc, cert, md = certify(tmp_path, "speculative_ff_engine", "--relative-to", f"{ENGINES}:plain_ff_engine")
    assert rc == 0 and cert.verdict == "PASS", cert.failed
    assert cert.stamp.sampler_order == "filters-first"
    assert cert.stamp.relative_to == f"{ENGINES}:plain_ff_engine"
    assert "--relative-to test_relative:plain_ff_engine" in cert.stamp.command
    sampling = cert.check(f"sampling[tiny-ouro: {ENGINES}:speculative_ff_engine]")
    assert {c.order for c in sampling.details.cases} == {"filters-first"}
    rel = cert.check(f"relative_sampling[tiny-ouro: {ENGINES}:speculative_ff_engine]")
    assert (
        rel.kind == "relative_sampling"
        and rel.passed
        and rel.details.reference == f"{ENGINES}:plain_ff_engine"
    )
    assert all(c.has_power for c in rel.details.cases)
    conv = cert.check("sampler_convention")
    assert (
        conv.passed and conv.details.claimed == "filters-first" and conv.details.other == "temperature-first"
    )
    by_case = {c.case: c for c in conv.details.cases}
    assert by_case["T=1"].binned_tv < 1e-12 and not by_case["T=1"].order_matters
    assert by_case["T=0.5 top-p=0.6"].order_matters and by_case["T=0.5 top-p=0.6"].views[0].token_tv > 0.25
    assert "| sampler convention" in md and "filters-first (declared by the decoder" in md
    assert "## Engine-relative check" in md and "## Sampler convention: judged as filters-first" in md
    summary = next(line for line in md.splitlines() if line.startswith("| sampler_convention"))
    assert "reported" in summary and "FAIL" not in summary


def test_a_lossy_speculative_mode_fails_the_relative_check(engines, tmp_path):
    """Against its lossless plain mode, a speculative mode off by TV 0.3 of the first token's law
    (above the plan's 0.2) fails the engine-relative check, named as a difference of the laws."""
    rc, cert, md = certify(tmp_path, "lossy_engine", "--relative-to", f"{ENGINES}:plain_engine")
    assert rc == 1
    name = f"relative_sampling[tiny-ouro: {ENGINES}:lossy_engine]"
    assert name in cert.failed and cert.check(name).details.rejected
    assert "sampler_convention" not in [c.name for c in cert.checks]  # temperature-first: no finding
    assert "the two decoders' laws differ" in md


def test_a_decoder_that_does_not_follow_its_declared_convention_fails_sampling(engines, tmp_path):
    """Negative control of the convention: declared filters-first, sampled temperature-first: the
    top-p case (TV 0.28 between the conventions, binned by the views) fails the sampling check,
    and the finding shows the distance that explains it."""
    rc, cert, _ = certify(tmp_path, "wrong_convention_engine")
    assert rc == 1
    sampling = cert.check(f"sampling[tiny-ouro: {ENGINES}:wrong_convention_engine]")
    assert not sampling.passed and sampling.details.rejected == ("T=0.5 top-p=0.6",)
    assert cert.check("sampler_convention").measured > 0.2


@pytest.mark.slow
def test_relative_units_run_in_workers_and_shards_as_in_one_process(engines, tmp_path):
    """--jobs 2 and two shards merged give the engine-relative check of the serial run."""
    spec = ("lossy_engine", "--relative-to", f"{ENGINES}:plain_engine")
    _, serial, _ = certify(tmp_path / "serial", *spec)
    _, jobs, _ = certify(tmp_path / "jobs", *spec, "--jobs", "2")
    for i in (1, 2):
        assert certify_shard(tmp_path / f"s{i}", spec, f"{i}/2") == 0
    assert main(["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "merged")]) == 1
    merged = read_certificate(tmp_path / "merged" / "certificate.json")
    name = f"relative_sampling[tiny-ouro: {ENGINES}:lossy_engine]"
    want = untimed(serial.check(name).to_dict())
    assert untimed(jobs.check(name).to_dict()) == want
    assert untimed(merged.check(name).to_dict()) == want


def certify_shard(out, spec, shard):
    argv = ["certify", "tiny-ouro", "--decoder", f"{ENGINES}:{spec[0]}", *spec[1:], "--shard", shard]
    rc = main([*argv, "--out", str(out)])
    assert json.loads((out / "shard.json").read_text())["identity"]["relative_to"] == spec[-1]
    return rc


def test_usage_errors_name_the_value(engines, tmp_path, capsys):
    assert (
        main(["certify", "tiny-ouro", "--relative-to", f"{ENGINES}:plain_engine", "--out", str(tmp_path)])
        == 2
    )
    assert "--relative-to test_relative:plain_engine needs --decoder" in capsys.readouterr().err
    argv = ["certify", "tiny-ouro", "--decoder", f"{ENGINES}:plain_engine", "--relative-to", "nocolon"]
    assert main([*argv, "--out", str(tmp_path)]) == 2
    assert "'nocolon'" in capsys.readouterr().err
    assert main([*argv[:-1], f"{ENGINES}:plain_engine", "--predict", "1", "--out", str(tmp_path)]) == 2
    assert "--predict does not predict the engine-relative check" in capsys.readouterr().err


def test_a_ray_worker_rebuilds_the_relative_run_from_its_spec(engines):
    """What a Ray task gets (proofs/run/remote.py RunSpec, pickled): the worker's run has the
    reference decoder and the parent's relative units, planned under the parent's convention."""
    import pickle

    import torch

    from proofs.decoders.candidates import user_candidate
    from proofs.run.remote import RunSpec
    from proofs.run.run import CertifyRun
    from proofs.run.units import plan_units

    parent = CertifyRun(
        CONVENTION_PLAN,
        "tiny-ouro",
        user_candidate(f"{ENGINES}:speculative_ff_engine"),
        "cpu",
        torch.float32,
        0,
        lambda _m: None,
        relative=user_candidate(f"{ENGINES}:plain_ff_engine"),
    )
    units, _ = plan_units(parent, "float32")
    ids = [u for u, _ in units]
    assert sum(u.startswith("relative/") for u in ids) == 2 and "check/sampler_convention" in ids
    spec = pickle.loads(pickle.dumps(RunSpec.of(parent, units)))
    assert spec.relative_to == f"{ENGINES}:plain_ff_engine"
    worker, fns = spec.build(lambda _m: None)
    assert list(fns) == ids and worker.relative.label == spec.relative_to
    assert worker.sampler_order == parent.sampler_order == "filters-first"
    # the plan's budget grows with the relative units' draws (about 4x the sampling units')
    setup = parent.sampling_setup("tiny-ouro")
    grown = 1 + 2 * sum(setup.relative) / sum(setup.samples)
    assert parent.pool_budget_s == pytest.approx(parent.sampling_budget_s * grown) and grown > 4
    capped = parent.__class__(
        CONVENTION_PLAN, "tiny-ouro", parent.user, "cpu", torch.float32, 0, lambda _m: None, 100.0
    )
    capped.relative = parent.relative
    assert capped.pool_budget_s == 100.0  # a given --time-budget caps both
