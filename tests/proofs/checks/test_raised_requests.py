"""Evidence survives exceptions: proofs/decoders/draw.py skips the seeds whose
requests raise and keeps the others (sample seeds stay base + i, the failed ones left out); the
sampling and per-position checks fail on the exceptions and still say what the completed samples
show, rejected only past the bias bound (the failed fraction, in TV) or on impossible tokens."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import refdec
from proofs.checks.distribution import Case, Target, case_law, check_distribution
from proofs.checks.positions import PositionsPlan, check_positions
from proofs.decoders.draw import FAILURE_GRACE, draw
from proofs.decoders.exact_law import LawSampler
from proofs.decoders.specref import SpecRef
from proofs.stats.exact_laws import Oracle
from proofs.stats.pit import default_boundaries
from refdec.sampling import SamplingParams
from reports.console import failure_line
from reports.render import status

MESSAGE = "content_length <= prompt_ids.size() + m_generated_ids.size()"  # OpenVINO GenAI's
T05 = Case("T=0.5", SamplingParams(temperature=0.5), (1, 2, 3))
TARGET = Target(0.15)


@pytest.fixture(scope="module")
def oracle():
    return Oracle(refdec.load_model("tiny-ouro"))


class RaisesEvery5th:
    """Samples refdec's law at `hot` x the temperature (1: lossless), but every request whose seed
    is a multiple of 5 raises, alone or in a batch (as OpenVINO GenAI does on some requests)."""

    def __init__(self, oracle, hot: float = 1.0, batched: bool = True):
        ref = SpecRef(oracle, d1=1)
        self.law = LawSampler(
            lambda p, n, s: ref.sequence_law(p, n, replace(s, temperature=s.temperature * hot))
        )
        if batched:
            self.generate_batch = self._batch

    def _batch(self, prompts, n, sampling, seeds):
        if any(s % 5 == 0 for s in seeds):
            raise RuntimeError(MESSAGE)
        return self.law.generate_batch(prompts, n, sampling, seeds)

    def generate(self, prompt, n, sampling, seed):
        if seed % 5 == 0:
            raise RuntimeError(MESSAGE)
        return self.law.generate(prompt, n, sampling, seed)


@pytest.mark.parametrize("batched", [True, False], ids=["generate_batch", "generate"])
def test_the_draw_skips_the_seeds_that_raise_and_keeps_deterministic_seeds(oracle, batched):
    dec = RaisesEvery5th(oracle, batched=batched)
    d = draw(dec, T05.prompt, T05.n, T05.sampling, 3, 40)
    kept = [s for s in range(3, 43) if s % 5]
    assert d.error is None and d.seeds == kept and d.requests == 40
    assert (d.failed, d.first_failed_seed) == (8, 5) and MESSAGE in d.first_failure
    assert d.samples == [dec.law.generate(list(T05.prompt), T05.n, T05.sampling, s) for s in kept]


def test_a_decoder_that_always_raises_is_an_error_at_the_cap(oracle):
    class Raises:
        def generate(self, *a):
            raise RuntimeError(MESSAGE)

    d = draw(Raises(), T05.prompt, T05.n, T05.sampling, 0, 100)
    assert d.samples == [] and d.failed == FAILURE_GRACE
    assert d.error.startswith(
        f"{FAILURE_GRACE} of {FAILURE_GRACE} requests raised (first seed 0: RuntimeError"
    )


def test_a_batch_decoder_that_always_raises_is_asked_each_seed_alone_only_up_to_the_cap(oracle):
    """A server that died mid-run raises on every request: the draw retries the first chunk's seeds
    one by one only until the cap is passed, not once per seed of the chunk (2026-12-07: 64 seeds
    alone, each after the HTTP client's retries, cost minutes per check in tox -e vllm)."""

    class Dead:
        calls = 0

        def generate_batch(self, prompts, n, sampling, seeds):
            Dead.calls += 1
            raise ConnectionError("cannot reach the server")

        def generate(self, prompt, n, sampling, seed):
            return self.generate_batch([prompt], n, sampling, [seed])[0]

    d = draw(Dead(), T05.prompt, T05.n, T05.sampling, 0, 1000)
    assert d.samples == [] and d.failed == FAILURE_GRACE and Dead.calls == 1 + FAILURE_GRACE
    assert d.requests == FAILURE_GRACE
    assert d.error.startswith(f"{FAILURE_GRACE} of {FAILURE_GRACE} requests raised")


def test_a_lossless_decoder_that_raises_fails_on_the_exceptions_its_samples_not_rejected(oracle):
    r = check_distribution("sampling", RaisesEvery5th(oracle), [case_law(oracle, T05)], TARGET, 0)
    d = r.details
    c = d.cases[0]
    assert not r.passed and d.raised == ("T=0.5",)
    assert d.rejected == () and d.no_power == () and d.failed_samples == ()
    assert c.error is None and c.detectable_tv < 0.2  # the power statement of the completed samples
    assert c.raised.law == "not rejected" and c.raised.first_seed == 0 and MESSAGE in c.raised.first_message
    assert c.raised.failed == len(range(0, c.planned, 5)) and c.samples == c.planned - c.raised.failed
    assert c.raised.bias_bound == pytest.approx(c.raised.failed / c.planned)
    first = next(v for v in c.views if v.view == "token 1")
    assert first.bias_bound == pytest.approx(c.raised.bias_bound)  # unconditional: the failed fraction
    line = failure_line(r)  # the console: both the exceptions and the law of the completed samples
    assert (
        f"{c.raised.failed} of {c.planned} requests raised (first seed 0: RuntimeError: content_length"
        in line
    )
    assert f"the {c.samples} completed samples: not rejected (they detect a binned TV >= " in line
    assert "bias bound TV <= 0.2" in status(r)[1]


@pytest.mark.parametrize(
    "case, hot, law",
    [
        (T05, 3.0, "rejected"),  # binned TV 0.39 > the bias bound 0.2
        # 1.5 x hotter under top-p: the hotter nucleus holds tokens the law's does not (impossible)
        (Case("T=1 top-p=0.7", SamplingParams(temperature=1.0, top_p=0.7), (1, 2, 3)), 1.5, "rejected"),
        # 1.5 x hotter at T=0.5 moves tiny-ouro's 13-token laws by a binned TV of 0.15 at most:
        # within what dropping a fifth of the requests could explain, so not judged beyond it
        (T05, 1.5, "within the bias bound"),
    ],
    ids=["3x hot", "1.5x hot top-p", "1.5x hot within the bound"],
)
def test_a_hot_decoder_that_raises_is_judged_on_its_completed_samples(oracle, case, hot, law):
    r = check_distribution("sampling", RaisesEvery5th(oracle, hot), [case_law(oracle, case)], TARGET, 0)
    c = r.details.cases[0]
    assert not r.passed and r.details.raised == (case.name,) and c.raised.law == law
    assert (r.details.rejected == (case.name,)) == (law == "rejected" and not c.impossible)
    assert any(v.holm_rejected for v in c.views)  # Holm rejects in all three: the bound decides


def test_the_per_position_check_fails_on_the_exceptions_and_judges_the_completed_samples():
    m64 = refdec.load_model("tiny-ouro", dtype=torch.float64)

    class Every5th:
        def generate(self, prompt, n, sampling, seed):
            if seed % 5 == 0:
                raise RuntimeError(MESSAGE)
            return refdec.generate(m64, prompt, n, sampling, seed)

    plan = PositionsPlan(SamplingParams(temperature=1.0), tokens=40, tv=0.3, min_band=16, rows=8)
    prompt = [1, 2, 3]
    horizon = len(prompt) + plan.tokens
    r = check_positions("positions", Every5th(), m64, prompt, plan, default_boundaries(m64.cfg, horizon), 1)
    d = r.details
    assert not r.passed and d.decoder_error is None and d.raised is not None
    assert d.raised.law == "not rejected" and d.raised.first_seed == 5
    assert d.samples + d.raised.failed == d.raised.requests == d.seeds[1] - d.seeds[0] + 1
    assert "requests raised (first seed 5: RuntimeError" in failure_line(r)
