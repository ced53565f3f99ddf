"""The certified model is the sampled model, at its own vocabulary: fastdec, every
strategy, is certified with power on synthetic checkpoints written in a published layout
(refdec.checkpoints.write_published, loaded back from the folder as a user's checkpoint is) at
V = 61, 256 and 65,536, through certify's own sampling checks (proofs/run/sampling_units.py), each
beside its negative control: fastdec (autoregressive) with the temperature off by a quarter must
be rejected on the same plan, at the same vocabulary.

Cases: the default run takes one concentrated case per vocabulary (the one whose views need the
fewest samples there, so that the default run stays short); the slow test adds the quick plan's
own cases (T=0.7 top-k=4 and T=1.5 top-p=0.9), whose N grows with the vocabulary. The N and wall
time of each are in docs/measurements.md.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import refdec
from fastdec.config import DecodeConfig
from proofs.decoders.candidates import Candidate, fastdec_candidate
from proofs.run.cases import choose_case, option_samples
from proofs.run.plan import FULL, FULL_CASE_CAP, QUICK, QUICK_CASES, case_options
from proofs.run.run import CertifyRun
from proofs.run.sampling_units import sampling_checks, sampling_result, sampling_unit_result
from proofs.stats.views import Case, case_law
from refdec.checkpoints import write_published
from refdec.sampling import SamplingParams

VOCABS = (61, 256, 65536)
# The concentrated case with the smallest N at each V (tests' synthetic weights, seed 1): at T=0.1
# V=61 and 256 put one bin at a tiny probability (millions of samples), and at V=65,536 T=0.3 needs
# more than T=0.1.
CONCENTRATED = {
    61: ("T=0.3", SamplingParams(temperature=0.3), 3),
    256: ("T=0.3", SamplingParams(temperature=0.3), 3),
    65536: ("T=0.1", SamplingParams(temperature=0.1), 3),
}
TV = QUICK.tv  # 0.05: the quick plan's target


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """V -> folder holding a tiny-raven-shaped checkpoint in Huginn's published layout."""
    out = {}
    for V in VOCABS:
        cfg = replace(refdec.get_preset("tiny-raven"), vocab_size=V, name=f"v{V}")
        folder = tmp_path_factory.mktemp(f"v{V}") / "m"
        out[V] = str(write_published(refdec.LoopedLM(cfg).init_weights(1), folder))
    return out


class TemperatureOff:
    """A wrong decoder: fastdec (autoregressive, the cheapest) run at 1.25 x the temperature asked."""

    def __init__(self, model):
        self.inner = fastdec_candidate(DecodeConfig("autoregressive")).build(model)
        self.max_batch = self.inner.max_batch

    def _off(self, s: SamplingParams) -> SamplingParams:
        return replace(s, temperature=s.temperature * 1.25)

    def generate(self, prompt, n, sampling, seed):
        return self.inner.generate(prompt, n, self._off(sampling), seed)

    def generate_batch(self, prompts, n, sampling, seeds):
        return self.inner.generate_batch(prompts, n, self._off(sampling), seeds)


def run_sampling(folder: str, cases, user: Candidate | None = None, seed: int = 0) -> list:
    """certify's sampling checks on `folder` (one per setting) under the quick plan's target."""
    # power by N, not by clock; the cases given only (the case at a boundary: test_boundary_cases.py)
    plan = replace(QUICK, sampling_cases=tuple(cases), sampling_budget_s=1e6, boundary_cases=0)
    run = CertifyRun(plan, folder, user, "cpu", torch.float32, seed, lambda _m: None)
    return run, [
        sampling_result(run, chk, [sampling_unit_result(run, chk, u) for u in chk.units])
        for chk in sampling_checks(run)
    ]


def assert_certified_with_power(run, results, V: int):
    assert run.oracle.V == V and len(results) == len(run.candidates)
    assert {c.label.split()[0] for c in run.candidates} == {"autoregressive", "draft-verify", "pipelined"}
    for r in results:
        d = r.details
        assert r.passed, (r.name, d.no_power, [c.views for c in d.cases])
        assert d.model == run.model_name and f"V={V}" in d.why_this_model
        assert d.detectable_tv <= TV
        for case in d.cases:
            assert case.samples == case.planned > 0 and case.has_power and case.impossible == 0
            assert case.views and all(v.bins >= 2 for v in case.views)


def assert_rejected(run, results):
    """The negative control fails by Holm rejection, not only for want of power (a conditional view
    may also lose power: the wrong law puts fewer samples on its prefix)."""
    (r,) = results
    assert not r.passed
    assert any(v.holm_rejected for c in r.details.cases for v in c.views), r.details.cases


WRONG = Candidate("temperature x 1.25", TemperatureOff, {"decoder": "test"})


@pytest.mark.tier2
@pytest.mark.parametrize("V", VOCABS)
def test_fastdec_is_certified_with_power_at_its_own_vocabulary(checkpoints, V):
    run, results = run_sampling(checkpoints[V], [CONCENTRATED[V]])
    assert_certified_with_power(run, results, V)


@pytest.mark.parametrize("V", VOCABS)
def test_negative_control_a_wrong_temperature_is_rejected_at_the_same_vocabulary(checkpoints, V):
    run, results = run_sampling(checkpoints[V], [CONCENTRATED[V]], user=WRONG)
    assert_rejected(run, results)


@pytest.mark.slow
@pytest.mark.parametrize("V", VOCABS)
def test_quick_plan_cases_certified_with_power_at_its_own_vocabulary(checkpoints, V):
    """The quick plan's own cases (a small top-k beside a spread top-p) plus the concentrated one."""
    cases = [*QUICK_CASES, CONCENTRATED[V]]
    run, results = run_sampling(checkpoints[V], cases)
    assert_certified_with_power(run, results, V)
    run, results = run_sampling(checkpoints[V], cases, user=WRONG)
    assert_rejected(run, results)


def _first_options_n(run, folder: str) -> list[int]:
    """N of each full-plan path's first option on `folder`'s law (the fixed plan before choose_case)."""
    prompt, o = run.sampling_setup(folder).laws[0].case.prompt, run.oracle
    firsts = [case_options(entry)[0] for entry in FULL.sampling_cases]
    return [option_samples(case_law(o, Case(name, sp, prompt, k)), FULL) for name, sp, k in firsts]


@pytest.mark.parametrize("V", [61, 65536])
def test_full_plan_picks_each_paths_case_from_the_certified_models_law(checkpoints, V):
    """The full plan's paths list options and the certified model's own law picks one
    (proofs.run.cases.choose_case): every chosen case has power past the first token within
    FULL_CASE_CAP samples and says what it passed over. Negative control: the first options, the
    cases chosen on the default model, fail there (V = 61: T=0.3 top-p=0.95 leaves one token, no
    power; V = 65,536: each needs more than twice the cap)."""
    folder = checkpoints[V]
    run = CertifyRun(FULL, folder, None, "cpu", torch.float32, 0, lambda _m: None)
    s = run.sampling_setup(folder)
    for law, n in zip(s.laws, s.samples, strict=True):
        assert 0 < n <= FULL_CASE_CAP and any(v.position != 0 for v in law.views), law.chosen
        assert law.chosen.startswith("the first of 5 options with power past the first token")
    first = _first_options_n(run, folder)
    names = [law.case.name for law in s.laws]
    if V == 61:
        assert first[2] == 0 and names[2] == "T=0.4 top-p=0.95"
        assert "passed over T=0.3 top-p=0.95: no view with 2 bins" in s.laws[2].chosen
    else:
        assert min(first) > 2 * FULL_CASE_CAP and names == ["T=0.1", "T=0.1 top-k=3", "T=0.1 top-p=0.99"]


def test_choose_case_falls_back_to_the_fewest_samples_then_to_the_first():
    """No option within the cap (tiny-ouro, V = 13, flat laws: every option needs > 45k): the one
    with power past the first token that needs the fewest; no option with power (top-k = 1 leaves
    one token): the first, which the sampling check then fails as no power (tests/
    test_proofs_distribution.py: an option with power on its first token alone comes before it)."""
    run = CertifyRun(FULL, "tiny-ouro", None, "cpu", torch.float32, 0, lambda _m: None)
    prompt = run.sampling_setup("tiny-ouro").laws[0].case.prompt
    entry = FULL.sampling_cases[0]
    law = choose_case(run.oracle, prompt, entry, FULL)
    ns = {
        name: option_samples(case_law(run.oracle, Case(name, sp, prompt, k)), FULL)
        for name, sp, k in case_options(entry)
    }
    assert min(ns.values()) > FULL_CASE_CAP and ns[law.case.name] == min(ns.values())
    assert "no option has N <= 45,000" in law.chosen
    one = tuple((f"T={t} top-k=1", SamplingParams(temperature=t, top_k=1), 3) for t in (0.5, 1.0))
    law = choose_case(run.oracle, prompt, one, FULL)
    assert law.case.name == "T=0.5 top-k=1" and not law.views
    assert law.chosen.startswith("no option has power: the first")
