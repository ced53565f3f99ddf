"""INCOMPLETE, never FAIL by load: a sampling check that a time budget cuts short
of its planned N with nothing rejected is incomplete, not failed; the verdict is INCOMPLETE (exit 3)
when nothing failed; partial samples that already reject still FAIL; the plan's budget follows the
measured rate, a given --time-budget stays a hard limit. The runs use the reduced plan (seconds on
tiny-ouro); the decoders are fastdec behind the protocol, one slowed by a sleep per sample so that
its rate is what the test says, whatever the machine's load."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from certificates import certificate, not_applicable, result
from plans import SMALL_PLAN, FastdecWrapper

import proofs.run.plan as plan_mod
from loopcert.cli import main
from proofs.certificate import Certificate, Refusal, Scope, read_certificate
from proofs.result import CheckResult
from proofs.run.budget import RATE_SLACK, RUNAWAY, RateDeadline
from proofs.run.certify import certify, verdict_of
from refdec.errors import LoopcertError
from reports.render import render_certificate

SECONDS_PER_SAMPLE = 0.002  # Slow's rate: 500 samples/s at most
N = 441  # SMALL_PLAN's N on tiny-ouro (T=1, 3 tokens, TV 0.3)


class Lossless(FastdecWrapper):
    """fastdec's draft-verify behind the protocol: lossless, batched (its first call draws 64 seeds)."""


class Slow(Lossless):
    """Lossless at a known rate: a sleep per sample dominates the decode."""

    def generate_batch(self, prompts, max_new_tokens, sampling, seeds):
        if not sampling.greedy:
            time.sleep(SECONDS_PER_SAMPLE * len(seeds))
        return super().generate_batch(prompts, max_new_tokens, sampling, seeds)


class Cold(Lossless):
    """Lossy: samples at a fifth of the temperature asked for (greedy untouched), far off the law."""

    def generate_batch(self, prompts, max_new_tokens, sampling, seeds):
        if not sampling.greedy:
            sampling = dataclasses.replace(sampling, temperature=sampling.temperature / 5)
        return super().generate_batch(prompts, max_new_tokens, sampling, seeds)


def slow(model):
    return Slow(model)


def cold(model):
    return Cold(model)


@pytest.fixture
def small_plan(monkeypatch):
    monkeypatch.setitem(plan_mod.PLANS, "quick", SMALL_PLAN)
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # --decoder test_incomplete:...


def sampling_check(cert: Certificate) -> CheckResult:
    return next(c for c in cert.checks if c.kind == "sampling")


def test_a_tiny_time_budget_makes_a_lossless_decoder_incomplete_never_fail(small_plan, tmp_path, capsys):
    """The budget cuts the case at its first call (64 of N samples), nothing rejects: INCOMPLETE,
    exit 3, the check incomplete (not failed) with N reached / planned and the TV it detects."""
    out = tmp_path / "out"
    argv = ["certify", "tiny-ouro", "--decoder", "test_incomplete:slow", "--time-budget", "0.05"]
    assert main([*argv, "--out", str(out)]) == 3
    cert = read_certificate(out / "certificate.json")
    s = sampling_check(cert)
    assert cert.verdict == "INCOMPLETE" and not cert.passed and cert.failed == ()
    assert cert.incomplete == (s.name,) and not s.passed and not s.failed
    assert s.details.incomplete == ("T=1",) and s.details.no_power == () and s.details.rejected == ()
    case = s.details.cases[0]
    assert case.stopped_by_deadline and case.samples < case.planned == N
    assert s.incomplete.startswith("the time budget ran out before the planned N, with nothing rejected: ")
    # the first call's 64 seeds take 0.13 s, past the 0.05 s budget: the case stops there
    assert s.incomplete.endswith("T=1: 64/441 samples, detects no TV yet (target 0.3)")
    console = capsys.readouterr().out
    assert console.count("INCOMPLETE: ") == 1 and f"; incomplete: {s.name}" in console
    assert f"incomplete: {s.name}: the time budget ran out" in console and "failed: " not in console
    md = (out / "certificate.md").read_text()
    assert md.startswith("# loopcert certificate: INCOMPLETE") and f"incomplete: {s.name}" in md
    assert "INCOMPLETE (time budget)" in md and "**FAIL**" not in md


def test_a_lossy_decoder_with_the_same_budget_fails_on_its_partial_evidence(small_plan, tmp_path):
    """A decoder 5x too cold, cut as short: its first 64 samples already reject (Holm), so it
    FAILs (exit 1) as without a budget; its check is failed, not incomplete."""
    out = tmp_path / "out"
    argv = ["certify", "tiny-ouro", "--decoder", "test_incomplete:cold", "--time-budget", "0.05"]
    assert main([*argv, "--out", str(out)]) == 1
    cert = read_certificate(out / "certificate.json")
    s = sampling_check(cert)
    assert cert.verdict == "FAIL" and s.name in cert.failed and cert.incomplete == ()
    assert s.failed and s.incomplete is None and s.details.rejected == ("T=1",)
    assert s.details.cases[0].stopped_by_deadline and s.details.cases[0].samples < N


def test_the_plans_budget_follows_the_measured_rate_a_given_budget_is_a_hard_limit(monkeypatch):
    """Slow needs ~0.9 s for its N; the plan gives 0.5 s (a machine at half speed). Under the plan's
    budget the unit runs on to N at its measured rate (within RUNAWAY x 0.5 s): PASS. The same 0.5 s
    given as --time-budget cuts it: INCOMPLETE."""
    plan = replace(SMALL_PLAN, sampling_budget_s=0.5)
    assert N * SECONDS_PER_SAMPLE > plan.sampling_budget_s
    assert N * SECONDS_PER_SAMPLE * RATE_SLACK < RUNAWAY * plan.sampling_budget_s
    stretched = certify("tiny-ouro", Slow, plan=plan)
    s = sampling_check(stretched)
    assert s.passed and s.details.cases[0].samples == N and not s.details.cases[0].stopped_by_deadline
    assert stretched.verdict == "PASS"
    capped = certify("tiny-ouro", Slow, plan=plan, time_budget=plan.sampling_budget_s)
    c = sampling_check(capped)
    assert capped.verdict == "INCOMPLETE" and c.details.cases[0].samples < N and c.incomplete


def test_a_rate_deadline_stretches_to_n_at_the_measured_rate_within_the_cap():
    d = RateDeadline(start=100.0, share=2.0, planned=1000, cap=8.0)
    assert d(0, 0.0) == 108.0  # no rate yet: it may measure one, within the cap
    assert d(100, 0.5) == pytest.approx(100.0 + RATE_SLACK * 5.0)  # N at 200/s: 5 s, x the slack
    assert d(500, 0.5) == 102.0  # fast: never less than its share
    assert d(10, 1.0) == 108.0  # a collapsed rate: the runaway cap


def test_verdict_order_fail_then_non_reproducible_then_incomplete_then_pass():
    assert verdict_of([], []) == "PASS"
    assert verdict_of([], ["sampling[m: s]"]) == "INCOMPLETE"
    assert verdict_of(["reproducibility"], ["sampling[m: s]"]) == "NON-REPRODUCIBLE"
    assert verdict_of(["greedy_float64"], ["sampling[m: s]"]) == "FAIL"


def test_an_incomplete_check_is_not_passed_and_not_failed():
    r = CheckResult("sampling[m: s]", 0.5, 1e-4, False, kind="sampling", incomplete="64/441 samples")
    assert not r.passed and not r.failed
    assert CheckResult.from_dict(json.loads(r.to_json())) == r
    assert CheckResult("g", 0.0, 0.0, False, kind="greedy").failed
    with pytest.raises(LoopcertError, match="'x' passed, so it cannot be incomplete"):
        CheckResult("x", 0.0, 0.0, True, kind="sampling", incomplete="cut")


def test_the_certificate_json_round_trips_incomplete_and_scope_and_reads_older_ones():
    cut = result("sampling", "sampling[m: s]", passed=False, incomplete="T=1: 64/441 samples")
    cert = replace(
        certificate(cut, not_applicable("theorem1", "theorem1_traces", "R = 2")),
        scope=Scope(
            ("min_p",),
            ("logit_bias",),
            ("T=1 bias (logit_bias)",),
            (Refusal("c", "k", ("min_p",), False, "no"),),
        ),
    )
    assert cert.verdict == "INCOMPLETE" and cert.incomplete == ("sampling[m: s]",) and cert.failed == ()
    data = json.loads(cert.dumps())
    assert data["incomplete"] == ["sampling[m: s]"] and data["passed"] is False
    assert Certificate.from_json(data) == cert
    for key in ("incomplete", "scope"):  # certificate.json of schema 2 written before them
        del data[key]
    for c in data["checks"]:
        del c["incomplete"]
    old = Certificate.from_json(data)
    assert old.incomplete == () and old.scope is None and old.check("sampling[m: s]").incomplete is None
    assert render_certificate(cert).startswith("# loopcert certificate: INCOMPLETE")


def test_merged_shards_cut_by_their_budget_are_incomplete(small_plan, tmp_path):
    """Each shard's run stopped short by --time-budget: `loopcert merge` assembles INCOMPLETE, exit 3."""
    argv = ["certify", "tiny-ouro", "--decoder", "test_incomplete:slow", "--time-budget", "0.05"]
    assert [main([*argv, "--shard", f"{i}/2", "--out", str(tmp_path / f"s{i}")]) for i in (1, 2)] == [0, 0]
    assert main(["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m")]) == 3
    cert = read_certificate(tmp_path / "m" / "certificate.json")
    assert cert.verdict == "INCOMPLETE" and cert.incomplete == (sampling_check(cert).name,)
