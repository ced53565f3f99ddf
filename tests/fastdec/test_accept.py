"""Acceptance rules (fastdec/accept.py, docs/design.md section 4).

Fast cover first (exact laws == target on random and edge-case laws, greedy, RNG use, errors),
then the Monte-Carlo tie between the sampling functions and the law functions, with its
negative controls.
"""

from __future__ import annotations

import collections

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fastdec.accept import (
    Source,
    accept_one,
    cascade,
    cascade_law,
    gate_mask,
    gate_open,
    gate_open_greedy,
    gated_residual,
    greedy_verify,
    loopspec_joint_law,
    loopspec_law,
    loopspec_step,
    loopspec_verify,
    positive_part,
    residual,
    total_variation,
)
from proofs.stats.chisquare import chisquare_gof, detectable_tv
from refdec.errors import LoopcertError
from refdec.sampling import draw_uniform, sample, sample_from

LAW_TOL = 1e-12
GATES = [True, False, "inverted", "none"]
SPECIAL_WEIGHTS = [0.0, 1e-300, 1e-30, 1e-8, 0.25, 1.0]  # zeros, tiny masses, ties


def t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)


# All three sources have mass under every gate (see test_sampling_matches_joint_law).
P_R = t(0.40, 0.25, 0.15, 0.12, 0.08)
P_D1 = t(0.10, 0.45, 0.05, 0.30, 0.10)
P_D2 = t(0.35, 0.15, 0.25, 0.15, 0.10)


def one_hot(vocab: int, i: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(i), vocab).to(torch.float64)


def assert_law(got: torch.Tensor, want: torch.Tensor, tol: float = LAW_TOL) -> None:
    err = (got - want).abs()
    worst = int(err.argmax())
    assert float(err.max()) <= tol, (
        f"laws differ by {float(err.max()):.3e} at token {worst} "
        f"(got {float(got[worst])!r}, want {float(want[worst])!r}); "
        f"got {got.tolist()}, want {want.tolist()}"
    )


@st.composite
def laws(draw, vocab: int) -> torch.Tensor:
    kind = draw(st.sampled_from(["floats", "special", "one_hot", "uniform"]))
    if kind == "one_hot":
        return one_hot(vocab, draw(st.integers(0, vocab - 1)))
    if kind == "uniform":
        return torch.full((vocab,), 1.0 / vocab, dtype=torch.float64)
    element = st.floats(0.0, 1.0) if kind == "floats" else st.sampled_from(SPECIAL_WEIGHTS)
    w = torch.tensor(draw(st.lists(element, min_size=vocab, max_size=vocab)), dtype=torch.float64)
    if float(w.sum()) == 0.0:
        w[draw(st.integers(0, vocab - 1))] = 1.0
    return w / w.sum()


@st.composite
def triples(draw) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(p_R, p_d1, p_d2); a third of the time with pairwise disjoint supports."""
    vocab = draw(st.integers(1, 6))
    p_R, p_d1, p_d2 = (draw(laws(vocab)) for _ in range(3))
    if vocab >= 3 and draw(st.booleans()) and draw(st.booleans()):
        perm = draw(st.permutations(range(vocab)))
        blocks = (perm[:1], perm[1:2], perm[2:])
        p_R, p_d1, p_d2 = (_restrict(p, idx) for p, idx in zip((p_R, p_d1, p_d2), blocks))
    return p_R, p_d1, p_d2


def _restrict(p: torch.Tensor, idx) -> torch.Tensor:
    r = torch.zeros_like(p)
    r[list(idx)] = p[list(idx)] if float(p[list(idx)].sum()) > 0 else 1.0
    return r / r.sum()


def brute_cascade_law(target: torch.Tensor, qs: list[torch.Tensor]) -> list[float]:
    """Oracle: Algorithm 1 enumerated token by token in Python floats (no accept.py internals)."""
    vocab = target.numel()
    rho = target.tolist()
    law, running = [0.0] * vocab, 1.0
    for q in map(torch.Tensor.tolist, qs):
        rejected = 0.0
        for x in range(vocab):
            if q[x] > 0:
                a = min(1.0, rho[x] / q[x])
                law[x] += running * q[x] * a
                rejected += q[x] * (1.0 - a)
        pos = [max(r - qq, 0.0) for r, qq in zip(rho, q)]
        if sum(pos) > 1e-15:
            rho = [v / sum(pos) for v in pos]
        running *= rejected
    return [w + running * r for w, r in zip(law, rho)]


# -- exact laws ---------------------------------------------------------------------------------


@settings(deadline=None)
@given(st.data())
def test_cascade_law_is_target(data):
    vocab = data.draw(st.integers(1, 6))
    target = data.draw(laws(vocab))
    qs = data.draw(st.lists(laws(vocab), min_size=0, max_size=3))
    law = cascade_law(target, qs)
    assert_law(law, target)
    assert_law(law, torch.tensor(brute_cascade_law(target, qs), dtype=torch.float64))


@pytest.mark.parametrize("gate", GATES, ids=str)
@settings(deadline=None)
@given(triple=triples())
@example(triple=(t(1.0, 1e-300), t(1e-300, 1.0), t(0.5, 0.5)))  # tiny masses
@example(triple=(t(1, 0, 0), t(0, 1, 0), t(0, 0, 1)))  # disjoint one-hots
@example(triple=(t(0.5, 0.5), t(0.5, 0.5), t(0.5, 0.5)))  # all equal: nothing is ever rejected
def test_loopspec_law_is_target(gate, triple):
    p_R, p_d1, p_d2 = triple
    law = loopspec_law(p_R, p_d1, p_d2, gate)
    assert_law(law.emitted, p_R)
    assert_law(loopspec_joint_law(p_R, p_d1, p_d2, gate).sum(0), law.emitted, 0.0)
    assert -1e-15 <= law.p_both_rejected <= total_variation(p_d1, p_R) + 1e-15
    assert 0.0 <= law.p_gate_open <= 1.0 + 1e-15


@settings(deadline=None)
@given(triple=triples())
def test_gate_variants_differ_only_in_efficiency(triple):
    p_R, p_d1, p_d2 = triple
    on, off, inv, none = (loopspec_law(p_R, p_d1, p_d2, g) for g in GATES)
    # "on" and "inverted" split the x1 for which a second proposal exists.
    assert abs(on.p_gate_open + inv.p_gate_open - off.p_gate_open) <= 1e-12
    # Without a second proposal every rejection of x1 is a restart.
    assert abs(none.p_both_rejected - total_variation(p_d1, p_R)) <= 1e-12
    assert none.p_gate_open == 0.0
    # Ungated, the second proposal helps for every rejected x1 (Theorem 1 without the gate).
    assert off.p_both_rejected <= on.p_both_rejected + 1e-12


def test_loopspec_law_equals_cascade_law_when_ungated():
    q2, _ = residual(P_D2, P_D1)
    ungated = loopspec_joint_law(P_R, P_D1, P_D2, gate=False).sum(0)
    assert_law(ungated, cascade_law(P_R, [P_D1, q2]))
    assert_law(ungated, torch.tensor(brute_cascade_law(P_R, [P_D1, q2]), dtype=torch.float64))


def test_wrong_rules_are_not_the_target():
    """The law comparison can fail: always-accept and resample-from-target are not lossless."""
    p_R, q1 = t(0.5, 0.5, 0.0), t(0.0, 0.5, 0.5)
    always_accept = q1
    resample_target = torch.minimum(q1, p_R) + total_variation(q1, p_R) * p_R  # (0.25, 0.75, 0)
    for wrong in (always_accept, resample_target):
        with pytest.raises(AssertionError, match="laws differ"):
            assert_law(wrong, p_R)
    assert_law(cascade_law(p_R, [q1]), p_R)


# -- primitives and gates -----------------------------------------------------------------------


def test_residual_and_positive_part():
    p, q = t(0.5, 0.3, 0.2), t(0.2, 0.3, 0.5)
    assert positive_part(p, q).tolist() == pytest.approx([0.3, 0.0, 0.0])
    law, mass = residual(p, q)
    assert mass == pytest.approx(0.3) and law.tolist() == [1.0, 0.0, 0.0]
    assert residual(p, p) == (None, 0.0)
    # Rounding-level mass (<= RESIDUAL_TOL) is empty; a genuine tiny mass is kept.
    assert residual(t(0.5 + 2**-53, 0.5 - 2**-53), t(0.5, 0.5))[0] is None
    tiny, mass = residual(t(1 - 1e-12, 1e-12), t(1.0, 0.0))
    assert tiny.tolist() == [0.0, 1.0] and mass == pytest.approx(1e-12)


def test_gates():
    q1, p_d2 = t(0.6, 0.3, 0.1), t(0.2, 0.3, 0.5)
    assert gate_mask(p_d2, q1).tolist() == [True, False, False]  # p_d2 < q1 only at token 0
    assert gate_mask(p_d2, q1, "inverted").tolist() == [False, True, True]
    assert gate_mask(p_d2, q1, False).tolist() == [True, True, True]
    assert gate_mask(p_d2, q1, "none").tolist() == [False, False, False]
    assert gate_open(p_d2, q1, 0) and not gate_open(p_d2, q1, 1)
    assert not any(gate_mask(q1, q1, g).any() for g in GATES)  # q2 empty: never open


@pytest.mark.parametrize("vocab", [1, 2, 5])
def test_greedy_gate_is_the_one_hot_sampling_gate(vocab):
    for a in range(vocab):
        for x1 in range(vocab):
            assert gate_open_greedy(a, x1) == gate_open(one_hot(vocab, a), one_hot(vocab, x1), x1)


# -- greedy ----------------------------------------------------------------------------------------


def test_greedy_verify_literal():
    assert greedy_verify(3, [3]) == (3, Source.FIRST)
    assert greedy_verify(3, [3, 3]) == (3, Source.FIRST)
    assert greedy_verify(3, [1, 3]) == (3, Source.SECOND)
    assert greedy_verify(3, [1, 2]) == (3, Source.RESTART)
    assert greedy_verify(3, [1]) == (3, Source.RESTART)


@pytest.mark.parametrize("vocab", [1, 3])
def test_greedy_verify_is_cascade_on_one_hots(vocab):
    """Greedy is the sampling rule at temperature 0: same token, same source, any uniforms."""
    for a in range(vocab):
        for x1 in range(vocab):
            for x2 in [None, *range(vocab)]:
                if x2 == x1:
                    continue  # x2 ~ q2 = p_d2 (-) p_d1 never repeats a one-hot x1
                props = [(x, one_hot(vocab, x)) for x in (x1, x2) if x is not None]
                for u in (0.0, 0.999):
                    got = loopspec_verify(one_hot(vocab, a), *sum(props, ()), rng=[u, u, u])
                    assert got == greedy_verify(a, [p[0] for p in props]), (a, x1, x2, u)


def test_greedy_loopspec_law_is_argmax():
    p_R, p_d1, p_d2 = one_hot(4, 2), one_hot(4, 0), one_hot(4, 2)
    law = loopspec_law(p_R, p_d1, p_d2)
    assert law.emitted.tolist() == [0.0, 0.0, 1.0, 0.0]
    assert law.p_gate_open == 1.0 and law.p_both_rejected == 0.0


# -- uniforms and RNG consumption ----------------------------------------------------------------


def test_acceptance_threshold_is_strict():
    target, q = t(0.25, 0.75), t(0.5, 0.5)  # ratio at token 0 is exactly 0.5
    assert cascade(target, [(0, q)], [0.4999]) == (0, 0)
    assert cascade(target, [(0, q)], [0.5, 0.0]) == (1, 1)  # rejected: residual is one-hot at 1
    assert cascade(target, [(1, q)], [0.9999]) == (1, 0)  # ratio >= 1: certain, still one uniform
    with pytest.raises(LoopcertError, match="ran out of uniforms after 1"):
        cascade(target, [(0, q)], [0.5])


@settings(deadline=None)
@given(triple=triples(), seed=st.integers(0, 2**32 - 1), gate=st.sampled_from(GATES))
def test_rng_consumption_is_fixed(triple, seed, gate):
    """Same seed, same result; and exactly the documented number of uniforms is used."""
    p_R, p_d1, p_d2 = triple
    g1, g2 = (torch.Generator().manual_seed(seed) for _ in range(2))
    assert loopspec_step(p_R, p_d1, p_d2, g1, gate) == loopspec_step(p_R, p_d1, p_d2, g2, gate)
    assert draw_uniform(g1) == draw_uniform(g2)

    g = torch.Generator().manual_seed(seed)
    x1 = sample(p_d1, g)
    props = [(x1, p_d1)]
    if gate_open(p_d2, p_d1, x1, gate):
        q2, _ = residual(p_d2, p_d1)
        props.append((sample(q2, g), q2))
    replay = torch.Generator().manual_seed(seed)
    us = [draw_uniform(replay) for _ in range(len(props) + 4)]
    token, source = cascade(p_R, props, g)
    assert (token, source) == cascade(p_R, props, us[len(props) :])
    used = source + 1 if source < len(props) else len(props) + 1
    assert draw_uniform(g) == us[len(props) + used]


def test_accept_one_sources():
    target, q = t(0.25, 0.75), t(0.5, 0.5)
    assert accept_one(target, 0, q, [0.1]) == (0, Source.FIRST)
    assert accept_one(target, 0, q, [0.9, 0.1]) == (1, Source.RESTART)


# -- user errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: cascade(t(0.5, 0.5), [(2, t(0.5, 0.5))], [0.1]), r"in \[0, 2\), got 2"),
        (lambda: cascade(t(0.5, 0.5), [(0, t(0.0, 1.0))], [0.1]), "not drawn from"),
        (lambda: cascade(t(0.5, 0.6), [], [0.1]), "sums to"),
        (lambda: cascade(t(1.5, -0.5), [], [0.1]), "finite and >= 0"),
        (lambda: cascade(t(float("nan"), 1.0), [], [0.1]), "finite and >= 0"),
        (lambda: cascade(torch.ones(2, 2) / 4, [], [0.1]), r"shape \(V,\)"),
        (lambda: cascade(t(0.5, 0.5), [(0, t(1 / 3, 1 / 3, 1 / 3))], [0.1]), "V=3, expected V=2"),
        (lambda: cascade(t(0.5, 0.5), [], [1.0]), r"uniforms\[0\] must be a float in \[0, 1\)"),
        (lambda: cascade(t(0.5, 0.5), [(True, t(0.5, 0.5))], [0.1]), "got True"),
        (lambda: loopspec_law(t(1.0), t(1.0), t(1.0), gate="sideways"), "gate must be"),
        (lambda: loopspec_verify(t(0.5, 0.5), 0, t(0.5, 0.5), 1, rng=[0.1]), "both x2 and q2"),
        (lambda: greedy_verify(1, [0, 2, 3]), "1 or 2 proposals"),
        (lambda: greedy_verify(-1, [0]), "target_argmax must be a non-negative token id"),
    ],
)
def test_user_errors(call, match):
    with pytest.raises(LoopcertError, match=match):
        call()


def test_token_ids_from_numpy_and_torch_are_accepted():
    import numpy as np

    q = t(0.5, 0.5)
    assert cascade(q, [(np.int64(1), q)], [0.1]) == (1, 0)
    assert cascade(q, [(torch.tensor(1), q)], [0.1]) == (1, 0)


# -- Monte Carlo: the law functions describe the sampling code -----------------------------------

MC_N = 20_000  # the positive tests (the slowest of this file: keep them few)
MC_N_CONTROL = 4_000  # the negative controls' deviations are large: power is checked below
MC_ALPHA = 1e-4


def _counts(step, n: int, seed: int) -> collections.Counter:
    g = torch.Generator().manual_seed(seed)
    return collections.Counter(step(g) for _ in range(n))


def _joint_fit(counts: collections.Counter, joint: torch.Tensor) -> dict:
    observed = [counts[(x, s)] for s in Source for x in range(joint.shape[1])]
    return chisquare_gof(observed, joint.flatten().tolist())


def _token_fit(counts: collections.Counter, law: torch.Tensor) -> dict:
    tokens = [sum(counts[(x, s)] for s in Source) for x in range(law.numel())]
    return chisquare_gof(tokens, law.tolist())


def _resample_target_step(g: torch.Generator) -> tuple[int, Source]:
    """Mutant: the cascade's residual is never formed; every rejection falls back to p_R."""
    x1 = sample(P_D1, g)
    props = [(x1, P_D1)]
    if gate_open(P_D2, P_D1, x1):
        q2, _ = residual(P_D2, P_D1)
        props.append((sample(q2, g), q2))
    for j, (x, q) in enumerate(props):
        if draw_uniform(g) < float(P_R[x] / q[x]):
            return x, Source(j)
    return sample_from(P_R, draw_uniform(g)), Source.RESTART


@pytest.mark.parametrize(
    "gate",
    [True, *(pytest.param(g, marks=pytest.mark.slow) for g in (False, "inverted"))],
    ids=str,
)
def test_sampling_matches_joint_law(gate):
    """Joint (source, token) counts of loopspec_step fit loopspec_joint_law; tokens fit p_R."""
    counts = _counts(lambda g: loopspec_step(P_R, P_D1, P_D2, g, gate), MC_N, seed=1234)
    fit = _joint_fit(counts, loopspec_joint_law(P_R, P_D1, P_D2, gate))
    assert fit["p_value"] > MC_ALPHA, fit
    assert _token_fit(counts, P_R)["p_value"] > MC_ALPHA


def test_monte_carlo_detects_resample_from_target():
    """Negative control: the same token-level test rejects a decoder that skips the residual."""
    fit = _token_fit(_counts(_resample_target_step, MC_N_CONTROL, seed=1234), P_R)
    assert fit["p_value"] < MC_ALPHA, fit


def test_monte_carlo_detects_a_law_that_is_not_the_sampler():
    """Negative control: the joint test tells the gated rule from the inverted one (same tokens)."""
    counts = _counts(lambda g: loopspec_step(P_R, P_D1, P_D2, g, "inverted"), MC_N_CONTROL, seed=99)
    fit = _joint_fit(counts, loopspec_joint_law(P_R, P_D1, P_D2, True))
    assert fit["p_value"] < MC_ALPHA, fit
    assert _token_fit(counts, P_R)["p_value"] > MC_ALPHA  # lossless: only the sources differ


def test_negative_controls_have_power():
    """The controls' true deviations exceed what MC_N_CONTROL draws detect with prob 0.99."""
    resample = torch.minimum(P_D1, P_R).clone()
    law_on = loopspec_law(P_R, P_D1, P_D2, True)
    # Mutant law: accept x1 as usual; x2 ~ q2 accepted w.p. min(1, p_R/q2); else p_R.
    q2, _ = residual(P_D2, P_D1)
    opens = gate_mask(P_D2, P_D1)
    rej1 = positive_part(P_D1, P_R)
    r_open, r_closed = float(rej1[opens].sum()), float(rej1[~opens].sum())
    second = torch.minimum(q2, P_R) + float(positive_part(q2, P_R).sum()) * P_R
    resample += r_closed * P_R + r_open * second
    assert abs(float(resample.sum()) - 1.0) < 1e-12
    joint_on = loopspec_joint_law(P_R, P_D1, P_D2, True)
    joint_inv = loopspec_joint_law(P_R, P_D1, P_D2, "inverted")
    assert total_variation(resample, P_R) > detectable_tv(MC_N_CONTROL, P_R.tolist(), MC_ALPHA)
    assert total_variation(joint_inv.flatten(), joint_on.flatten()) > detectable_tv(
        MC_N_CONTROL, [p for p in joint_on.flatten().tolist() if p > 0], MC_ALPHA
    )
    assert law_on.p_both_rejected < loopspec_law(P_R, P_D1, P_D2, "inverted").p_both_rejected


@settings(max_examples=60)
@given(seed=st.integers(0, 2**32 - 1), v=st.integers(2, 9), gate=st.sampled_from(GATES))
def test_unchecked_hot_path_is_the_checked_functions(seed, v, gate):
    """check=False (the decoder's hot path) skips validation only: the same gate, the same
    token and source, the same uniforms consumed."""
    g = torch.Generator().manual_seed(seed)
    p_r, q1, p_d2 = (torch.rand(v, generator=g, dtype=torch.float64) ** 3 for _ in range(3))
    p_r, q1, p_d2 = p_r / p_r.sum(), q1 / q1.sum(), p_d2 / p_d2.sum()
    x1 = sample(q1, g)
    assert gate_open(p_d2, q1, x1, gate) == gate_open(p_d2, q1, x1, gate, check=False)
    q2, _ = residual(p_d2, q1)
    gated = gated_residual(p_d2, q1, x1, gate)  # the pipelined strategy's gate and q2 in one
    assert torch.equal(gated, q2) if gate_open(p_d2, q1, x1, gate) else gated is None
    assert gated_residual(q1, q1, x1, gate) is None  # p_d2 == q1: no residual mass, closed
    props = {} if q2 is None else {"x2": sample(q2, g), "q2": q2}
    a, b = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    assert loopspec_verify(p_r, x1, q1, **props, rng=a) == loopspec_verify(
        p_r, x1, q1, **props, rng=b, check=False
    )
    assert draw_uniform(a) == draw_uniform(b)
