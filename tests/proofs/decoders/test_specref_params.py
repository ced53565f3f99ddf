"""SpecRef under the engines' sampling parameters: the lossless decoder's exact law is refdec's
(penalties following the prefix, stops ending the sequence), and each bug of the recovery draw,
the acceptance test and the engines' other parameters has an exact law that matches its sampler
and moves away from the target."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tolerances import approx

import refdec
from proofs.decoders.specref import Bugs, SpecRef
from proofs.stats.chisquare import chisquare_gof
from proofs.stats.exact_laws import Oracle, exact_law
from refdec.sampling import SamplingParams

PROMPT = (1, 2, 3)
T1 = SamplingParams(temperature=1.0)
PENALTIES = SamplingParams(1.0, repetition_penalty=2.5, frequency_penalty=1.0, presence_penalty=0.5)
STOP = SamplingParams(1.0, stop_token_ids=[3], min_tokens=1)  # token 3 is the likeliest (p 0.29)
MIN_P = SamplingParams(1.0, min_p=0.3)
BIAS = SamplingParams(1.0, logit_bias={4: 1.0})
KP = SamplingParams(1.5, top_k=4, top_p=0.6)


@pytest.fixture(scope="module")
def oracle():
    return Oracle(refdec.load_model("tiny-ouro"))


def tv(a: dict, b: dict) -> float:
    return 0.5 * sum(abs(a.get(c, 0.0) - b.get(c, 0.0)) for c in set(a) | set(b))


@pytest.mark.parametrize(
    "s", [PENALTIES, STOP, MIN_P, BIAS, KP], ids=["penalties", "stop", "min-p", "bias", "k+p"]
)
@pytest.mark.parametrize("kw", [dict(d1=1), dict(d1=1, d2=3, gate="off")], ids=["d1", "d1 d2"])
def test_lossless_sequence_law_is_refdecs(oracle, s, kw):
    want = exact_law(oracle, PROMPT, 3, s)
    got = SpecRef(oracle, **kw).sequence_law(PROMPT, 3, s)
    assert tv(got, dict(zip(want.cells, want.probs.tolist()))) < 1e-9
    if s is STOP:
        assert any(len(c) < 3 for c in got) and all(3 not in c[:-1] for c in got)


ENGINE_BUGS = [  # (kw, bugs, case params, the id of its library entry)
    (dict(d1=1), Bugs(residual_same_uniform=True), T1, "residual-rejecting-uniform"),
    (dict(d1=1), Bugs(recovery_draft_noise=True), T1, "recovery-draft-noise"),
    (dict(d1=1), Bugs(coarse_uniform=8), SamplingParams(1.0, top_k=2), "coarse-uniform-accept"),
    (dict(d1=1), Bugs(target_missing="min_p"), MIN_P, "min-p-draft-only"),
    (dict(d1=1), Bugs(target_missing="logit_bias"), BIAS, "logit-bias-draft-only"),
    (dict(d1=1), Bugs(target_missing="penalties"), PENALTIES, "penalties-draft-only"),
    (dict(d1=1), Bugs(verify_joint_filters=True), KP, "verify-other-filter-order"),
    (dict(d1=1), Bugs(argmax_recovery=True), T1, "argmax-recovery"),
]
IDS = [e[3] for e in ENGINE_BUGS]


@pytest.mark.parametrize("kw,bugs,s,_id", ENGINE_BUGS, ids=IDS)
def test_step_law_of_each_bug_matches_its_sampler(oracle, kw, bugs, s, _id):
    """The closed-form joint law vs 4000 draws of `step` (chi-square, fixed seeds)."""
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


@pytest.mark.parametrize("kw,bugs,s,_id", ENGINE_BUGS, ids=IDS)
def test_each_bug_moves_the_law(oracle, kw, bugs, s, _id):
    ref = SpecRef(oracle, d1=oracle.R).sequence_law(PROMPT, 3, s)
    assert tv(SpecRef(oracle, bugs=bugs, **kw).sequence_law(PROMPT, 3, s), ref) > 0.01


def test_stale_penalty_state_sees_the_round_start_only(oracle):
    """Rounds of 3: position 0 is right (nothing generated), positions 1 and 2 miss the tokens of
    their own round; the sequence law moves."""
    dec = SpecRef(oracle, d1=1, bugs=Bugs(stale_penalty=3))
    ok = SpecRef(oracle, d1=1)
    assert torch.allclose(dec.step_law(PROMPT, PENALTIES, 0), ok.step_law(PROMPT, PENALTIES, 0))
    ctx = PROMPT + (3,)
    assert not torch.allclose(dec.step_law(ctx, PENALTIES, 1), ok.step_law(ctx, PENALTIES, 1))
    assert tv(dec.sequence_law(PROMPT, 3, PENALTIES), ok.sequence_law(PROMPT, 3, PENALTIES)) > 0.01
    held = SamplingParams(1.0, stop_token_ids=[3], min_tokens=2)  # min_tokens' state too
    assert tv(dec.sequence_law(PROMPT, 3, held), ok.sequence_law(PROMPT, 3, held)) > 0.01


def test_committing_past_a_stop_leaves_the_law(oracle):
    dec = SpecRef(oracle, d1=1, bugs=Bugs(commit_past_stop=True))
    got = dec.sequence_law(PROMPT, 3, STOP)
    assert all(len(c) == 3 for c in got) and sum(p for c, p in got.items() if 3 in c[:-1]) > 0.1
    runs = [dec.generate(list(PROMPT), 3, STOP, seed=s) for s in range(40)]
    assert any(3 in r[:-1] for r in runs)
    ok = [SpecRef(oracle, d1=1).generate(list(PROMPT), 3, STOP, seed=s) for s in range(40)]
    assert all(3 not in r[:-1] for r in ok) and any(len(r) < 3 for r in ok)


def test_coarse_uniform_accepts_a_token_the_target_forbids(oracle):
    """u on a grid can be 0, and u <= p/q then accepts x1 with p_R(x1) = 0 (sglang #35771)."""
    s = SamplingParams(1.0, top_k=2)
    dec = SpecRef(oracle, d1=1, draft_filter=False, bugs=Bugs(coarse_uniform=8))
    target = oracle.law(PROMPT, oracle.R, s)
    joint = dec.step_law(PROMPT, s)
    assert float(joint.diagonal()[target == 0].sum()) > 0
