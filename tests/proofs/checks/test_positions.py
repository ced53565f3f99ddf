"""The per-position test on long samples (proofs/checks/positions.py): a lossless decoder passes; a
decoder lossless except past a position it does not declare (proofs/decoders/late_drift.py) is
rejected in the bands past it, on a tiny model and at the quick plan's size on the default model;
the drift family (exact for 40 tokens, then hotter, colder, a looser nucleus, penalties that forget
the output) is rejected by the quick plan's per-position checks and its lossless twin passes;
impossible and malformed samples fail, each named; a plan without time is incomplete, never failed;
certify runs it as one check per setting and law and the certificate reads back and renders it.
Fixed seeds throughout."""

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
    # the binned half of alpha over 6 strata, the martingale half over 3 statistics x 8 strata (two
    # bands and their halves, the whole horizon, the tail)
    assert r.bound == pytest.approx(1e-3 / 2 / 24) and r.measured > r.bound
    assert len(d.martingale) == 24 and not d.martingale_rejected and d.drift_target is None


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
    assert "[64, 123) all" in d.rejected or "score [64, 123) all" in d.martingale_rejected
    assert not any(x.startswith("[3, 64)") for x in d.rejected)  # exact before it: never rejected there
    assert not any("[3, 64)" in x for x in d.martingale_rejected)


@pytest.mark.slow  # the quick plan's samples of 320 tokens on the default model; nightly
def test_the_quick_plan_rejects_a_drift_past_position_200_on_the_default_model():
    """The quick plan's own PositionsPlan on the default model: a decoder exact up to position 200
    (a boundary nobody declared) and at 1.3 x the temperature from there is rejected past 128 (the
    martingale evidence stops early, never before the drift's band)."""
    m64 = refdec.load_model("default", dtype=torch.float64)
    m32 = refdec.load_model("default", dtype=torch.float32)
    inner = FastDecoder(m32, DecodeConfig("draft-verify", draft_depth=2, draft_ahead=4))
    prompt = list(model_prompts(m64, "default", 1)[0])
    r = run(LateDrift(inner), m64, prompt, POSITIONS_QUICK)
    d = r.details
    assert r.failed and (d.martingale_rejected or d.rejected)
    assert not any("[32, 128)" in x for x in d.martingale_rejected + d.rejected)


@pytest.mark.slow  # what certify --quick runs (its time: docs/measurements.md)
def test_the_quick_plan_passes_fastdec_pipelined_on_the_default_model():
    m64 = refdec.load_model("default", dtype=torch.float64)
    m32 = refdec.load_model("default", dtype=torch.float32)
    dec = FastDecoder(m32, DecodeConfig("pipelined", draft_depth=2, second_depth=8))
    prompt = list(model_prompts(m64, "default", 1)[0])
    r = run(dec, m64, prompt, POSITIONS_QUICK)
    assert r.passed, (r.details.rejected, r.details.martingale_rejected, r.details.no_power)
    assert r.details.detectable_tv <= POSITIONS_QUICK.tv
    tail = r.details.drift_power[0]
    assert tail.half == "tail" and tail.hotter <= 1.1 and tail.colder >= 0.9


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


def test_a_plan_without_time_is_incomplete_not_failed(tiny):
    """The budget ran out before N with nothing against the decoder: incomplete (neither passed nor
    failed), saying how far it got; the same budget on a decoder whose tokens are impossible fails."""
    m64, dec = tiny
    r = run(dec, m64, [1, 2, 3], replace(TINY_PLAN, budget_s=1e-9))
    d = r.details
    assert not r.passed and not r.failed and d.stopped_by_deadline and d.samples == 0
    assert r.incomplete.startswith("stopped by its time budget") and "0 of" in r.incomplete
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
        "binned PIT rejects: [32, 128) all",
        "no power: [128, 256) all",
        "2 impossible token(s), first seed 3 position 40 token 7",
        "decoder error: seeds 5..7: RuntimeError: boom",
    ):
        assert note in md, note


# -- martingale evidence and the drift family (docs/certify.md#martingale-evidence) -----------------


def quick_positions(decoder, m64, prompt, case=None):
    """The quick plan's per-position check as certify runs it (temperature-first, no folder config)."""
    from proofs.checks.positions import check_positions_of
    from refdec.sampling import TEMPERATURE_FIRST

    plan = plan_mod.QUICK.positions
    return check_positions_of(
        "p", decoder, m64, prompt, plan, TEMPERATURE_FIRST, None, 0, TINY, "s", None, None, case
    )


@pytest.mark.tier2  # ~25 s: the quick plan's full N on tiny-ouro
def test_the_quick_plan_plans_n_for_a_ten_percent_drift_over_the_tail(tiny):
    """N comes from the pilot's laws: the tail [50, 128) (48 tokens after the 2-token prompt) then
    detects a temperature 1.1x or 0.9x with probability 0.99, and the check says so."""
    m64, dec = tiny
    r = quick_positions(dec, m64, [1, 2])
    d = r.details
    assert r.passed and d.planned_by == "martingale" and d.samples == d.planned_samples
    tail = d.drift_power[0]
    assert tail.half == "tail" and tail.band == (50, 128)
    assert tail.hotter <= 1.1 and tail.colder >= 0.9
    assert "from any position <= 50 to 128" in r.power and "target +-10%" in r.power


@pytest.mark.parametrize(
    ("label", "case"),
    [
        ("1.15x temperature", None),
        pytest.param("0.9x temperature", None, marks=pytest.mark.tier2),  # ~12 s
        ("top-p loosened", "T=1.5 top-p=0.9"),
    ],
)
def test_the_drift_family_is_rejected_by_the_quick_plan_on_tiny_ouro(tiny, label, case):
    """Exact for 40 tokens, then wrong: the quick plan's check under the law that binds rejects it
    (a looser nucleus as impossible tokens), and stops early where the evidence decides."""
    from proofs.decoders.late_drift import family
    from proofs.run.plan import QUICK_CASES

    m64, dec = tiny
    law = None
    if case is not None:
        spec = next(c for c in QUICK_CASES if c[0] == case)
        law = (case, spec[1], plan_mod.QUICK.positions.case_drift)
    r = quick_positions(family(dec, 2)[label], m64, [1, 2], law)
    d = r.details
    assert r.failed and (d.martingale_rejected or d.impossible), (d.martingale, d.no_power)
    if d.impossible:
        assert int(d.first_impossible.split("position ")[1].split()[0]) >= 42  # never before the drift


def test_penalties_that_forget_the_output_are_rejected_under_the_engine_case(tiny):
    """The second part a new request: frequency and presence forget the first 40 tokens. Under the
    quick plan's engine case at depth (its penalties, no stop) it is rejected: the score, or tokens
    its filters exclude (the penalties moved the nucleus), never before the drift."""
    from proofs.decoders.late_drift import family
    from proofs.run.plan import ENGINE_CASES

    m64, dec = tiny
    name, params = ENGINE_CASES[0][0], ENGINE_CASES[0][1]
    law = (name, replace(params, stop_token_ids=()), plan_mod.QUICK.positions.case_drift)
    r = quick_positions(family(dec, 2)["penalties forget the output"], m64, [1, 2], law)
    d = r.details
    assert r.failed and (d.martingale_rejected or d.impossible), d.martingale
    if d.impossible:  # the penalties moved a token past the case's filters
        assert int(d.first_impossible.split("position ")[1].split()[0]) >= 42


@pytest.mark.tier2  # ~25 s: the quick plan's full N on tiny-ouro
def test_the_lossless_twin_passes_the_quick_plan(tiny):
    """The same two parts with nothing changed: every law without penalties is exact."""
    from proofs.decoders.late_drift import family

    m64, dec = tiny
    r = quick_positions(family(dec, 2)["twin"], m64, [1, 2])
    assert r.passed, (r.details.martingale_rejected, r.details.rejected, r.details.no_power)


def test_a_law_too_concentrated_for_the_target_has_no_power(tiny):
    """max_samples caps N: a drift the cap cannot reach is a failure, "no power", never a pass."""
    m64, dec = tiny
    plan = replace(plan_mod.QUICK.positions, drift=0.01, max_samples=10, cases=False)
    r = run(dec, m64, [1, 2], plan)
    assert r.failed and "no power" in r.power and "max_samples=10" in r.power


def test_predict_estimates_the_drift_n_from_the_varentropy():
    """--predict scales a probe by estimated_samples: the binned N without a drift (or a varentropy),
    more samples for a smaller drift or a flatter law's smaller varentropy, cut to the model's
    length and capped at max_samples; within 1.5x of what the run plans (tiny-ouro, T=1: the run
    planned 156 samples at varentropy about 0.7, docs/measurements.md)."""
    from proofs.checks.positions import estimated_samples, ladder_samples

    q = plan_mod.QUICK.positions
    assert estimated_samples(replace(q, drift=None), 32, 1.7) == ladder_samples(q, 32)
    assert estimated_samples(q, 32, None) == ladder_samples(q, 32)
    assert estimated_samples(q, 32, 1.7) < estimated_samples(q, 32, 0.4) < estimated_samples(q, 32, 0.1)
    assert estimated_samples(replace(q, drift=0.2), 32, 0.4) < estimated_samples(q, 32, 0.4)
    assert estimated_samples(q, 32, 1e-6) == q.max_samples
    assert 156 / 1.5 <= estimated_samples(q, 2, 0.7, max_seq_len=128) <= 156 * 1.5


def test_a_refused_law_is_skipped_here_and_judged_by_the_sampling_check(tiny):
    """An engine that refuses a case's parameters outright: the per-position check of that case has
    no samples to judge and says so (skipped); the sampling check fails a refused core parameter
    (tests/loopcert/test_scope.py), so the verdict is never PASS by refusal."""
    from proofs.decoders.protocol import Refused

    class NoTopP:
        def generate(self, prompt, max_new_tokens, sampling, seed):
            if sampling.top_p is not None:
                raise Refused("top_p is not supported")
            return tiny[1].generate(prompt, max_new_tokens, sampling, seed)

    m64, _ = tiny
    law = ("T=1.5 top-p=0.9", SamplingParams(temperature=1.5, top_p=0.9), None)
    r = quick_positions(NoTopP(), m64, [1, 2], law)
    assert r.passed and r.skipped.startswith("the decoder refused this law's parameters (top_p is not")
