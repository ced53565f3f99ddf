"""proofs/distribution.py and proofs/protocol.py: the sampling check passes the lossless
reference decoder, fails wrong ones with the fixed seeds, and states its power."""

from __future__ import annotations

import os
from fractions import Fraction

import numpy as np
import pytest

import refdec
from proofs.distribution import Case, binned_tv, binning, case_laws, check_distribution
from proofs.oracle import Oracle
from proofs.protocol import load_factory, run_generate, tokens_of
from proofs.specref import Bugs, SpecRef
from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams

CASES = [Case("T=0.5", SamplingParams(temperature=0.5), (1, 2, 3)),
         Case("top-k=2", SamplingParams(temperature=1.0, top_k=2), (1, 2, 3))]
N = 400
ALPHA = 1e-3


@pytest.fixture(scope="module")
def oracle():
    return Oracle(refdec.load_model("tiny-ouro"))


@pytest.fixture(scope="module")
def laws(oracle):
    return case_laws(oracle, CASES, N)


def test_lossless_decoder_passes_with_power_stated(oracle, laws):
    r = check_distribution("sampling", SpecRef(oracle, d1=1, d2=2), CASES, laws, N, 0, ALPHA)
    assert r.passed, r.details
    assert r.bound == ALPHA / 2 and r.measured > r.bound
    assert "detects a binned TV deviation >=" in r.power and f"N={N}" in r.power
    for row in r.details["cases"]:
        assert 0 < row["detectable_tv"] < 0.5 and row["bins"] >= 2
        assert row["seeds"] == [0, N - 1] and row["impossible"] == 0


def test_wrong_decoder_fails_with_the_fixed_seed(oracle, laws):
    """Negative control: the always-accept bug (u = 0) must be rejected."""
    bad = SpecRef(oracle, d1=1, bugs=Bugs(always_accept=True))
    r = check_distribution("sampling", bad, CASES, laws, N, 0, ALPHA)
    assert not r.passed
    assert any(row["holm_rejected"] for row in r.details["cases"])
    assert r.measured <= r.bound


def test_an_impossible_token_fails_outright(oracle, laws):
    class OutsideTopK:
        def generate(self, prompt, n, sampling, seed):
            law = oracle.law(prompt, oracle.R, sampling)
            return [int(np.flatnonzero(law.numpy() == 0)[0]) if sampling.top_k else 0] * n

    r = check_distribution("sampling", OutsideTopK(), CASES[1:], laws[1:], 50, 0, ALPHA)
    assert not r.passed and r.details["cases"][0]["impossible"] == 50
    assert r.details["cases"][0]["p_value"] == 0.0


def test_a_crashing_or_malformed_decoder_fails(oracle, laws):
    class Crashes:
        def generate(self, *a):
            raise RuntimeError("boom")

    class TooShort:
        def generate(self, prompt, n, sampling, seed):
            return [0] * (n - 1)

    r = check_distribution("sampling", Crashes(), CASES[:1], laws[:1], 20, 0, ALPHA)
    assert not r.passed and "boom" in r.details["cases"][0]["error"]
    r = check_distribution("sampling", TooShort(), CASES[:1], laws[:1], 20, 0, ALPHA)
    assert not r.passed and r.details["cases"][0]["impossible"] == 20


def test_binned_tv_of_the_law_itself_is_zero_and_of_a_point_mass_is_large(laws):
    law = laws[0]
    probs = law.cell_probs()
    assert binned_tv(law, probs, N) == 0.0
    point = np.zeros_like(probs)
    point[-1] = 1.0  # all mass on the impossible cell
    assert binned_tv(law, point, N) == pytest.approx(1.0)
    bins = binning(law, N)
    assert sorted(i for b in bins for i in b) == sorted(np.flatnonzero(probs > 0).tolist())


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


@pytest.mark.parametrize("spec,match", [
    ("nocolon", "module:factory"), ("a:b:c", "module:factory"), (":f", "module:factory"),
    ("no_such_module_xyz:f", "cannot import"), ("math:no_such_attr", "no attribute"),
    ("math:pi", "not callable"),
])
def test_load_factory_bad_specs(spec, match):
    with pytest.raises(LoopcertError, match=match):
        load_factory(spec)


def test_load_factory_good_spec():
    assert load_factory("math:sqrt")(4.0) == 2.0
    assert load_factory("os.path:join")("a", "b") == os.path.join("a", "b")
    assert load_factory("fractions:Fraction.from_float")(0.5) == Fraction(1, 2)
