"""The per-position test on long samples (proofs/checks/positions.py): a lossless decoder passes; a
decoder lossless except past a position it does not declare (proofs/decoders/late_drift.py) is
rejected in the bands past it, on a tiny model and at the quick plan's size on the default model;
impossible and malformed samples and a plan without power fail, each named; certify runs it as one
check per setting and the certificate reads back and renders it. Fixed seeds throughout."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from plans import SMALL_PLAN

import proofs.run.plan as plan_mod
import refdec
from fastdec import DecodeConfig
from fastdec import Decoder as FastDecoder
from proofs.certificate import Certificate
from proofs.checks.positions import PositionsPlan, check_positions
from proofs.decoders.late_drift import LateDrift
from proofs.prompts import model_prompts
from proofs.run.certify import certify
from proofs.run.plan import POSITIONS_QUICK
from proofs.stats.pit import default_boundaries
from refdec.sampling import SamplingParams
from reports.render import render_certificate

TINY = "tiny-ouro"
TINY_PLAN = PositionsPlan(SamplingParams(temperature=1.0), tokens=120, tv=0.2, min_band=32, rows=16)


@pytest.fixture(scope="module")
def tiny():
    m64 = refdec.load_model(TINY, dtype=torch.float64)
    m32 = refdec.load_model(TINY, dtype=torch.float32)
    return m64, FastDecoder(m32, DecodeConfig("pipelined", draft_depth=1, second_depth=2))


def run(decoder, m64, prompt, plan=TINY_PLAN, seed=0):
    horizon = min(len(prompt) + plan.tokens, m64.cfg.max_seq_len)
    return check_positions(
        "positions", decoder, m64, prompt, plan, default_boundaries(m64.cfg, horizon), seed, TINY, "s"
    )


def test_a_lossless_decoder_passes_with_power(tiny):
    m64, dec = tiny
    r = run(dec, m64, [1, 2, 3])
    d = r.details
    assert r.passed, (d.rejected, d.no_power)
    assert d.bands == ((3, 64), (64, 123)) and d.samples == d.planned_samples
    assert all(s.has_power for s in d.strata if s.half == "all") and d.detectable_tv <= 0.2
    assert d.false_alarm is not None and d.false_alarm.tail_p >= 1e-3
    assert r.bound == pytest.approx(1e-3 / 6) and r.measured > r.bound


class Reference:
    """refdec's own sampler (uncached, float64): the law by definition."""

    def __init__(self, model):
        self.model = model

    def generate(self, prompt, max_new_tokens, sampling, seed):
        return refdec.generate(self.model, prompt, max_new_tokens, sampling, seed)


def test_the_reference_decoder_passes(tiny):
    m64, _ = tiny
    r = run(Reference(m64), m64, [1, 2, 3], replace(TINY_PLAN, tokens=60, tv=0.3))
    assert r.passed and r.details.samples == r.details.planned_samples, r.details.rejected


def test_a_decoder_lossy_past_an_undeclared_position_is_rejected_past_it(tiny):
    m64, dec = tiny
    r = run(LateDrift(dec, position=64, temperature_factor=1.5), m64, [1, 2, 3])
    d = r.details
    assert not r.passed
    assert "[64, 123) all" in d.rejected
    assert not any(x.startswith("[3, 64)") for x in d.rejected)  # exact before it: never rejected there


@pytest.mark.slow  # 8 samples of 320 tokens, 8 float64 passes (docs/measurements.md); nightly
def test_the_quick_plan_rejects_a_drift_past_position_200_on_the_default_model():
    """The quick plan's own PositionsPlan on the default model: a decoder exact up to position 200
    (a boundary nobody declared) and at 1.3 x the temperature from there is rejected in the band
    past 256, and never before 128. fastdec's draft-verify samples (the fastest setting; certify's
    quick run shows the lossless pipelined setting passing the same plan)."""
    m64 = refdec.load_model("default", dtype=torch.float64)
    m32 = refdec.load_model("default", dtype=torch.float32)
    inner = FastDecoder(m32, DecodeConfig("draft-verify", draft_depth=2, draft_ahead=4))
    prompt = list(model_prompts(m64, "default", 1)[0])
    r = run(LateDrift(inner), m64, prompt, POSITIONS_QUICK)
    d = r.details
    assert not r.passed and d.samples == d.planned_samples == 8
    assert "[256, 352) all" in d.rejected
    assert not any(x.startswith("[32, 128)") for x in d.rejected)


@pytest.mark.slow  # what certify --quick runs (its time: docs/measurements.md)
def test_the_quick_plan_passes_fastdec_pipelined_on_the_default_model():
    m64 = refdec.load_model("default", dtype=torch.float64)
    m32 = refdec.load_model("default", dtype=torch.float32)
    dec = FastDecoder(m32, DecodeConfig("pipelined", draft_depth=2, second_depth=8))
    prompt = list(model_prompts(m64, "default", 1)[0])
    r = run(dec, m64, prompt, POSITIONS_QUICK)
    assert r.passed, (r.details.rejected, r.details.no_power)
    assert r.details.detectable_tv <= POSITIONS_QUICK.tv


class Fixed:
    """A decoder that returns the same tokens for every seed."""

    def __init__(self, tokens):
        self.tokens = list(tokens)

    def generate(self, prompt, max_new_tokens, sampling, seed):
        return self.tokens[:max_new_tokens]


def test_impossible_and_malformed_samples_fail_named(tiny):
    m64, _ = tiny
    plan = replace(TINY_PLAN, sampling=SamplingParams(temperature=1.0, top_k=1), tokens=20, tv=0.5)
    greedy = refdec.generate(m64, [1, 2, 3], 20, SamplingParams())
    wrong = list(greedy)
    wrong[5] = (wrong[5] + 1) % m64.cfg.vocab_size  # outside the top-1 law there
    r = run(Fixed(wrong), m64, [1, 2, 3], plan)
    assert not r.passed and r.details.impossible >= 1 and r.measured == 0.0
    assert r.details.first_impossible.startswith("seed 0 position 8 token")
    r = run(Fixed(greedy[:10]), m64, [1, 2, 3], plan)
    assert not r.passed and r.details.malformed == r.details.samples > 0
    assert run(Fixed(greedy), m64, [1, 2, 3], plan).passed  # top-1 sampled exactly


def test_a_plan_without_time_fails_as_no_power(tiny):
    m64, dec = tiny
    r = run(dec, m64, [1, 2, 3], replace(TINY_PLAN, budget_s=1e-9))
    d = r.details
    assert not r.passed and d.stopped_by_deadline and d.samples == 0
    assert d.no_power == ("[3, 64) all", "[64, 123) all") and not d.rejected


def test_certify_runs_it_per_setting_and_the_certificate_reads_back_and_renders(monkeypatch):
    small = replace(TINY_PLAN, tokens=60, tv=0.3, false_alarm_replicates=200)
    monkeypatch.setitem(plan_mod.PLANS, "quick", replace(SMALL_PLAN, positions=small))
    cert = certify(TINY)
    checks = [c for c in cert.checks if c.kind == "positions"]
    assert [c.name for c in checks] == [f"positions[{TINY}: pipelined d1=1 d2=2]"]  # the grid's last
    assert checks[0].passed, checks[0].details.rejected
    assert Certificate.from_json(json.loads(cert.dumps())) == cert
    md = render_certificate(cert)
    lo, hi = checks[0].details.bands[0]
    assert "## The per-position test on long samples" in md and f"| [{lo}, {hi}) | all " in md


def test_predict_cuts_the_samples_short_and_scales_the_time_back():
    """--predict's probe runs the check with shorter samples (proofs/cost/predict.py probe_plan), its
    time scaled back by the work (samples x tokens) at the powers-of-two bands."""
    from proofs.checks.mutation import LIBRARY
    from proofs.checks.positions import ladder_samples
    from proofs.cost.predict import probe_plan
    from proofs.run.plan import FULL

    for plan in (plan_mod.QUICK, FULL):
        probe, scale = probe_plan(plan, LIBRARY)
        pos, short = plan.positions, probe.positions
        assert short.tokens < pos.tokens and short.tv == pos.tv
        work = ladder_samples(pos, 32) * pos.tokens / (ladder_samples(short, 32) * short.tokens)
        assert scale["positions"][1] == pytest.approx(work) and work > 1


def test_the_report_names_each_cause_of_a_failure():
    from certificates import certificate, positions, result

    d = positions(
        rejected=("[32, 128) all",),
        no_power=("[128, 256) all",),
        impossible=2,
        first_impossible="seed 3 position 40 token 7",
        decoder_error="seeds 5..7: RuntimeError: boom",
        stopped_by_deadline=True,
    )
    md = render_certificate(certificate(result(d, "positions[default: mine]", 0.0, 1e-3 / 3, False)))
    assert "**FAIL**" in md and "(stopped by its time budget)" in md
    for note in (
        "rejected: [32, 128) all",
        "no power: [128, 256) all",
        "2 impossible token(s), first seed 3 position 40 token 7",
        "decoder error: seeds 5..7: RuntimeError: boom",
    ):
        assert note in md, note
