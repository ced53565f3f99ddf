"""fastdec's performance features change no result.

- the engine runs refdec's maths (refdec.model.Net) on the model's own tensors: no stale copies.
- reuse_prefill (benchmarks) equals a fresh prefill bit for bit; time_calls and telemetry
  depths only observe.
"""

import pytest
import torch

from fastdec import Decoder
from refdec import LoopedLM, SamplingParams
from refdec.config import get_preset
from refdec.errors import LoopcertError

PROMPT = [1, 2, 3, 4, 5, 6, 7]


def _model(name="tiny-raven", seed=3):
    return LoopedLM(get_preset(name)).init_weights(seed)


def test_the_engine_runs_on_the_models_own_tensors():
    """The engine's refdec.model.Net holds the parameters themselves, not copies: a weight
    changed in place after the decoder is built changes its tokens exactly as a fresh one's."""
    model = _model()
    dec = Decoder(model, "pipelined", draft_depth=1)
    before = dec.generate(PROMPT, 10, keep_logits=True)
    with torch.no_grad():
        model.core[0].attn.q_proj.weight.mul_(3.0)
        model.norm.weight.add_(0.5)
    after = dec.generate(PROMPT, 10, keep_logits=True)
    fresh = Decoder(model, "pipelined", draft_depth=1).generate(PROMPT, 10, keep_logits=True)
    assert not torch.equal(after.target_logits[0], before.target_logits[0])
    assert after.tokens == fresh.tokens
    assert all(torch.equal(a, b) for a, b in zip(after.target_logits, fresh.target_logits))


@pytest.mark.parametrize(
    "strategy, kw",
    [
        ("autoregressive", {}),
        ("pipelined", {"draft_depth": 1, "second_depth": 3}),
        ("draft-verify", {"draft_depth": 2, "draft_ahead": 3}),
    ],
)
def test_reuse_prefill_equals_a_fresh_prefill_bitwise(strategy, kw):
    """Decoding never writes below the prompt, so a prompt this engine just prefilled can be
    reused (benchmarks): the same tokens and logits, bit for bit; another prompt prefills anew."""
    model = _model()
    sampling = SamplingParams(temperature=1.0, top_k=8)
    want = Decoder(model, strategy, **kw).generate(PROMPT, 10, sampling, seed=4, keep_logits=True)
    dec = Decoder(model, strategy, **kw)
    dec.reuse_prefill = True
    first = dec.generate(PROMPT, 10, sampling, seed=4, keep_logits=True)
    again = dec.generate(PROMPT, 10, sampling, seed=4, keep_logits=True)
    assert first.stats.prefill_steps > 0 and again.stats.prefill_steps == 0
    for got in (first, again):
        assert got.tokens == want.tokens
        assert all(torch.equal(a, b) for a, b in zip(got.target_logits, want.target_logits))
    other = dec.generate(PROMPT[:-1] + [9], 10, sampling, seed=4)
    assert other.stats.prefill_steps > 0  # a different prompt is never served from the saved one
    assert dec.generate(PROMPT, 10, sampling, seed=4).stats.prefill_steps > 0


def test_time_calls_counts_every_call_and_outputs_are_normal_tensors():
    dec = Decoder(_model(), "pipelined", draft_depth=1, second_depth=3)
    dec.time_calls = True
    res = dec.generate(PROMPT, 12, keep_logits=True)
    s = res.stats
    assert {p: set(w) for p, w in s.calls.items()} == {p: set(w) for p, w in s.call_seconds.items()}
    assert all(secs[0] > 0 and secs[1] >= 0 for per in s.call_seconds.values() for secs in per.values())
    assert sum(s.calls["recur"].values()) == s.steps
    assert 0 < s.prefill_seconds < s.seconds and s.decode_tokens == s.tokens - 1
    res.target_logits[0].add_(1)  # the engine runs in inference mode; what it hands out is a normal tensor


def test_telemetry_depths_count_every_rejection_at_every_depth():
    model = _model()
    plain = Decoder(model, "pipelined", draft_depth=1).generate(PROMPT, 12)
    tele = Decoder(model, "pipelined", draft_depth=1, telemetry_depths=(2, 3, 6)).generate(PROMPT, 12)
    assert tele.tokens == plain.tokens  # telemetry only reads
    assert plain.stats.rejections > 0
    assert set(tele.stats.rewind_at) == {2, 3, 6}
    assert all(c == plain.stats.rejections and 0 <= h <= c for c, h in tele.stats.rewind_at.values())
    assert tele.stats.rewind_at[6][1] == plain.stats.rejections  # depth R always agrees with itself
    with pytest.raises(LoopcertError, match="telemetry_depths"):
        Decoder(model, "pipelined", draft_depth=1, telemetry_depths=(7,))
