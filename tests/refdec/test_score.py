"""refdec.score: one teacher-forced forward gives what refdec.generate computes step by step."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tolerances import assert_close

import refdec
from refdec.config import TINY_LOOPCODER, TINY_PRESETS, get_preset
from refdec.errors import LoopcertError
from refdec.model import LoopedLM
from refdec.sampling import SamplingParams, transform
from refdec.score import continuation_laws, continuation_logits

ALL_TINY = TINY_PRESETS + (TINY_LOOPCODER,)
F64 = torch.float64
MODELS = {name: LoopedLM(get_preset(name)).init_weights(3).to(F64).eval() for name in ALL_TINY}


@pytest.mark.parametrize("name", ALL_TINY)
def test_greedy_argmax_is_the_reference_continuation(name):
    model = MODELS[name]
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, model.cfg.vocab_size, (21,), generator=g).tolist()  # past tiny windows
    tokens = refdec.generate(model, prompt, 14)
    logits = continuation_logits(model, prompt, tokens)
    assert logits.shape == (14, model.cfg.vocab_size)
    assert logits.argmax(-1).tolist() == tokens


@settings(max_examples=12, deadline=None)
@given(
    name=st.sampled_from(ALL_TINY),
    seed=st.integers(0, 2**16),
    p_len=st.integers(1, 20),
    n=st.integers(0, 12),
    depth=st.sampled_from([None, 1, 3]),
)
def test_each_row_is_the_uncached_forward_of_its_own_prefix(name, seed, p_len, n, depth):
    """Any continuation (not the model's own): row i is depth_logits of prompt + continuation[:i]."""
    model = MODELS[name]
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.cfg.vocab_size, (p_len + n,), generator=g).tolist()
    prompt, cont = ids[:p_len], ids[p_len:]
    r = model.cfg.recurrence if depth is None else depth
    got = continuation_logits(model, prompt, cont, depth)
    sampling = SamplingParams(temperature=0.9, top_k=7)
    laws = continuation_laws(model, prompt, cont, sampling, depth)
    assert got.shape == laws.shape == (n, model.cfg.vocab_size)
    for i in range(n):
        want = model.depth_logits(prompt + cont[:i], [r])[0, -1]
        assert_close(got[i], want)
        assert_close(laws[i], transform(want, sampling))


def test_bad_input_is_named():
    model = MODELS[TINY_PRESETS[0]]
    with pytest.raises(LoopcertError, match="non-empty prompt"):
        continuation_logits(model, [], [1])
    with pytest.raises(LoopcertError, match="outside the vocabulary"):
        continuation_logits(model, [1], [model.cfg.vocab_size])
    with pytest.raises(LoopcertError, match="exceeds max_seq_len"):
        continuation_logits(model, [1] * model.cfg.max_seq_len, [1])
