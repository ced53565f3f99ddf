"""The minimal KV-cached baseline agrees with refdec token for token in float64."""

import pytest
import torch

import refdec
from proofs.decoders.naive_kv import NaiveKVDecoder
from refdec.config import TINY_LOOPCODER, TINY_NANBEIGE, TINY_PRESETS
from refdec.sampling import SamplingParams

GREEDY = SamplingParams()


@pytest.mark.parametrize("name", TINY_PRESETS + (TINY_LOOPCODER, TINY_NANBEIGE))
@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(1.0, top_k=6, top_p=0.9)])
def test_matches_refdec_in_float64(name, sampling):
    m = refdec.load_model(name, seed=3, dtype=torch.float64)
    for prompt, depth in (([1, 2, 3, 4, 5], None), ([7], 2)):
        want = refdec.generate(m, prompt, 12, sampling, seed=9, depth=depth)
        assert NaiveKVDecoder(m, depth=depth).generate(prompt, 12, sampling, seed=9) == want


LONG = [(5 * i + 3) % 256 for i in range(19)]  # past tiny-loopcoder's window of 8 before decoding


@pytest.mark.parametrize("depth", [None, 1, 3])
def test_loopcoder_past_the_window_matches_refdec(depth):
    """A prefill longer than the window (its rows' windows cut inside the batch) and decoded rows
    whose windows slide past the prompt; depth 1 is pass 1 alone, depth 3 mixes pass 1 again."""
    m = refdec.load_model(TINY_LOOPCODER, seed=3, dtype=torch.float64)
    assert len(LONG) > 2 * m.cfg.loop_window_size
    for sampling in (GREEDY, SamplingParams(1.0)):
        want = refdec.generate(m, LONG, 10, sampling, seed=5, depth=depth)
        assert NaiveKVDecoder(m, depth=depth).generate(LONG, 10, sampling, seed=5) == want


def test_loopcoder_without_the_window_is_caught(monkeypatch):
    # negative control: pass 2 reading its own keys at every earlier row (no window) must disagree
    m = refdec.load_model(TINY_LOOPCODER, seed=3, dtype=torch.float64)
    from proofs.decoders import naive_kv

    orig = naive_kv._Timeline.attend_loop_at
    monkeypatch.setattr(
        naive_kv._Timeline,
        "attend_loop_at",
        lambda self, start, first, gate, window: orig(self, start, first, gate, m.cfg.max_seq_len),
    )
    sp = SamplingParams(1.0)
    assert NaiveKVDecoder(m).generate(LONG, 10, sp, seed=5) != refdec.generate(m, LONG, 10, sp, seed=5)


def test_eos_and_zero_tokens():
    m = refdec.load_model("tiny-raven", dtype=torch.float64)
    full = refdec.generate(m, [1, 2], 8)
    d = NaiveKVDecoder(m)
    assert d.generate([1, 2], 8, GREEDY, 0, eos_token_id=full[2]) == full[: full.index(full[2]) + 1]
    assert d.generate([1, 2], 0, GREEDY, 0) == []


def test_a_cache_bug_is_caught(monkeypatch):
    # negative control: a cache that zeroes the keys of decoded rows must disagree
    m = refdec.load_model("tiny-raven-llama", seed=1, dtype=torch.float64)
    d = NaiveKVDecoder(m)
    sp = SamplingParams(1.0)
    good = d.generate([1, 2, 3], 10, sp, seed=4)
    from proofs.decoders import naive_kv

    orig = naive_kv._Timeline.attend_at

    def stale(self, start):
        inner = orig(self, start)

        def attend(q, k, v):
            return inner(q, torch.zeros_like(k), v) if start > 3 else inner(q, k, v)

        return attend

    monkeypatch.setattr(naive_kv._Timeline, "attend_at", stale)
    assert d.generate([1, 2, 3], 10, sp, seed=4) != good
    monkeypatch.undo()
    assert good == refdec.generate(m, [1, 2, 3], 10, sp, seed=4)
