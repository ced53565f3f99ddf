"""fastdec vs the oracle (refdec.generate, no cache) in float64, token for token.

Greedy: every lossless strategy, every tiny preset, prompts of 1-24 tokens, R in 2..12, random
valid (d1, d2, draft_ahead, gate, depth, rewind), EOS included. Sampling: the autoregressive
strategy consumes one uniform per token exactly like refdec, so it must match it exactly too.
"""

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from fastdec import Decoder
from refdec import LoopedLM, SamplingParams, generate
from refdec.config import TINY_LOOPCODER, TINY_PRESETS, get_preset

_models: dict = {}


def model_for(name: str, recurrence: int, seed: int) -> LoopedLM:
    key = (name, recurrence, seed)
    if key not in _models:
        cfg = get_preset(name).replace(recurrence=recurrence)
        _models[key] = LoopedLM(cfg).init_weights(seed).double()
    return _models[key]


@st.composite
def cases(draw, strategy: str):
    name = draw(st.sampled_from(TINY_PRESETS))
    r = draw(st.integers(2, 12))
    seed = draw(st.integers(0, 3))  # few weight seeds: models are cached across examples
    vocab = get_preset(name).vocab_size
    prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=24))
    n_new = draw(st.integers(2, 8))
    eos = draw(st.none() | st.integers(0, vocab - 1))
    depth = draw(st.none() | st.integers(2, r + 2))
    target = r if depth is None else depth
    kw = {"depth": depth, "rewind_depth": draw(st.none() | st.integers(1, target))}
    if strategy != "autoregressive":
        kw["draft_depth"] = d1 = draw(st.integers(1, target - 1))
    if strategy == "draft-verify":
        kw["draft_ahead"] = draw(st.integers(1, 5))
    if strategy == "pipelined":
        if d1 + 1 < target:
            kw["second_depth"] = draw(st.none() | st.integers(d1 + 1, target - 1))
        kw["gate"] = draw(st.sampled_from([True, False, "inverted"]))
    return name, r, seed, prompt, n_new, eos, kw


def check_greedy(case, strategy, events=True):
    name, r, seed, prompt, n_new, eos, kw = case
    model = model_for(name, r, seed)
    want = generate(model, prompt, n_new, depth=kw["depth"], eos_token_id=eos)
    got = Decoder(model, strategy, **kw).generate(prompt, n_new, eos_token_id=eos)
    assert got.tokens == want, f"{strategy} {kw} on {name} R={r}: {got.tokens} != refdec {want}"
    s = got.stats
    assert s.from_first + s.from_second + s.from_restart == s.tokens == len(want)
    if events:  # coverage, shown by --hypothesis-show-statistics
        event(f"rejections: {s.rejections > 0}; accepted: {s.accepted > 0}")
        event(f"second proposals won: {'some' if s.from_second else 'none'}")
        event(f"stopped by EOS: {len(want) < n_new}")
    return s


@given(cases("autoregressive"))
def test_autoregressive_greedy_equals_refdec(case):
    check_greedy(case, "autoregressive")


@given(cases("draft-verify"))
@example(
    (
        "tiny-raven",
        6,
        0,
        [1, 2, 3],
        7,
        None,
        {"depth": None, "rewind_depth": 3, "draft_depth": 2, "draft_ahead": 3},
    )
)
@example(
    (
        "tiny-raven-olmo",
        12,
        2,
        list(range(13)) + list(range(11)),
        8,
        5,  # a 24-token prompt
        {"depth": None, "rewind_depth": 12, "draft_depth": 3, "draft_ahead": 5},
    )
)
def test_draft_verify_greedy_equals_refdec(case):
    check_greedy(case, "draft-verify")


@given(cases("pipelined"))
@example(
    (
        "tiny-raven-llama",
        4,
        0,
        [1, 2, 3, 4, 5],
        7,
        None,  # second proposals win here (promotion)
        {"depth": None, "rewind_depth": 2, "draft_depth": 1, "second_depth": 3, "gate": True},
    )
)
@example(
    (
        "tiny-ouro",
        12,
        1,
        [0],
        7,
        11,
        {"depth": 14, "rewind_depth": None, "draft_depth": 1, "second_depth": 13, "gate": False},
    )
)
def test_pipelined_greedy_equals_refdec(case):
    check_greedy(case, "pipelined")


def test_second_proposals_are_exercised():
    """The pinned pipelined example really promotes second proposals (else the test above is weak)."""
    s = check_greedy(
        (
            "tiny-raven-llama",
            4,
            0,
            [1, 2, 3, 4, 5],
            7,
            None,
            {"depth": None, "rewind_depth": 2, "draft_depth": 1, "second_depth": 3, "gate": True},
        ),
        "pipelined",
        events=False,
    )
    assert s.from_second > 0 and s.rejections > 0


@pytest.mark.parametrize("name", TINY_PRESETS + (TINY_LOOPCODER,))
@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(0.7, top_k=5, top_p=0.9)])
def test_autoregressive_sampling_equals_refdec(name, params):
    model = model_for(name, get_preset(name).recurrence, 0)
    prompt = [3, 1, 4, 1, 5]
    for seed in (0, 1):
        want = generate(model, prompt, 10, params, seed=seed)
        assert Decoder(model).generate(prompt, 10, params, seed=seed).tokens == want


@pytest.mark.parametrize("name", TINY_PRESETS + (TINY_LOOPCODER,))
def test_adaptive_verify_is_not_lossless(name):
    """The lossy strategy must be detectably lossy somewhere (certification relies on it)."""
    diffs = 0
    for seed in range(3):
        model = model_for(name, 8, seed)
        want = generate(model, [1, 2, 3], 8)
        dec = Decoder(model, "adaptive-verify", draft_depth=1, rewind_depth=2)
        assert not dec.lossless
        diffs += dec.generate([1, 2, 3], 8).tokens != want
    if name != "tiny-raven-llama":  # its random weights emit one token at every depth
        assert diffs > 0
