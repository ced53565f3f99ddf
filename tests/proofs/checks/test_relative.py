"""The engine-relative check (proofs/checks/relative.py): a fake engine whose law refdec knows,
its plain mode lossless, its speculative mode lossless (another use of the seed stream) or lossy
(the first token's law moved by the target TV); and refdec's reference decoder against fastdec.

The engines here are also `--decoder` / `--relative-to` factories for the command-path tests
(tests/proofs/run/test_certify_relative.py)."""

from __future__ import annotations

import pytest
import torch

import fastdec
import refdec
from fastdec.config import DecodeConfig
from proofs.checks.distribution import Target
from proofs.checks.relative import check_relative, reference_seed
from proofs.prompts import model_prompts
from proofs.stats.exact_laws import Oracle
from proofs.stats.views import Case, case_law
from refdec.sampling import SamplingParams, sample_from

T1 = SamplingParams(temperature=1.0)


class FakeEngine:
    """An engine whose law refdec computes exactly: token by token from the float64 oracle's law
    under the SamplingParams it is handed (any convention), by inverse CDF.

    mode "plain": one uniform per token from torch.Generator(seed); "speculative": lossless, but
    it draws two uniforms per token and uses the second (another seed stream, as a speculative
    mode consumes its RNG otherwise); "lossy": plain, with `shift` of the first token's mass moved
    onto its most likely token, in proportion from all the others (from it to them when they hold
    less than `shift`): a TV of exactly `shift` in the first token's law and in any binning that
    keeps the most likely token alone."""

    sampler_order = None  # temperature-first

    def __init__(self, model, mode: str = "plain", shift: float = 0.0):
        self.oracle = Oracle(model)
        self.mode, self.shift = mode, shift

    def law(self, context, sampling: SamplingParams, first: bool) -> torch.Tensor:
        p = self.oracle.law(context, self.oracle.R, sampling).clone()
        if self.mode == "lossy" and first and not sampling.greedy:
            top = int(p.argmax())
            rest = 1.0 - float(p[top])  # the others' mass moves by `shift` in proportion
            scale = 1 - self.shift / rest if rest >= self.shift else 1 + self.shift / rest
            p = p * scale
            p[top] = 0.0
            p[top] = 1.0 - float(p.sum())
        return p

    def generate(self, prompt, max_new_tokens, sampling, seed):
        gen = torch.Generator().manual_seed(seed)
        ids = list(prompt)
        for i in range(max_new_tokens):
            u = torch.rand((2 if self.mode == "speculative" else 1,), generator=gen, dtype=torch.float64)
            ids.append(sample_from(self.law(ids, sampling, i == 0), float(u[-1])))
        return ids[len(prompt) :]


class FiltersFirstEngine(FakeEngine):
    """The same engine declaring mlx-lm's convention: certify hands it filters-first parameters
    and judges it against that law."""

    sampler_order = "filters-first"


class WrongConventionEngine(FakeEngine):
    """Declares filters-first but samples temperature-first: a negative control."""

    sampler_order = "filters-first"

    def law(self, context, sampling, first):
        return super().law(context, sampling.with_order("temperature-first"), first)


def plain_engine(model):
    return FakeEngine(model)


def speculative_engine(model):
    return FakeEngine(model, "speculative")


def lossy_engine(model):
    return FakeEngine(model, "lossy", LOSSY_SHIFT)


def plain_ff_engine(model):
    return FiltersFirstEngine(model)


def speculative_ff_engine(model):
    return FiltersFirstEngine(model, "speculative")


def wrong_convention_engine(model):
    return WrongConventionEngine(model)


LOSSY_SHIFT = 0.3  # the reduced plan's target TV (tests/plans.py SMALL_PLAN)


class Reference:
    def __init__(self, model):
        self.model = model

    def generate(self, prompt, max_new_tokens, sampling, seed):
        return refdec.generate(self.model, prompt, max_new_tokens, sampling, seed)


@pytest.fixture(scope="module")
def setup():
    model = refdec.load_model("tiny-ouro")
    oracle = Oracle(model)
    prompt = model_prompts(model, "tiny-ouro", 1)[0]
    return model, [case_law(oracle, Case("T=1", T1, prompt, 3))]


TARGET = Target(0.2)  # power 0.99, alpha 1e-3 (Holm across the views)


def relative_n(laws):
    from dataclasses import replace

    from proofs.run.cases import relative_plan
    from proofs.run.plan import QUICK

    return relative_plan(laws, replace(QUICK, tv=TARGET.tv))


def test_a_lossy_speculative_mode_is_rejected_against_its_lossless_plain_mode(setup):
    """The speculative mode moves TV 0.2 (the target) of the first token's law; the plan promises
    each view detects a binned TV >= 0.2 with probability >= 0.99 (non-central chi-square at the
    claimed law; tests/proofs/stats/test_two_sample.py measures 0.9935 at TV 0.05): with seed 0
    it is rejected, on the first token's view. Then the same engine's two lossless modes (plain,
    and a speculative one using its seed stream otherwise) pass: false-alarm rate <= alpha 1e-3
    (Holm, asymptotic; measured 0.002 over 2,000 replicates at the quick plan's N)."""
    model, laws = setup
    n = relative_n(laws)
    plain = FakeEngine(model)
    lossy = check_relative("rel", FakeEngine(model, "lossy", TARGET.tv), plain, laws, TARGET, 0, n)
    assert not lossy.passed
    assert lossy.details.rejected == ("T=1",)
    first = lossy.details.cases[0].views[0]
    assert first.view == "token 1" and first.holm_rejected and first.has_power
    assert first.empirical_tv > 0.1
    same = check_relative("rel", FakeEngine(model, "speculative"), plain, laws, TARGET, 0, n)
    assert same.passed, same.details.cases[0].views
    c = same.details.cases[0]
    assert c.has_power and all(v.detectable_tv <= TARGET.tv for v in c.views)
    assert c.samples == (n[0], n[0])
    assert c.seeds == ((0, n[0] - 1), (reference_seed(0, n[0]), reference_seed(0, n[0]) + n[0] - 1))


@pytest.mark.tier2
def test_refdec_and_fastdec_pipelined_pass_as_two_lossless_modes(setup):
    """Two real lossless decoders of the same model: refdec's reference decoder and fastdec's
    pipelined speculative decoder (false-alarm rate <= alpha 1e-3 as above; seed 0)."""
    model, laws = setup
    fast = fastdec.Decoder(model, DecodeConfig("pipelined", draft_depth=1))
    got = check_relative("rel", fast, Reference(model), laws, TARGET, 0, relative_n(laws))
    assert got.passed, got.details.cases[0].views
    assert got.details.candidate == "candidate" and got.details.samples == 2 * relative_n(laws)[0]


def test_a_decoder_failure_or_malformed_sample_fails_the_check(setup):
    model, laws = setup

    class Short(FakeEngine):
        def generate(self, *a):
            return super().generate(*a)[:2]

    got = check_relative("rel", Short(model), FakeEngine(model), laws, TARGET, 0, relative_n(laws))
    assert not got.passed and got.details.failed_samples == ("T=1",)
    assert got.details.cases[0].malformed[0] == relative_n(laws)[0]


def test_a_short_budget_fails_as_no_power(setup):
    model, laws = setup
    got = check_relative("rel", FakeEngine(model), FakeEngine(model, "speculative"), laws, TARGET, 0, (40,))
    assert not got.passed and got.details.no_power == ("T=1",) and not got.details.rejected
