"""The sampling check names malformed samples as such: a sample of the wrong length,
an id outside the vocabulary or a negative one is not "of probability 0 under the reference law"
(that is for well-formed samples the law rules out), and a non-integer id is the decoder breaking
the protocol. Either way the case is certain to fail, so the draw stops at the call that returned
one instead of spending the whole budget (certify's sampling units: stop_early)."""

from __future__ import annotations

import functools

import pytest
import torch

import refdec
from proofs.checks.distribution import Target, evaluate, malformed_samples, sample_tally
from proofs.stats.exact_laws import Oracle
from proofs.stats.views import Case, case_law, malformed
from refdec.sampling import SamplingParams, sample, transform

N_PLANNED = 200
TARGET = Target(tv=0.3)


@functools.cache
def law(top_k=None):
    model = refdec.load_model("tiny-raven", dtype=torch.float64)
    sampling = SamplingParams(temperature=1.0, top_k=top_k)
    return case_law(Oracle(model), Case("T=1" if top_k is None else "top-k=2", sampling, (1, 2, 3)))


class Emits:
    """A decoder that returns `tokens(seed)` for every seed, one call per seed."""

    def __init__(self, tokens):
        self.tokens = tokens
        self.calls = 0

    def generate(self, prompt, max_new_tokens, sampling, seed):
        self.calls += 1
        return self.tokens(seed)


class Reference:
    def __init__(self):
        self.model = refdec.load_model("tiny-raven")

    def generate(self, prompt, n, sampling, seed):
        ids, gen = list(prompt), torch.Generator().manual_seed(seed)
        for _ in range(n):
            ids.append(
                sample(
                    transform(self.model.depth_logits(ids, [self.model.cfg.recurrence])[0, -1], sampling), gen
                )
            )
        return ids[len(prompt) :]


V = 13  # tiny-raven's vocabulary


@pytest.mark.parametrize(
    "tokens, said",
    [
        (lambda s: [1, 2], "2 tokens, the case asks for 3"),
        (lambda s: [1, 2, 3, 4], "4 tokens, the case asks for 3"),
        (lambda s: [1, V, 2], f"id {V} outside the vocabulary (V={V})"),
        (lambda s: [1, -1, 2], "a negative id -1"),
    ],
    ids=["short", "long", "out of vocabulary", "negative"],
)
def test_a_malformed_sample_is_named_and_the_draw_stops(tokens, said):
    assert law().V == V
    dec = Emits(tokens)
    t = sample_tally(dec, law(), N_PLANNED, 7, stop_early=True)
    assert dec.calls == 1 and t["samples"] == 1  # certain to fail: not 200 draws
    assert t["impossible"] == 0  # not "probability 0 under the reference law"
    assert t["error"] == f"1 malformed sample(s) (seed 7: {said})"
    r = evaluate("sampling", [law()], [t], TARGET)
    assert not r.passed and r.details.failed_samples == ("T=1",)
    assert r.details.cases[0].error == t["error"]


def test_a_non_integer_id_is_named_as_the_decoders_error():
    dec = Emits(lambda s: [1, 2.5, 3])
    t = sample_tally(dec, law(), N_PLANNED, 0, stop_early=True)
    assert dec.calls == 1 and t["impossible"] == 0
    assert "non-integer token 2.5" in t["error"]
    assert malformed([1, 2.5, 3], 3, V) == "a non-integer id 2.5"  # the same sample, handed over as data


def test_an_impossible_sample_is_named_as_such_and_the_draw_stops():
    """Top-k=2 rules out every other token: a well-formed sample outside it has probability 0."""
    lw = law(top_k=2)
    first = lw.nodes[()]
    ruled_out = int(first.argmin())
    assert first[ruled_out] == 0
    dec = Emits(lambda s: [ruled_out, 0, 0])
    t = sample_tally(dec, lw, N_PLANNED, 0, stop_early=True)
    assert dec.calls == 1 and t["impossible"] == 1 and t["error"] is None
    dec = Emits(lambda s: [ruled_out, 0, 0])  # without stop_early (the mutation check): all N drawn
    t = sample_tally(dec, lw, N_PLANNED, 0)
    assert dec.calls == N_PLANNED and t["impossible"] == N_PLANNED


def test_a_lossless_decoder_draws_its_whole_plan():
    """The control: nothing stops a decoder whose samples are all well formed and possible."""
    dec = Reference()
    t = sample_tally(dec, law(top_k=2), 40, 0, stop_early=True)
    assert t["samples"] == 40 and t["impossible"] == 0 and t["error"] is None


def test_malformed_samples_names_at_most_three():
    samples = [[1, 2]] * 5 + [[1, 2, 3]]
    got = malformed_samples(samples, law(), 10)
    assert got.startswith("5 malformed sample(s) (seed 10: 2 tokens") and got.endswith("; ...)")
    assert malformed_samples([[1, 2, 3]], law(), 0) is None
