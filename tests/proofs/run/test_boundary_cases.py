"""Exact-law cases at boundaries: the plan's first case again after a prompt that
ends just before a boundary, so that its tokens straddle it; placed at windows first, then at the
declared boundaries past the plain cases' reach; recorded with their own prompt; and they see a
decoder that turns lossy at a position the plain cases never reach."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from plans import SMALL_PLAN

from fastdec import Decoder
from proofs.boundaries import DECODER, LADDER, MODEL, SPECULATION, Boundary
from proofs.checks.distribution import check_distribution
from proofs.decoders.late_drift import LateDrift
from proofs.run.cases import PLAIN_REACH, boundary_positions, chosen_cases, planned_cases, setup_record
from proofs.run.plan import FULL, QUICK
from proofs.run.run import CertifyRun, load
from proofs.stats.exact_laws import Oracle
from refdec.sampling import SamplingParams

T07 = ("T=0.7 top-k=4", SamplingParams(temperature=0.7, top_k=4), 3)


def test_windows_first_then_declared_boundaries_past_the_plain_cases():
    bs = [
        Boundary(5, SPECULATION, "a prompt of 5 tokens"),
        Boundary(16, DECODER, "a prefill at engine width 16"),
        Boundary(64, DECODER, "cache capacity 64 filled"),
        Boundary(100, MODEL, "sliding_window 100 wraps", window=True),
        Boundary(128, LADDER, "2^7"),
        Boundary(256, DECODER, "cache capacity 256 filled"),
    ]
    assert 16 <= PLAIN_REACH < 64
    assert [b.position for b in boundary_positions(bs, 300, 1)] == [100]
    assert [b.position for b in boundary_positions(bs, 300, 3)] == [100, 64, 256]
    assert [b.position for b in boundary_positions(bs, 200, 3)] == [100, 64]  # within the horizon
    assert boundary_positions(bs[:2] + bs[4:5], 300, 3) == []  # speculation, early, ladder: none
    assert [b.position for b in boundary_positions(bs, 300, 3, max_len=258)] == [100, 64]  # not the end
    assert (QUICK.boundary_cases, FULL.boundary_cases) == (1, 0)


def test_a_boundary_case_straddles_its_boundary_and_is_recorded_with_its_prompt():
    plan = replace(SMALL_PLAN, sampling_cases=(T07,))
    oracle = Oracle(load("tiny-loopcoder", torch.float64, "cpu"))
    at = [Boundary(40, DECODER, "page 40 fills")]
    laws, samples = chosen_cases(oracle, "tiny-loopcoder", plan, at=at)
    plain, edge = laws
    assert edge.case.name == "T=0.7 top-k=4 @ 40 (page 40 fills)" and len(edge.case.prompt) == 39
    assert len(plain.case.prompt) < 39 and edge.case.sampling == plain.case.sampling
    record = setup_record(laws, samples)
    assert record["cases"][1]["prompt"] == list(edge.case.prompt) and "prompt" not in record["cases"][0]
    again, n = planned_cases(oracle, "tiny-loopcoder", record)
    assert [law.case for law in again] == [plain.case, edge.case] and n == samples


def test_the_run_places_the_quick_plans_case_at_the_window():
    run = CertifyRun(QUICK, "tiny-loopcoder", None, "cpu", torch.float32, 0, lambda _m: None)
    (b,) = run.case_boundaries()
    assert (b.position, b.window) == (8, True)
    names = [law.case.name for law in run.sampling_setup("tiny-loopcoder").laws]
    assert names[-1] == "T=0.7 top-k=4 @ 8 (loop_window_size 8 wraps)"


@pytest.mark.tier2
@pytest.mark.parametrize("at", [48, 200])
def test_a_decoder_lossy_past_a_position_fails_the_case_placed_there_only(at):
    """LateDrift (exact before its position, 1.3x the temperature from it on) at 48: the plain case
    (a prompt of at most 32 tokens, 3 tokens) passes, the case placed at 48 rejects it. The
    negative control: drifting at 200, past every token either case draws, both pass."""
    plan = replace(SMALL_PLAN, sampling_cases=(T07,), tv=0.1)
    oracle = Oracle(load("tiny-loopcoder", torch.float64, "cpu"))
    laws, samples = chosen_cases(oracle, "tiny-loopcoder", plan, at=[Boundary(48, DECODER, "page 48")])
    model = load("tiny-loopcoder", torch.float32, "cpu")
    decoder = LateDrift(Decoder(model, "draft-verify"), position=at)
    r = check_distribution("sampling", decoder, laws, plan.target, 0, samples)
    rejected = set(r.details.rejected)
    assert rejected == ({laws[1].case.name} if at == 48 else set()), (rejected, r.details.no_power)
    assert r.details.no_power == ()


@pytest.mark.tier2
def test_coverage_counts_the_per_position_tests_long_samples():
    """A boundary past the greedy-at-depth horizon (tiny-ouro's cache capacity 64, with a horizon of
    about 32) is beyond it, unless the per-position test's long samples crossed it: then it is covered
    and its row counts them. The control: the same run without the per-position test."""
    from proofs.checks.positions import PositionsPlan
    from proofs.run.certify import certify

    long = PositionsPlan(SamplingParams(temperature=1.0), tokens=80, tv=0.5, min_band=16, budget_s=20.0)
    rows = {}
    for positions in (None, long):
        plan = replace(SMALL_PLAN, positions=positions, mutant_ids=("always-accept",))
        with pytest.MonkeyPatch.context() as mp:
            import proofs.run.plan as plan_mod

            mp.setitem(plan_mod.PLANS, "quick", plan)
            cert = certify("tiny-ouro", progress=lambda _m: None)
        rows[positions is None] = {r.position: r for r in cert.check("coverage").details.rows}
        drawn = [c.details.samples for c in cert.checks if c.kind == "positions"]
    without, with_long = rows[True][64], rows[False][64]
    assert without.status == "beyond the horizon" and without.samples == 0
    assert with_long.status == "covered" and with_long.greedy_runs == 0
    assert with_long.samples == sum(drawn) > 0  # every long sample crossed it
