"""proofs/decoders/specref.py and proofs/stats/exact_laws.py: the reference speculative decoder,
its bug switches, its exact laws, and the exact law of refdec's first n tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tolerances import approx, assert_close

import refdec
from fastdec.accept import loopspec_law, loopspec_step
from proofs.decoders.specref import Bugs, SpecRef
from proofs.stats.exact_laws import IMPOSSIBLE, REMAINDER, Oracle, exact_law
from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams

T1 = SamplingParams(temperature=1.0)
TOPK = SamplingParams(temperature=1.0, top_k=2)
PROMPT = (1, 2, 3)


@pytest.fixture(scope="module")
def oracle():
    return Oracle(refdec.load_model("tiny-ouro"))


@pytest.fixture(scope="module")
def law_t1(oracle):
    return exact_law(oracle, PROMPT, 3, T1)


# -- the oracle and the exact law ------------------------------------------------------------------


def test_oracle_matches_refdec_depth_logits(oracle):
    ids = [4, 7, 11]
    want = oracle.model.depth_logits(ids, [1, oracle.R])[:, -1]
    got = oracle.logits(ids)
    assert torch.equal(got[0], want[0]) and torch.equal(got[-1], want[1])
    assert oracle.logits(ids) is got  # remembered


def test_exact_law_is_the_product_of_refdec_laws(oracle, law_t1):
    assert law_t1.full and law_t1.remainder == 0.0
    assert law_t1.probs.sum() == approx(1.0)
    seq = law_t1.cells[17]
    p = 1.0
    for i in range(3):
        p *= float(oracle.law(PROMPT + seq[:i], oracle.R, T1)[seq[i]])
    assert law_t1.probs[17] == approx(p)


def test_classify_names_impossible_and_malformed_samples(oracle):
    law = exact_law(oracle, PROMPT, 3, TOPK)
    first = int(np.argmax(law.nodes[()]))
    banned = int(np.flatnonzero(law.nodes[()] == 0)[0])  # outside the top-2
    assert law.classify(law.cells[0]) == 0
    assert law.classify((banned, first, first)) == IMPOSSIBLE
    assert law.classify((first, first)) == IMPOSSIBLE  # wrong length
    assert law.classify((first, first, 99)) == IMPOSSIBLE  # out of the vocabulary
    counts = law.counts([law.cells[0], (banned, 0, 0)])
    assert counts[0] == 1 and counts[-1] == 1 and counts.sum() == 2


def test_head_of_law_pools_a_remainder(oracle, law_t1, monkeypatch):
    monkeypatch.setattr("proofs.stats.exact_laws.MAX_FULL_CONTEXTS", 1)
    law = exact_law(oracle, PROMPT, 3, T1, n_samples=5000)
    assert not law.full and law.min_prob == pytest.approx(5 / 5000)
    assert np.all(law.probs >= law.min_prob)
    assert law.remainder == pytest.approx(1 - law.probs.sum())
    assert 0 < law.remainder < 1
    tail = next(c for c in law_t1.cells if c not in law.index)
    assert law.classify(tail) == REMAINDER
    assert law.classify(law.cells[0]) == 0
    with pytest.raises(LoopcertError, match="n_samples"):
        exact_law(oracle, PROMPT, 3, T1)


# -- the lossless decoder is LoopSpec -------------------------------------------------------------


@pytest.mark.parametrize("gate", ["on", "off", "inverted"])
def test_lossless_step_is_fastdec_loopspec_step_token_for_token(oracle, gate):
    dec = SpecRef(oracle, d1=1, d2=2, gate=gate)
    laws = [oracle.law(PROMPT, d, TOPK) for d in (oracle.R, 1, 2)]
    for seed in range(100):
        a = dec.step(PROMPT, TOPK, torch.Generator().manual_seed(seed))[0]
        b = loopspec_step(*laws, torch.Generator().manual_seed(seed), gate)[0]
        assert a == b, seed


@pytest.mark.parametrize("gate", ["on", "off", "inverted"])
def test_lossless_step_law_is_loopspec_law_and_the_target(oracle, gate):
    dec = SpecRef(oracle, d1=1, d2=3, gate=gate)
    joint = dec.step_law(PROMPT, T1)
    laws = [oracle.law(PROMPT, d, T1) for d in (oracle.R, 1, 3)]
    emitted = loopspec_law(*laws, gate).emitted
    assert_close(joint.diagonal(), emitted)
    assert_close(joint.diagonal(), laws[0])
    off = joint.clone().fill_diagonal_(0.0)
    assert not off.any()  # the context is what was emitted: no mass off the diagonal, exactly


def test_greedy_lossless_is_refdec(oracle):
    for d1, d2 in [(1, None), (1, 2), (2, 3)]:
        dec = SpecRef(oracle, d1=d1, d2=d2)
        for p in [PROMPT, (0, 5), (9, 9, 1)]:
            assert dec.generate(p, 10, SamplingParams(), 0) == refdec.generate(oracle.model, list(p), 10)


# -- bugs: the exact law matches the sampler, and moves away from the target -------------------

BUGGY = [
    (dict(d1=1), Bugs(always_accept=True), TOPK),
    (dict(d1=3), Bugs(resample_target=True), T1),
    (dict(d1=1), Bugs(target_missing="top_k"), TOPK),
    (dict(d1=1), Bugs(target_missing="temperature"), SamplingParams(temperature=0.5)),
    (dict(d1=2), Bugs(score_depth=3), TOPK),
    (dict(d1=1, d2=2), Bugs(second_scored_as_p_d2=True), T1),
    (dict(d1=2, d2=3, gate="off"), Bugs(unnormalised_residual=True), T1),
    (dict(d1=1), Bugs(stale_kv=True), TOPK),
]


BUG_IDS = [
    "always-accept",
    "resample-target",
    "target-no-top-k",
    "target-no-temperature",
    "scored-other-depth",
    "second-wrong-base",
    "unnormalised-residual",
    "stale-kv",
]


FIELD = [  # bugs of serving stacks' speculative samplers
    (dict(d1=1), Bugs(draft_rounding="int8"), SamplingParams(temperature=0.5)),
    (dict(d1=1), Bugs(scored_unfiltered=True), TOPK),
    (dict(d1=1), Bugs(accept_if_equal=True), T1),
    (dict(d1=3), Bugs(first_unverified=4), T1),
    (dict(d1=1, d2=3, gate="off"), Bugs(stale_second=True), T1),
    (dict(d1=1), Bugs(ratio_previous_token=True), SamplingParams(temperature=0.5)),
    (dict(d1=1), Bugs(late_rejection=True), SamplingParams(temperature=0.5)),
]
FIELD_IDS = [
    "draft-int8",
    "scored-unfiltered",
    "accept-if-equal",
    "first-unverified",
    "stale-second",
    "ratio-on-input-token",
    "rejection-handled-one-step-late",
]


@pytest.mark.parametrize("kw,bugs,s", BUGGY + FIELD, ids=BUG_IDS + FIELD_IDS)
def test_step_law_of_each_bug_matches_its_sampler(oracle, kw, bugs, s):
    """Differential: the closed-form joint law vs 4000 draws of `step` (chi-square, fixed seeds)."""
    from proofs.stats.chisquare import chisquare_gof

    dec = SpecRef(oracle, bugs=bugs, **kw)
    joint = dec.step_law(PROMPT, s)
    assert float(joint.sum()) == approx(1.0)
    V = oracle.V
    counts = np.zeros(V * V, dtype=np.int64)
    g = torch.Generator().manual_seed(123)
    for _ in range(4000):
        y, c = dec.step(PROMPT, s, g)
        counts[y * V + c] += 1
    assert chisquare_gof(counts, joint.flatten().numpy())["p_value"] > 1e-4


@pytest.mark.parametrize("kw,bugs,s", BUGGY, ids=BUG_IDS)
def test_each_bug_changes_the_law_of_three_tokens(oracle, kw, bugs, s):
    law = exact_law(oracle, PROMPT, 3, s)
    got = SpecRef(oracle, bugs=bugs, **kw).sequence_law(PROMPT, 3, s)
    tv = 0.5 * (
        sum(abs(p - (law.probs[law.index[c]] if c in law.index else 0.0)) for c, p in got.items())
        + sum(float(q) for c, q in zip(law.cells, law.probs) if c not in got)
    )
    assert tv > 0.05


@pytest.mark.parametrize("kw,bugs,s", FIELD, ids=FIELD_IDS)
def test_each_field_bug_changes_the_law_and_position_matters(oracle, kw, bugs, s):
    dec = SpecRef(oracle, bugs=bugs, **kw)
    ref = SpecRef(oracle, d1=oracle.R).sequence_law(PROMPT, 3, s)
    got = dec.sequence_law(PROMPT, 3, s)
    assert 0.5 * sum(abs(got.get(c, 0.0) - ref.get(c, 0.0)) for c in set(got) | set(ref)) > 0.005
    if bugs.first_unverified:  # the round's first token is the draft, the others are verified
        assert torch.allclose(dec.step_law(PROMPT, s, 0).diagonal(), oracle.law(PROMPT, kw["d1"], s))
        assert torch.allclose(
            dec.step_law(PROMPT, s, 1).diagonal(), oracle.law(PROMPT, oracle.R, s), atol=1e-12
        )


def test_target_top_k_default_only_acts_when_the_user_set_no_top_k(oracle):
    dec = SpecRef(oracle, d1=1, bugs=Bugs(target_top_k_default=2))
    assert int((dec.laws(PROMPT, T1)["target"] > 0).sum()) == 2
    assert torch.equal(dec.laws(PROMPT, TOPK)["target"], oracle.law(PROMPT, oracle.R, TOPK))


def test_greedy_bugs_diverge_from_refdec(oracle):
    prompts = [(1, 2, 3), (4, 7, 11, 2), (0, 5), (12, 3, 8, 6, 9), (2,), (9, 9, 1)]
    for bugs in (Bugs(greedy_near_miss=0.25), Bugs(stale_kv=True)):
        dec = SpecRef(oracle, d1=1, bugs=bugs)
        assert any(
            dec.generate(p, 12, SamplingParams(), 0) != refdec.generate(oracle.model, list(p), 12)
            for p in prompts
        )


def test_bad_settings_are_loopcert_errors(oracle):
    with pytest.raises(LoopcertError, match="d1"):
        SpecRef(oracle, d1=oracle.R + 1)
    with pytest.raises(LoopcertError, match="d2"):
        SpecRef(oracle, d1=2, d2=2)
    with pytest.raises(LoopcertError, match="gate"):
        SpecRef(oracle, d1=1, d2=2, gate="sometimes")
    with pytest.raises(LoopcertError, match="target_missing"):
        Bugs(target_missing="top_q")
    with pytest.raises(LoopcertError, match="score_depth"):
        SpecRef(oracle, d1=1, bugs=Bugs(score_depth=oracle.R + 1))
    with pytest.raises(LoopcertError, match="greedy"):
        SpecRef(oracle, d1=1).step_law(PROMPT, SamplingParams())
