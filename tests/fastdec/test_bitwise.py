"""Bitwise checks in float32 (docs/design.md section 5).

- Fixed-width mode: every lossless strategy equals the engine's autoregressive baseline bit for
  bit, tokens and the logits each token was decided on.
- Cache INVARIANT: poisoning every slot no live lane or committed position owns with large
  random garbage before every step changes no bit; poisoning a committed slot does (control).
- Rollback: re-decoding after rejections (inside every speculative run) and reusing a cache
  whose contents are a previous run's equal a fresh decoder.
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fastdec import WIDTHS, Decoder
from refdec import LoopedLM, SamplingParams
from refdec.config import TINY_PRESETS, get_preset

PROMPT = [1, 2, 3, 4, 5, 6, 7]
N_NEW = 10
LOSSLESS_SETTINGS = [
    ("draft-verify", {"draft_depth": 2, "draft_ahead": 3, "rewind_depth": 3}),
    ("pipelined", {"draft_depth": 1}),
    ("pipelined", {"draft_depth": 1, "second_depth": 2, "rewind_depth": 2}),
    ("pipelined", {"draft_depth": 2, "second_depth": 3, "gate": False}),
    ("pipelined", {"draft_depth": 1, "second_depth": 3, "gate": "inverted"}),
]


def model32(name, recurrence=None, seed=3):
    cfg = get_preset(name)
    return LoopedLM(cfg.replace(recurrence=recurrence or cfg.recurrence)).init_weights(seed)


def same(a, b) -> bool:
    return (
        a.tokens == b.tokens
        and len(a.target_logits) == len(b.target_logits)
        and all(torch.equal(x, y) for x, y in zip(a.target_logits, b.target_logits))
    )


@pytest.mark.parametrize("name", TINY_PRESETS)
@pytest.mark.parametrize("width", [4, 16])
def test_fixed_width_strategies_equal_baseline_bitwise(name, width):
    model = model32(name)
    base = Decoder(model, fixed_width=width).generate(PROMPT, N_NEW, keep_logits=True)
    promoted = rejected = 0
    for strategy, kw in LOSSLESS_SETTINGS:
        got = Decoder(model, strategy, fixed_width=width, **kw).generate(PROMPT, N_NEW, keep_logits=True)
        assert same(got, base), f"{strategy} {kw} width {width}: {got.tokens} vs baseline {base.tokens}"
        promoted += got.stats.from_second
        rejected += got.stats.rejections
    assert rejected > 0  # rollbacks happened
    if name != "tiny-raven":  # these weights never let a second proposal win
        assert promoted > 0


@pytest.mark.parametrize("name", ["tiny-raven", "tiny-ouro"])
def test_fast_mode_is_not_bitwise_so_the_check_can_fail(name):
    """Without fixed width the rows see other matmul widths: the logits differ in the last
    bits. If this ever passes the fixed-width test above proves nothing about padding."""
    model = model32(name)
    base = Decoder(model).generate(PROMPT, N_NEW, keep_logits=True)
    got = Decoder(model, "pipelined", draft_depth=1, second_depth=2).generate(PROMPT, N_NEW, keep_logits=True)
    assert not same(got, base)
    assert got.tokens == base.tokens  # ... but not by enough to flip a token here


def poisoner(seed: int, scale: float = 1e4, hit_committed: bool = False):
    gen = torch.Generator().manual_seed(seed)

    def hook(engine, lanes, lengths):
        if hit_committed:  # negative control: pretend nothing is committed
            engine.poison(gen, scale, [], {})
        else:
            engine.poison(gen, scale, lanes, lengths)

    return hook


SAMPLING = SamplingParams(temperature=1.0, top_k=8)


@pytest.mark.parametrize("name", TINY_PRESETS)
@pytest.mark.parametrize(
    "strategy, kw",
    [
        ("autoregressive", {}),
        ("draft-verify", {"draft_depth": 2, "draft_ahead": 4}),
        ("pipelined", {"draft_depth": 1, "second_depth": 3}),
        ("adaptive-verify", {"draft_depth": 1, "rewind_depth": 3}),
    ],
)
def test_garbage_in_freed_slots_changes_nothing(name, strategy, kw):
    model = model32(name, recurrence=5)
    for sampling in (SamplingParams(), SAMPLING):
        clean = Decoder(model, strategy, **kw)
        want = clean.generate(PROMPT, N_NEW, sampling, seed=2, keep_logits=True)
        dirty = Decoder(model, strategy, **kw)
        dirty._step_hook = poisoner(seed=5)
        got = dirty.generate(PROMPT, N_NEW, sampling, seed=2, keep_logits=True)
        assert same(got, want), f"{strategy} {kw} {sampling}: {got.tokens} vs {want.tokens}"


@pytest.mark.parametrize("name", ["tiny-raven", "tiny-ouro"])
def test_poisoning_committed_slots_is_detected(name):
    model = model32(name, recurrence=5)
    want = Decoder(model, "pipelined", draft_depth=1).generate(PROMPT, N_NEW, keep_logits=True)
    dec = Decoder(model, "pipelined", draft_depth=1)
    dec._step_hook = poisoner(seed=5, hit_committed=True)
    assert not same(dec.generate(PROMPT, N_NEW, keep_logits=True), want)


@pytest.mark.parametrize("strategy, kw", LOSSLESS_SETTINGS[:3])
def test_reused_cache_equals_fresh_decoder(strategy, kw):
    """A second generate() on the same decoder finds the first run's rows in every slot (the
    reset only moves `length`); it must equal a fresh decoder bit for bit."""
    model = model32("tiny-raven-olmo")
    dec = Decoder(model, strategy, fixed_width=8, **kw)
    dec.generate([5, 4, 3, 2, 1, 0, 9, 9, 9], 14, SAMPLING, seed=1)  # longer: stale rows everywhere
    got = dec.generate(PROMPT, N_NEW, SAMPLING, seed=7, keep_logits=True)
    want = Decoder(model, strategy, fixed_width=8, **kw).generate(
        PROMPT, N_NEW, SAMPLING, seed=7, keep_logits=True
    )
    assert same(got, want)


@pytest.mark.parametrize("name", TINY_PRESETS)
def test_gather_reads_equal_view_reads_bitwise(name):
    """reads="gather" is the path CUDA graphs capture; on CPU it must agree with the views."""
    model = model32(name)
    kw = {"draft_depth": 1, "second_depth": 2}
    a = Decoder(model, "pipelined", fixed_width=8, **kw).generate(
        PROMPT, N_NEW, SAMPLING, seed=3, keep_logits=True
    )
    b = Decoder(model, "pipelined", fixed_width=8, reads="gather", **kw).generate(
        PROMPT, N_NEW, SAMPLING, seed=3, keep_logits=True
    )
    assert same(a, b)


_models: dict = {}


def cached32(name, recurrence, seed):
    key = (name, recurrence, seed)
    if key not in _models:
        _models[key] = model32(name, recurrence, seed)
    return _models[key]


@st.composite
def bitwise_cases(draw):
    name = draw(st.sampled_from(TINY_PRESETS))
    r = draw(st.integers(2, 9))
    strategy = draw(st.sampled_from(["draft-verify", "pipelined"]))
    d1 = draw(st.integers(1, r - 1))
    kw = {"draft_depth": d1, "rewind_depth": draw(st.none() | st.integers(1, r))}
    if strategy == "draft-verify":
        kw["draft_ahead"] = draw(st.integers(1, 5))
    elif d1 + 1 < r:
        kw["second_depth"] = draw(st.none() | st.integers(d1 + 1, r - 1))
        kw["gate"] = draw(st.sampled_from([True, False, "inverted"]))
    prompt = draw(st.lists(st.integers(0, 12), min_size=1, max_size=12))
    return name, r, draw(st.integers(0, 2)), strategy, kw, prompt, draw(st.sampled_from([2, 4, 8]))


@given(bitwise_cases())
def test_fixed_width_bitwise_for_random_settings(case):
    """Greedy: tokens and logits equal the baseline's. The draws of a sampling run differ by
    strategy, so sampling is covered by the poisoning and determinism tests instead."""
    name, r, seed, strategy, kw, prompt, width = case
    model = cached32(name, r, seed)
    base = Decoder(model, fixed_width=width).generate(prompt, 8, keep_logits=True)
    got = Decoder(model, strategy, fixed_width=width, **kw).generate(prompt, 8, keep_logits=True)
    assert same(got, base), f"{strategy} {kw} W={width}: {got.tokens} vs {base.tokens}"


@pytest.mark.slow
@pytest.mark.parametrize("name", TINY_PRESETS)
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("recurrence", [3, 12])
def test_fixed_width_sweep(name, width, recurrence):
    model = model32(name, recurrence, seed=recurrence)
    prompt = list(range(13)) * 2
    base = Decoder(model, fixed_width=width).generate(prompt, 16, keep_logits=True)
    for strategy, kw in LOSSLESS_SETTINGS:
        kw = {**kw, "rewind_depth": None} if kw.get("rewind_depth", 0) > recurrence else kw
        if kw.get("second_depth", 0) >= recurrence:
            continue
        got = Decoder(model, strategy, fixed_width=width, **kw).generate(prompt, 16, keep_logits=True)
        assert same(got, base), f"{strategy} {kw}"
