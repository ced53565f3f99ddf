"""proofs/checks/distribution.py, proofs/stats/views.py and proofs/decoders/protocol.py: the sampling
check passes the lossless reference decoder, fails wrong ones with the fixed seeds, plans N by detectable TV,
fails as "no power" when it cannot reach it, and has power on real vocabulary sizes."""

from __future__ import annotations

import math
import os
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
import torch

import refdec
from proofs.checks.distribution import (
    Case,
    Target,
    alpha_per_test,
    case_law,
    check_distribution,
    planned_samples,
)
from proofs.decoders.exact_law import LawSampler, uniforms
from proofs.decoders.protocol import load_factory, run_generate, tokens_of
from proofs.decoders.specref import Bugs, SpecRef
from proofs.stats.exact_laws import Oracle
from proofs.stats.views import token_partition
from refdec.checkpoints import write_published
from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams

CASES = [
    Case("T=0.5", SamplingParams(temperature=0.5), (1, 2, 3)),
    Case("top-k=2", SamplingParams(temperature=1.0, top_k=2), (1, 2, 3)),
]
TARGET = Target(0.15)  # loose: a few hundred samples per case keep the default run fast


@pytest.fixture(scope="module")
def oracle():
    return Oracle(refdec.load_model("tiny-ouro"))


@pytest.fixture(scope="module")
def laws(oracle):
    return [case_law(oracle, c) for c in CASES]


def test_lossless_decoder_passes_with_the_planned_power(oracle, laws):
    r = check_distribution("sampling", SpecRef(oracle, d1=1, d2=2), laws, TARGET, 0)
    assert r.kind == "sampling" and r.passed, r.details
    assert r.bound == pytest.approx(1e-3 / sum(len(law.views) for law in laws)) and r.measured > r.bound
    assert "must detect a binned TV >= 0.15" in r.power
    for case in r.details.cases:
        assert case.samples == case.planned > 0 and case.has_power
        assert case.seeds == (0, case.planned - 1) and case.impossible == 0
        for v in case.views:
            assert v.bins >= 2 and v.detectable_tv <= TARGET.tv


def test_wrong_decoder_fails_with_the_fixed_seed(oracle, laws):
    """Negative control: the always-accept bug (u = 0) must be rejected."""
    bad = SpecRef(oracle, d1=1, bugs=Bugs(always_accept=True))
    r = check_distribution("sampling", bad, laws, TARGET, 0)
    assert not r.passed
    assert any(v.holm_rejected for c in r.details.cases for v in c.views)
    assert r.measured <= r.bound
    # the summary names the failure's cause: the rejected cases, never "no power" for them
    rejected = tuple(sorted({c.case for c in r.details.cases if any(v.holm_rejected for v in c.views)}))
    assert r.details.rejected == rejected and not set(rejected) & set(r.details.no_power)


def test_too_few_samples_fail_as_no_power_naming_the_n_needed(oracle, laws):
    """Negative control of the power rule: the lossless decoder with N = 30 cannot reach the target."""
    r = check_distribution("sampling", SpecRef(oracle, d1=1), laws, TARGET, 0, samples=[30, 30])
    assert not r.passed and r.details.no_power == ("T=0.5", "top-k=2")
    for case in r.details.cases:
        assert case.detectable_tv > TARGET.tv and case.needed_n > 30


def test_a_law_with_one_token_has_no_power(oracle):
    law = case_law(oracle, Case("top-k=1", SamplingParams(temperature=1.0, top_k=1), (1, 2, 3)))
    assert all(v.bins < 2 for v in law.views)
    r = check_distribution("sampling", SpecRef(oracle, d1=1), [law], TARGET, 0, samples=[50])
    assert not r.passed and r.details.no_power == ("top-k=1",)


def test_an_impossible_token_fails_outright(oracle, laws):
    class OutsideTopK:
        def generate(self, prompt, n, sampling, seed):
            law = oracle.law(prompt, oracle.R, sampling)
            return [int(np.flatnonzero(law.numpy() == 0)[0]) if sampling.top_k else 0] * n

    r = check_distribution("sampling", OutsideTopK(), laws[1:], TARGET, 0, samples=[50])
    assert not r.passed and r.details.cases[0].impossible == 50
    assert all(v.p_value == 0.0 for v in r.details.cases[0].views)


def test_a_crashing_or_malformed_decoder_fails(oracle, laws):
    class Crashes:
        def generate(self, *a):
            raise RuntimeError("boom")

    class TooShort:
        def generate(self, prompt, n, sampling, seed):
            return [0] * (n - 1)

    r = check_distribution("sampling", Crashes(), laws[:1], TARGET, 0, samples=[20])
    assert not r.passed and "boom" in r.details.cases[0].error
    r = check_distribution("sampling", TooShort(), laws[:1], TARGET, 0, samples=[20])
    case = r.details.cases[0]  # named malformed, never "probability 0"
    assert not r.passed and case.impossible == 0 and case.samples == 20
    assert "20 malformed sample(s) (seed 0: 2 tokens, the case asks for 3; seed 1: " in case.error


def test_generate_batch_is_used_and_gives_the_per_seed_samples(oracle, laws):
    """A decoder with generate_batch is sampled through it; sample i is seed base + i either way."""
    dec = LawSampler(lambda p, n, s: SpecRef(oracle, d1=1).sequence_law(p, n, s))

    class PerSeed:
        def generate(self, *a):
            return dec.generate(*a)

    a = check_distribution("s", dec, laws, TARGET, 5)
    b = check_distribution("s", PerSeed(), laws, TARGET, 5)
    assert a.details.cases[0].batched and not b.details.cases[0].batched
    assert [v.counts for c in a.details.cases for v in c.views] == [
        v.counts for c in b.details.cases for v in c.views
    ]
    u = uniforms(range(10_000))
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01


def test_token_partition_keeps_the_head_and_pools_the_tail_by_rank():
    law = np.array([0.5, 0.2, 0.0] + [0.3 / 300] * 300)
    bins, probs, labels = token_partition(law)
    assert labels[:2] == ("token 0", "token 1") and bins[2] == -1
    assert probs.sum() == pytest.approx(1.0) and len(probs) <= 2 + 3
    assert all(lb.startswith("ranks") for lb in labels[2:])


def test_views_describe_what_was_enumerated(laws):
    law = laws[0]
    text = law.describe()
    assert "token 1" in text and "most likely sequences" in text
    for v in law.views:
        assert v.bins >= 2 and "0 sequences" not in v.law


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """Synthetic checkpoints in a published layout (refdec.checkpoints.write_published) at three
    vocabulary sizes, loaded back as a user's folder would be."""
    out = {}
    for V in (61, 256, 65536):
        cfg = replace(refdec.get_preset("tiny-raven"), vocab_size=V, name=f"v{V}")
        folder = write_published(refdec.LoopedLM(cfg).init_weights(1), tmp_path_factory.mktemp(f"v{V}") / "m")
        out[V] = Oracle(refdec.load_model(folder, dtype=torch.float64))
    return out


@pytest.mark.parametrize("V", [61, 256, 65536])
def test_power_on_the_certified_models_own_vocabulary(published, V):
    """At V = 61, 256 and 65,536 the concentrated case reaches TV 0.05 at the planned N on the model's
    own law; a near-uniform spread law at 65,536 tokens still has >= 2 bins through the rank groups."""
    oracle = published[V]
    assert oracle.V == V
    target = Target(0.05)
    cases = [
        Case("T=0.7 top-k=4", SamplingParams(temperature=0.7, top_k=4), (1, 2, 3)),
        Case("T=1.5 top-p=0.9", SamplingParams(temperature=1.5, top_p=0.9), (1, 2, 3)),
    ]
    laws = [case_law(oracle, c) for c in cases]
    a = alpha_per_test(laws, target)
    for law in laws:
        assert law.views and all(v.bins >= 2 for v in law.views)
        n = planned_samples(law, target, a)
        assert 0 < n < 50_000
    dec = LawSampler(lambda p, n, s: SpecRef(oracle, d1=oracle.R).sequence_law(p, n, s)) if V <= 256 else None
    if dec is not None:  # sample the law itself through the planned check: it passes with power
        r = check_distribution("s", dec, laws[:1], target, 0)
        assert r.passed and r.details.detectable_tv <= 0.05


def test_top_k_default_is_caught_at_v_61():
    """A serving stack's bug: a silent top_k=50 (transformers' generate() default) at V=61 (spread
    law, T=1.5)."""
    from proofs.checks.mutation import wide_model

    oracle = Oracle(wide_model())
    law = case_law(oracle, Case("T=1.5", SamplingParams(temperature=1.5), (1, 2, 3), 2))
    bad = SpecRef(oracle, d1=1, bugs=Bugs(target_top_k_default=50))
    shift = max(v.binned_tv(bad.sequence_law((1, 2, 3), 2, law.case.sampling)) for v in law.views)
    assert shift > 0.02
    r = check_distribution("s", LawSampler(bad.sequence_law), [law], Target(0.05), 0)
    assert not r.passed and any(v.holm_rejected for v in r.details.cases[0].views)
    assert not math.isnan(r.measured)


# -- the decoder protocol -------------------------------------------------------------------------


class Result:
    def __init__(self, tokens):
        self.tokens = tokens


def test_tokens_of_accepts_lists_tensors_and_results():
    import torch

    assert tokens_of([1, 2]) == [1, 2]
    assert tokens_of(torch.tensor([3, 4])) == [3, 4]
    assert tokens_of(Result((5,))) == [5]
    for bad in ("ab", 3, [1.5], Result(None)):
        with pytest.raises(LoopcertError):
            tokens_of(bad)


def test_run_generate_passes_a_list_prompt():
    seen = {}

    class D:
        def generate(self, prompt, n, sampling, seed):
            seen["prompt"] = prompt
            return [0] * n

    assert run_generate(D(), (1, 2), 3, SamplingParams(), 0) == [0, 0, 0]
    assert seen["prompt"] == [1, 2]


@pytest.mark.parametrize(
    "spec,match",
    [
        ("nocolon", "module:factory"),
        ("a:b:c", "module:factory"),
        (":f", "module:factory"),
        ("no_such_module_xyz:f", "cannot import"),
        ("math:no_such_attr", "no attribute"),
        ("math:pi", "not callable"),
    ],
)
def test_load_factory_bad_specs(spec, match):
    with pytest.raises(LoopcertError, match=match):
        load_factory(spec)


def test_load_factory_good_spec():
    assert load_factory("math:sqrt")(4.0) == 2.0
    assert load_factory("os.path:join")("a", "b") == os.path.join("a", "b")
    assert load_factory("fractions:Fraction.from_float")(0.5) == Fraction(1, 2)


class _IidOracle:
    """Every position draws from one fixed law (no model): an exact joint law to bin."""

    R = 1

    def __init__(self, probs):
        self.p = torch.tensor(probs, dtype=torch.float64)
        self.V = len(probs)

    def law(self, prompt, depth, sampling):
        return self.p


@pytest.mark.parametrize("light", [0.003, 0.012])
def test_a_light_joint_remainder_joins_the_last_head_sequence(light):
    """The 2-token view: four sequences of p >= 0.01 and the rest. A remainder of mass < GROUP_MIN
    (light = 0.003: rest 0.006) joins the last head bin instead of asking N >= 5 / 0.006 for its
    own; a heavier one (light = 0.012: rest 0.024, the negative control) keeps its own bin."""
    from proofs.stats.views import GROUP_MIN

    law = case_law(_IidOracle([0.7, 0.3 - light, light, 0.0]), Case("c", SamplingParams(), (1,), 2))
    joint = next(v for v in law.views if v.seq_bins is not None)
    rest = 1.0 - sum(p * q for p in (0.7, 0.3 - light) for q in (0.7, 0.3 - light))
    assert joint.probs.sum() == pytest.approx(1.0)
    counts = joint.bin_counts(np.array([[2, 2], [0, 2], [0, 0]]))
    if rest < GROUP_MIN:
        assert joint.bins == 4 and joint.rest == 3 and joint.labels[-1].endswith("+ every other sequence")
        assert counts.tolist() == [1, 0, 0, 2]  # (2, 2) and (0, 2) count in the joined bin
        assert joint.probs.min() > GROUP_MIN
    else:
        assert joint.bins == 5 and joint.rest == 4 and joint.labels[-1] == "every other sequence"
        assert counts.tolist() == [1, 0, 0, 0, 2]
        assert joint.probs[-1] == pytest.approx(rest)


class _TemperatureOracle(_IidOracle):
    """One token below temperature 0.6 (no power), else the fixed law."""

    def law(self, prompt, depth, sampling):
        if sampling.temperature < 0.6:
            return torch.nn.functional.one_hot(torch.tensor(0), self.V).double()
        return self.p


def test_a_path_never_prefers_an_option_that_tests_only_the_first_token():
    """proofs.run.cases.choose_case on a spread law (20 tokens of 0.05: no 3-token sequence reaches
    p >= 0.01, no prefix reaches COND_MIN, so only token 1 has a view, which never sees a token
    drawn after a rejection) beside a one-token law (no power): no option is eligible, and the one
    with power on its first token is kept over the first option, which has none; with no power
    anywhere (every option one token), the first is kept and fails as no power."""
    from proofs.run.cases import choose_case
    from proofs.run.plan import FULL

    oracle = _TemperatureOracle([0.05] * 20)
    options = tuple((f"o{i}", SamplingParams(temperature=t), 3) for i, t in enumerate((0.5, 1.0, 1.5)))
    law = choose_case(oracle, (1,), options, FULL)
    assert law.case.name == "o1" and [v.position for v in law.views] == [0]
    assert law.chosen.startswith("no option has power past the first token: of those with power on it")
    assert "passed over o0: no view with 2 bins (no power); o2: tests only the first token (N " in law.chosen
    cold = tuple((f"c{i}", SamplingParams(temperature=t), 3) for i, t in enumerate((0.3, 0.5)))
    law = choose_case(oracle, (1,), cold, FULL)
    assert law.case.name == "c0" and not law.views and law.chosen.startswith("no option has power: the first")
