"""The engines' sampling parameters (min_p, penalties, logit bias, stop tokens, min_tokens, EOS):
refdec's laws against an independent per-token reference written with Python floats and sorted
lists (no torch, no shared helper), refdec.generate and refdec.score against those laws given each
prefix, and every bad value refused by name."""

import math

import pytest
import torch
from logit_laws import spread_logits
from tolerances import approx

import refdec
from refdec.config import TINY_PRESETS, get_preset
from refdec.errors import LoopcertError
from refdec.model import LoopedLM
from refdec.sampling import (
    BY_SIGN,
    CONTEXT_SCOPE,
    FILTERS_FIRST,
    MIN_P_LAST,
    Context,
    SamplingParams,
    draw_uniform,
    process_logits,
    transform,
)
from refdec.score import continuation_laws

MODEL = LoopedLM(get_preset(TINY_PRESETS[0])).init_weights(5).to(torch.float64).eval()
V = MODEL.cfg.vocab_size  # 13


# -- the independent reference ---------------------------------------------------------------------


def reference_law(logits, p: SamplingParams, prompt=(), output=(), eos=None) -> list[float]:
    """The law of one position, written from the parameters' definitions (refdec.sampling's
    docstring), token by token."""
    x = [float(v) for v in logits]
    n = len(x)
    for t, b in p.logit_bias:
        x[t] += b
    if p.penalty_scope == CONTEXT_SCOPE:
        ctx = list(prompt) + list(output)
        if p.penalty_window is not None:
            ctx = ctx[len(ctx) - p.penalty_window :] if len(ctx) > p.penalty_window else ctx
        rep, add = ctx, ctx
    else:
        rep, add = list(prompt) + list(output), list(output)
    for t in range(n):
        if t in rep:
            x[t] = x[t] / p.repetition_penalty if x[t] > 0 else x[t] * p.repetition_penalty
        c = add.count(t)
        if p.penalty_sign == BY_SIGN:  # presence, then frequency, each toward 0's side it is on
            for amount in (p.presence_penalty if c else 0.0, p.frequency_penalty * c):
                x[t] = x[t] - amount if x[t] >= 0 else x[t] + amount
        else:
            x[t] -= p.frequency_penalty * c + (p.presence_penalty if c else 0.0)
    stops = set(p.stop_token_ids) | (set() if eos is None or p.ignore_eos else {eos})
    if len(output) < p.min_tokens:
        for t in stops:
            x[t] = -math.inf
    if p.temperature == 0:
        best = max(range(n), key=lambda t: (x[t], -t))
        return [1.0 if t == best else 0.0 for t in range(n)]

    def softmax(scale):
        top = max(x)
        e = [math.exp((v - top) / scale) if v > -math.inf else 0.0 for v in x]
        s = sum(e)
        return [v / s for v in e]

    def ranked(q):
        return sorted((t for t in range(n) if q[t] > 0), key=lambda t: (-q[t], t))

    def renorm(q, keep):
        s = sum(q[t] for t in keep)
        return [q[t] / s if t in keep else 0.0 for t in range(n)]

    if p.order == FILTERS_FIRST:
        ones = softmax(1.0)
        keep = set(t for t in range(n) if ones[t] > 0)
        if p.top_p is not None and p.top_p < 1:
            before, nucleus = 0.0, []
            for t in ranked(ones):
                if before < p.top_p:
                    nucleus.append(t)
                before += ones[t]
            keep = {t for t in keep if ones[t] >= ones[nucleus[-1]]}  # ties with the last kept
        if p.min_p > 0:
            keep = {t for t in keep if ones[t] >= p.min_p * max(ones)}
        if p.top_k is not None:
            keep = set(sorted(keep, key=lambda t: (-ones[t], t))[: p.top_k])
        return renorm(softmax(p.temperature), keep)
    q = softmax(p.temperature)
    tempered = list(q)
    if p.min_p > 0 and p.min_p_order != MIN_P_LAST:
        q = renorm(q, {t for t in range(n) if q[t] >= p.min_p * max(q)})
    if p.top_k is not None:
        q = renorm(q, set(ranked(q)[: p.top_k]))
    if p.top_p is not None:
        before, keep = 0.0, set()
        for t in ranked(q):
            if before < p.top_p:
                keep.add(t)
            before += q[t]
        q = renorm(q, keep)
    if p.min_p > 0 and p.min_p_order == MIN_P_LAST:
        q = renorm(q, {t for t in range(n) if tempered[t] >= p.min_p * max(tempered)})
    return q


SETTINGS = [
    SamplingParams(1.0, min_p=0.2),
    SamplingParams(0.7, min_p=0.3, top_p=0.8),
    SamplingParams(0.7, min_p=0.3, top_p=0.8, min_p_order=MIN_P_LAST),
    SamplingParams(1.3, min_p=0.1, top_k=4, top_p=0.9),
    SamplingParams(1.0, min_p=0.05, top_k=5, top_p=0.7, order=FILTERS_FIRST),
    SamplingParams(0.8, min_p=0.4, order=FILTERS_FIRST),
    SamplingParams(1.0, repetition_penalty=1.8),
    SamplingParams(0.9, repetition_penalty=0.6, top_k=6),
    SamplingParams(1.0, frequency_penalty=0.7, presence_penalty=0.4),
    SamplingParams(1.0, frequency_penalty=-0.5, presence_penalty=1.1, repetition_penalty=1.3, top_p=0.9),
    SamplingParams(1.0, repetition_penalty=1.5, frequency_penalty=0.3, penalty_scope=CONTEXT_SCOPE),
    SamplingParams(1.0, presence_penalty=2.0, penalty_scope=CONTEXT_SCOPE, penalty_window=3),
    SamplingParams(1.0, frequency_penalty=0.7, presence_penalty=0.4, penalty_sign=BY_SIGN),
    SamplingParams(
        1.2, frequency_penalty=-0.5, presence_penalty=1.1, repetition_penalty=1.3, penalty_sign=BY_SIGN
    ),
    SamplingParams(0.0, presence_penalty=2.0, penalty_sign=BY_SIGN),
    SamplingParams(1.0, logit_bias={2: 3.0, 7: -1.5}),
    SamplingParams(0.6, logit_bias={0: 2.0}, repetition_penalty=2.0, top_k=3),
    SamplingParams(1.0, stop_token_ids=[1, 4], min_tokens=3),
    SamplingParams(1.0, min_tokens=2),  # masks the EOS given in the context
    SamplingParams(1.0, min_tokens=2, ignore_eos=True),
    SamplingParams(0.0, repetition_penalty=3.0, logit_bias={5: 0.5}),
    SamplingParams(0.0, frequency_penalty=1.0, stop_token_ids=[3], min_tokens=5),
]
CONTEXTS = [
    ((1, 2, 3, 2, 2), ()),
    ((4, 4, 0), (2, 2, 9, 4)),
    ((7,), (0, 1)),
    ((5, 6, 7, 8, 9, 10, 11, 12), (5, 5, 5)),
]


@pytest.mark.parametrize("params", SETTINGS, ids=lambda p: str(p.describe()))
@pytest.mark.parametrize("spread", [0.5, 2.0, 6.0])
def test_each_law_is_the_independent_reference(params, spread):
    _, (x, ties) = spread_logits(V, spread)
    for logits in (x, ties):
        for prompt, output in CONTEXTS:
            ctx = Context.of(prompt, output, eos_token_id=3)
            got = transform(logits, params, ctx)
            want = reference_law(logits.tolist(), params, prompt, output, eos=3)
            assert got.sum().item() == approx(1.0)
            assert got.tolist() == approx(want), (prompt, output)


def test_defaults_change_nothing():
    """The new fields at their defaults (or given as their neutral values) are the old law, bit for bit."""
    _, (x, _) = spread_logits(V, 2.0)
    old = SamplingParams(0.8, top_k=5, top_p=0.9)
    neutral = SamplingParams(
        0.8, top_k=5, top_p=0.9, min_p=0.0, repetition_penalty=1.0, logit_bias={}, stop_token_ids=()
    )
    assert neutral == old and hash(neutral) == hash(old) and old.plain
    assert torch.equal(transform(x, neutral), transform(x, old))
    assert old.describe() == {"temperature": 0.8, "top_k": 5, "top_p": 0.9}


def test_by_sign_applies_presence_then_frequency_each_on_the_side_of_zero_it_finds():
    """OpenVINO GenAI's rule (penalty_sign="by-sign"): a logit >= 0 loses the amount, a negative
    one gains it, presence first and frequency judged on what presence left; "subtract" (vLLM's)
    takes f x count + e off every counted logit."""
    x = torch.zeros(V, dtype=torch.float64)
    x[:4] = torch.tensor([1.0, -1.0, 0.3, 0.0], dtype=torch.float64)
    ctx = Context.of((5,), (0, 1, 2, 3))
    by_sign = SamplingParams(1.0, presence_penalty=0.5, frequency_penalty=0.4, penalty_sign=BY_SIGN)
    got = process_logits(x, by_sign, ctx)[:4].tolist()
    assert got == approx([0.1, -0.1, 0.2, -0.1])  # 0.3 - 0.5 = -0.2 < 0, then -0.2 + 0.4
    subtract = process_logits(x, SamplingParams(1.0, presence_penalty=0.5, frequency_penalty=0.4), ctx)
    assert subtract[:4].tolist() == approx([0.1, -1.9, -0.6, -0.9])


def test_a_dict_bias_is_a_hashable_sorted_tuple():
    p = SamplingParams(1.0, logit_bias={7: -1.0, 2: 0.5}, stop_token_ids=[9, 3, 3])
    assert p.logit_bias == ((2, 0.5), (7, -1.0)) and p.stop_token_ids == (3, 9)
    assert p == SamplingParams(1.0, logit_bias=[(2, 0.5), (7, -1.0)], stop_token_ids=(3, 9))
    assert len({p, SamplingParams(1.0, logit_bias={2: 0.5, 7: -1.0}, stop_token_ids=[3, 9])}) == 1
    assert p.stop_ids(4) == {3, 4, 9} and SamplingParams(1.0, ignore_eos=True).stop_ids(4) == set()


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"min_p": 1.5}, "min_p"),
        ({"min_p": -0.1}, "min_p"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"repetition_penalty": math.inf}, "repetition_penalty"),
        ({"frequency_penalty": math.nan}, "frequency_penalty"),
        ({"presence_penalty": "1"}, "presence_penalty"),
        ({"logit_bias": {-1: 1.0}}, "logit_bias"),
        ({"logit_bias": {1: math.inf}}, r"logit_bias\[1\]"),
        ({"logit_bias": 3}, "logit_bias"),
        ({"logit_bias": [(1, 1.0), (1, 2.0)]}, "logit_bias names token 1 twice"),
        ({"stop_token_ids": [1, -2]}, "stop_token_ids"),
        ({"stop_token_ids": 5}, "stop_token_ids"),
        ({"min_tokens": -1}, "min_tokens"),
        ({"min_tokens": True}, "min_tokens"),
        ({"ignore_eos": 1}, "ignore_eos"),
        ({"min_p_order": "first"}, "min_p_order"),
        ({"penalty_scope": "prompt"}, "penalty_scope"),
        ({"penalty_window": 0, "penalty_scope": CONTEXT_SCOPE}, "penalty_window"),
        ({"penalty_window": 20}, "penalty_window=20 applies to penalty_scope 'context'"),
        ({"penalty_sign": "toward-zero"}, "penalty_sign must be one of subtract, by-sign"),
    ],
)
def test_bad_values_are_named(kw, field):
    with pytest.raises(LoopcertError, match=field):
        SamplingParams(1.0, **kw)


def test_a_law_that_needs_the_prefix_refuses_to_guess():
    _, (x, _) = spread_logits(V, 1.0)
    with pytest.raises(LoopcertError, match="Context"):
        transform(x, SamplingParams(1.0, repetition_penalty=1.2))
    with pytest.raises(LoopcertError, match="outside the vocabulary"):
        transform(x, SamplingParams(1.0, logit_bias={V: 1.0}))
    with pytest.raises(LoopcertError, match="masks every token"):
        transform(x, SamplingParams(1.0, stop_token_ids=range(V), min_tokens=1), Context.of([1]))


# -- sequences: the law at position i given prompt + continuation[:i], and termination ----------------

PROMPT = [3, 3, 8, 1, 3]
SEQ_SETTINGS = [
    SamplingParams(1.0, repetition_penalty=2.0, frequency_penalty=0.5),
    SamplingParams(0.8, presence_penalty=1.5, min_p=0.1, stop_token_ids=[2], min_tokens=2),
    SamplingParams(1.2, logit_bias={4: 2.5}, stop_token_ids=[4]),
    SamplingParams(1.0, repetition_penalty=1.7, penalty_scope=CONTEXT_SCOPE, penalty_window=4, top_k=5),
    SamplingParams(0.0, repetition_penalty=4.0, frequency_penalty=2.0),
    SamplingParams(0.9, presence_penalty=1.5, frequency_penalty=0.8, min_p=0.05, penalty_sign=BY_SIGN),
]


def prefix_law(prompt, prefix, params, eos=None):
    logits = MODEL.depth_logits(list(prompt) + list(prefix), [MODEL.cfg.recurrence])[0, -1]
    return reference_law(logits.tolist(), params, prompt, prefix, eos)


@pytest.mark.parametrize("params", SEQ_SETTINGS, ids=lambda p: str(p.describe()))
def test_generate_draws_each_token_from_the_law_of_its_own_prefix(params):
    """The uniforms of generate's stream, replayed through the reference law of each prefix,
    give generate's tokens; the run ends at its first stop token."""
    stops = params.stop_ids(None)
    for seed in range(6):
        got = refdec.generate(MODEL, PROMPT, 8, params, seed=seed)
        gen = torch.Generator().manual_seed(seed)
        for i, tok in enumerate(got):
            law = prefix_law(PROMPT, got[:i], params)
            if params.greedy:
                assert tok == max(range(V), key=lambda t: (law[t], -t))
                continue
            u = draw_uniform(gen)
            cdf = 0.0
            for t in range(V):
                cdf += law[t]
                if u < cdf:
                    break
            assert tok == t or abs(cdf - u) < 1e-12, (seed, i)
            assert law[tok] > 0
        ended = [i for i, t in enumerate(got) if t in stops]
        assert ended in ([], [len(got) - 1]) and (ended or len(got) == 8)


@pytest.mark.parametrize("params", SEQ_SETTINGS, ids=lambda p: str(p.describe()))
def test_continuation_laws_follow_the_prefix(params):
    cont = [4, 4, 0, 3, 3, 9]
    stops = params.stop_ids(None)
    cut = next((i + 1 for i, t in enumerate(cont) if t in stops), len(cont))
    laws = continuation_laws(MODEL, PROMPT, cont[:cut], params)
    for i in range(cut):
        assert laws[i].tolist() == approx(prefix_law(PROMPT, cont[:i], params))


def test_sequence_law_with_termination_sums_to_one():
    """Enumerating every sequence of up to 3 tokens (a sequence ends at its first stop) under the
    reference law gives a law: stopped sequences are shorter sequences of it, never extended."""
    params = SamplingParams(
        1.0, logit_bias={2: 1.5}, stop_token_ids=[2], min_tokens=1, repetition_penalty=1.4
    )
    total, stopped = 0.0, 0.0
    frontier = [((), 1.0)]
    for _ in range(3):
        nxt = []
        for prefix, p in frontier:
            law = prefix_law(PROMPT, prefix, params)
            for t in range(V):
                if law[t] == 0:
                    continue
                if t in params.stop_token_ids:
                    stopped += p * law[t]
                    total += p * law[t]
                else:
                    nxt.append((prefix + (t,), p * law[t]))
        frontier = nxt
    total += sum(p for _, p in frontier)
    assert total == approx(1.0)
    assert 0.05 < stopped < 0.95  # min_tokens=1 kept the stop off the first token only
    with pytest.raises(LoopcertError, match="past the stop token 2 at position 1"):
        continuation_laws(MODEL, PROMPT, [0, 2, 5], params)


def test_eos_stops_unless_ignored_and_min_tokens_holds_it_off():
    params = SamplingParams(1.0, logit_bias={6: 4.0})  # token 6 is likely
    runs = [refdec.generate(MODEL, PROMPT, 6, params, seed=s, eos_token_id=6) for s in range(8)]
    assert all(r[-1] == 6 and 6 not in r[:-1] for r in runs if len(r) < 6)
    assert any(len(r) < 6 for r in runs)
    ignore = SamplingParams(1.0, logit_bias={6: 4.0}, ignore_eos=True)
    assert all(len(refdec.generate(MODEL, PROMPT, 6, ignore, seed=s, eos_token_id=6)) == 6 for s in range(4))
    held = SamplingParams(1.0, logit_bias={6: 4.0}, min_tokens=4)
    for s in range(8):
        r = refdec.generate(MODEL, PROMPT, 6, held, seed=s, eos_token_id=6)
        assert 6 not in r[:4] and len(r) >= 5
