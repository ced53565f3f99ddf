"""fastdec on LoopCoder (docs/design.md section 5, LoopReads): draft = pass 1, target = pass R.

Prompts run past the window (tiny-loopcoder: W = 8), so every pass >= 2 read crosses the window's
lower edge. R = 2 is the published loop_num; R = 4 (loopcert's extension: every pass >= 2 mixes with
pass 1) is what makes room for a second proposal (d1 < d2 < R) and so for side lanes.
"""

import pytest
import torch

from fastdec import Decoder
from refdec import LoopedLM, SamplingParams, generate
from refdec.config import TINY_LOOPCODER, get_preset

PROMPT = [(7 * i + 3) % 256 for i in range(20)]  # 20 tokens > W = 8
N_NEW = 12
SETTINGS = [  # (R, strategy, settings)
    (2, "autoregressive", {}),
    (2, "draft-verify", {"draft_depth": 1, "draft_ahead": 3}),
    (2, "pipelined", {"draft_depth": 1}),
    (4, "draft-verify", {"draft_depth": 2, "draft_ahead": 4}),
    (4, "pipelined", {"draft_depth": 1, "second_depth": 2}),
    (4, "pipelined", {"draft_depth": 1, "second_depth": 3, "gate": False}),
]
_models: dict = {}


def model(recurrence: int, dtype=torch.float64, seed: int = 1) -> LoopedLM:
    key = (recurrence, dtype, seed)
    if key not in _models:
        cfg = get_preset(TINY_LOOPCODER).replace(recurrence=recurrence)
        _models[key] = LoopedLM(cfg).init_weights(seed).to(dtype)
    return _models[key]


def same(a, b) -> bool:
    return a.tokens == b.tokens and all(torch.equal(x, y) for x, y in zip(a.target_logits, b.target_logits))


@pytest.mark.parametrize("r, strategy, kw", SETTINGS, ids=[f"R{r}-{s}-{kw}" for r, s, kw in SETTINGS])
def test_greedy_equals_refdec_token_for_token(r, strategy, kw):
    m = model(r)
    want = generate(m, PROMPT, N_NEW)
    got = Decoder(m, strategy, **kw).generate(PROMPT, N_NEW)
    assert got.tokens == want
    if strategy != "autoregressive":
        assert got.stats.rejections > 0  # drafts at pass 1 are wrong sometimes: rollbacks ran


def test_second_proposals_win_sometimes():
    """Side lanes (read level 0 through their side slot) are exercised, not only configured."""
    m = model(4)
    wins = 0
    for seed in range(3):
        want = generate(m, PROMPT, N_NEW, SamplingParams(temperature=1.0), seed=seed)
        got = Decoder(m, "pipelined", draft_depth=1, second_depth=2, gate=False).generate(
            PROMPT, N_NEW, SamplingParams(temperature=1.0), seed=seed
        )
        assert len(got.tokens) == len(want)
        wins += got.stats.from_second
    assert wins > 0


@pytest.mark.parametrize("width", [4, 16])
def test_fixed_width_strategies_equal_baseline_bitwise(width):
    for r in (2, 4):
        m = model(r, torch.float32)
        base = Decoder(m, fixed_width=width).generate(PROMPT, N_NEW, keep_logits=True)
        for rr, strategy, kw in SETTINGS[1:]:
            if rr == r:
                got = Decoder(m, strategy, fixed_width=width, **kw).generate(PROMPT, N_NEW, keep_logits=True)
                assert same(got, base), f"R={r} {strategy} {kw} width {width}"


def poisoner(seed: int, hit_committed: bool = False):
    gen = torch.Generator().manual_seed(seed)

    def hook(engine, lanes, lengths):
        engine.poison(gen, 1e4, [], {}) if hit_committed else engine.poison(gen, 1e4, lanes, lengths)

    return hook


@pytest.mark.parametrize("strategy, kw", [s[1:] for s in SETTINGS if s[0] == 4])
def test_garbage_in_freed_slots_changes_nothing(strategy, kw):
    """The pass-1 and windowed reads stay inside the slots the cache INVARIANT keeps."""
    m = model(4, torch.float32)
    for sampling in (SamplingParams(), SamplingParams(temperature=1.0, top_k=8)):
        want = Decoder(m, strategy, **kw).generate(PROMPT, N_NEW, sampling, seed=2, keep_logits=True)
        dirty = Decoder(m, strategy, **kw)
        dirty._step_hook = poisoner(5)
        assert same(dirty.generate(PROMPT, N_NEW, sampling, seed=2, keep_logits=True), want)


def test_poisoning_committed_slots_is_detected():
    m = model(2, torch.float32)
    want = Decoder(m, "pipelined", draft_depth=1).generate(PROMPT, N_NEW, keep_logits=True)
    dec = Decoder(m, "pipelined", draft_depth=1)
    dec._step_hook = poisoner(5, hit_committed=True)
    assert not same(dec.generate(PROMPT, N_NEW, keep_logits=True), want)


def test_gather_reads_equal_view_reads_bitwise():
    m = model(4, torch.float32)
    kw = {"draft_depth": 1, "second_depth": 2}
    sp = SamplingParams(temperature=1.0, top_k=8)
    a = Decoder(m, "pipelined", fixed_width=8, **kw).generate(PROMPT, N_NEW, sp, seed=3, keep_logits=True)
    b = Decoder(m, "pipelined", fixed_width=8, reads="gather", **kw).generate(
        PROMPT, N_NEW, sp, seed=3, keep_logits=True
    )
    assert same(a, b)


def test_a_window_off_by_one_would_be_caught():
    """Negative control: the engine's window is the model's; an engine reading W + 1 keys decodes
    other tokens than refdec, so the greedy match above pins the window bounds."""
    m = model(2)
    dec = Decoder(m, "pipelined", draft_depth=1)
    want = generate(m, PROMPT, N_NEW)
    assert dec.generate(PROMPT, N_NEW).tokens == want
    wide = LoopedLM(m.cfg.replace(loop_window_size=m.cfg.loop_window_size + 1)).double()
    wide.load_state_dict(m.state_dict())
    assert Decoder(wide, "pipelined", draft_depth=1).generate(PROMPT, N_NEW).tokens != want
