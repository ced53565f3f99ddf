"""assert_lossless's default, the smoke plan (proofs/run/plan.py SMOKE; `loopcert certify --smoke`,
`--plan smoke`): long samples read at every position, greedy past 64 positions, every core field
sampled. It passes fastdec and rejects, on tiny-ouro, a decoder exact for 40 tokens and then 1.3x hot
(which the 3-token cases cannot see), naming the per-position check and the way the tokens lean."""

from __future__ import annotations

import pytest

import fastdec
from fastdec import DecodeConfig
from loopcert.api import SMOKE_PLAN, load_model
from loopcert.testing import assert_lossless
from proofs.decoders.late_drift import LateDrift


@pytest.fixture(scope="module")
def inner():
    return fastdec.Decoder(load_model("tiny-ouro"), DecodeConfig("pipelined", draft_depth=1, second_depth=2))


def test_the_smoke_plan_reads_long_samples_past_64_and_samples_every_core_field():
    fields = {
        f for _, params, _ in SMOKE_PLAN.sampling_cases for f in ("top_k", "top_p") if getattr(params, f)
    }
    assert fields == {"top_k", "top_p"}
    assert SMOKE_PLAN.depth_context > 64 and SMOKE_PLAN.positions.tokens > 64 and SMOKE_PLAN.positions.cases


@pytest.mark.tier2  # ~11 s: the smoke plan's every check, the drifted decoder failing early
def test_assert_lossless_by_default_rejects_a_drift_after_40_tokens(inner):
    with pytest.raises(AssertionError) as e:
        assert_lossless(LateDrift(inner, position=42, temperature_factor=1.3), "tiny-ouro")
    msg = str(e.value)
    assert "(smoke plan, seed 0): FAIL" in msg
    assert "positions[tiny-ouro: proofs.decoders.late_drift.LateDrift]: martingale evidence rejects" in msg
    assert "tokens rarer than the law gives (hotter)" in msg


@pytest.mark.tier2  # ~14 s: every check of the smoke plan at its full N
def test_assert_lossless_by_default_passes_fastdec(inner):
    cert = assert_lossless(inner, "tiny-ouro")
    assert cert.stamp.mode == "smoke"
    names = [c.name for c in cert.checks if c.kind == "positions"]
    assert len(names) == 3 and all(c.passed for c in cert.checks if c.kind == "positions")


def test_the_cli_takes_the_smoke_plan_by_flag_and_by_name():
    from loopcert.cli import build_parser
    from loopcert.commands.certify import plan_by_name

    parser = build_parser()
    for argv in (["certify", "--smoke"], ["certify", "--plan", "smoke"]):
        args = parser.parse_args(argv)
        plan_by_name(args)
        assert (args.mode, args.plan) == ("smoke", None)
    args = parser.parse_args(["certify", "--plan", "some/plan.json"])
    plan_by_name(args)
    assert (args.mode, args.plan) == ("quick", "some/plan.json")
