"""A plan's cap on N per sampling case (CertifyPlan.case_samples_cap; proofs.checks.distribution.capped):
a case whose target TV needs more samples than the cap is judged at the smallest TV it reaches
within the cap, stated in its views' rows and in the check's power; a lossless decoder passes it
with power, a decoder off by more than that TV fails it, and a run planned on one machine and
replayed from its record (shards) keeps the capped TV."""

from __future__ import annotations

from dataclasses import replace

import pytest

import refdec
from proofs.checks.distribution import (
    Case,
    Target,
    alpha_per_test,
    capped,
    case_law,
    check_distribution,
    planned_samples,
)
from proofs.decoders.exact_law import LawSampler
from proofs.decoders.specref import SpecRef
from proofs.run.cases import chosen_cases, planned_cases, setup_record
from proofs.run.plan import QUICK
from proofs.stats.exact_laws import Oracle
from refdec.sampling import SamplingParams
from reports.sampling_checks import sampling_section

TARGET = Target(0.05)
CASE = Case("T=1 top-k=8", SamplingParams(temperature=1.0, top_k=8), (1, 2, 3))
CAP = 1500


@pytest.fixture(scope="module")
def oracle():
    return Oracle(refdec.load_model("tiny-ouro"))


@pytest.fixture(scope="module")
def law(oracle):
    return case_law(oracle, CASE)


def sampler(oracle, hot: float = 1.0) -> LawSampler:
    ref = SpecRef(oracle, d1=1)
    return LawSampler(lambda p, n, s: ref.sequence_law(p, n, replace(s, temperature=s.temperature * hot)))


def test_a_case_over_the_cap_is_judged_at_the_smallest_tv_it_reaches_there(law):
    alpha = alpha_per_test([law], TARGET)
    need = planned_samples(law, TARGET, alpha)
    assert need > CAP  # the case needs more than the cap at TV 0.05
    held = capped(law, TARGET, alpha, CAP)
    tv = held.target_tv
    assert tv > TARGET.tv and float(f"{tv:.3g}") == tv  # three significant digits
    assert planned_samples(held, TARGET, alpha) <= CAP
    # the smallest such TV, to the search's 1% step
    assert planned_samples(replace(law, target_tv=tv / 1.02), TARGET, alpha) > CAP
    # a cap above the need, or none, leaves the case at the plan's target
    assert capped(law, TARGET, alpha, need).target_tv is None
    assert capped(law, TARGET, alpha, None).target_tv is None


def test_a_lossless_decoder_passes_a_capped_case_with_power_and_a_hot_one_fails(oracle, law):
    held = capped(law, TARGET, alpha_per_test([law], TARGET), CAP)
    r = check_distribution("sampling", sampler(oracle), [held], TARGET, 0)
    c = r.details.cases[0]
    assert r.passed and c.has_power and c.samples <= CAP, r.power
    assert {v.target_tv for v in c.views} == {held.target_tv}  # each view's row states its TV
    assert f"at their own TV ({CASE.name}: {held.target_tv:g})" in r.power
    assert "within the cap, not at the plan's" in sampling_section([r])  # certificate.md says it too
    assert f"{CASE.name}: TV {held.target_tv:g}" in sampling_section([r])
    # the negative control: 1.5x the temperature moves the first token's law by more than the
    # capped TV on tiny-ouro, and the capped N rejects it
    hot = check_distribution("sampling", sampler(oracle, 1.5), [held], TARGET, 0)
    assert not hot.passed and hot.details.rejected == (CASE.name,)


def test_the_quick_plan_caps_its_cases_and_the_record_replays_the_cap(oracle):
    laws, ns = chosen_cases(oracle, "tiny-ouro", QUICK)
    assert max(ns) <= QUICK.case_samples_cap
    assert all(law.target_tv is not None and law.target_tv > QUICK.tv for law in laws)  # tiny-ouro needs more
    again, ns2 = planned_cases(oracle, "tiny-ouro", setup_record(laws, ns))
    assert ns2 == ns and [x.target_tv for x in again] == [x.target_tv for x in laws]
    uncapped, full = chosen_cases(oracle, "tiny-ouro", replace(QUICK, case_samples_cap=None))
    assert all(law.target_tv is None for law in uncapped) and max(full) > QUICK.case_samples_cap
