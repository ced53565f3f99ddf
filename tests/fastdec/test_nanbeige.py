"""fastdec's self-speculation on Nanbeige4.2 (docs/checkpoints.md, Nanbeige): drafts from fewer
loops (depth 1 = the normed state after loop 1 through the head), verified at R = num_loops.

R = 2 is the published num_loops; R = 4 (more loops of the same stack, as depth_logits defines
them) makes room for a second proposal (d1 < d2 < R). Both readout conventions run:
skip_loop_final_norm false (norm after every loop: the released checkpoints) and true (norm once).
"""

import pytest
import torch

from fastdec import Decoder
from refdec import LoopedLM, SamplingParams, generate
from refdec.config import TINY_NANBEIGE, get_preset
from refdec.tokenizer import byte_encode

PROMPT = byte_encode("a looped stack, twice over")
N_NEW = 12
SETTINGS = [  # (R, strategy, settings)
    (2, "autoregressive", {}),
    (2, "draft-verify", {"draft_depth": 1, "draft_ahead": 3}),
    (2, "pipelined", {"draft_depth": 1}),
    (4, "draft-verify", {"draft_depth": 2, "draft_ahead": 4}),
    (4, "pipelined", {"draft_depth": 1, "second_depth": 2}),
]
_models: dict = {}


def model(recurrence: int, skip: bool = False, dtype=torch.float64, seed: int = 1) -> LoopedLM:
    key = (recurrence, skip, dtype, seed)
    if key not in _models:
        cfg = get_preset(TINY_NANBEIGE).replace(recurrence=recurrence, skip_loop_final_norm=skip)
        _models[key] = LoopedLM(cfg).init_weights(seed).to(dtype)
    return _models[key]


@pytest.mark.parametrize("skip", [False, True], ids=["norm-each-loop", "norm-once"])
@pytest.mark.parametrize("r, strategy, kw", SETTINGS, ids=[f"R{r}-{s}-{kw}" for r, s, kw in SETTINGS])
def test_greedy_equals_refdec_token_for_token(r, strategy, kw, skip):
    m = model(r, skip)
    want = generate(m, PROMPT, N_NEW)
    got = Decoder(m, strategy, **kw).generate(PROMPT, N_NEW)
    assert got.tokens == want
    if strategy != "autoregressive":
        assert got.stats.rejections > 0  # drafts from fewer loops are wrong sometimes: rollbacks ran
        assert got.stats.accepted > 0  # and right sometimes


@pytest.mark.parametrize("skip", [False, True], ids=["norm-each-loop", "norm-once"])
@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(0.7, top_k=5, top_p=0.9)])
def test_sampling_equals_refdec(params, skip):
    """Seeded autoregressive sampling draws refdec.generate's tokens (the speculative strategies
    are exact in law, not per seed: certify judges them, docs/decoders.md)."""
    m = model(2, skip)
    for seed in (0, 1):
        want = generate(m, PROMPT, 10, params, seed=seed)
        assert Decoder(m).generate(PROMPT, 10, params, seed=seed).tokens == want


def test_the_readout_convention_is_caught():
    """Negative control: the same weights read out under the other skip_loop_final_norm decode
    other tokens, so the matches above pin the per-loop norm in the engine too."""
    m = model(2)
    want = generate(m, PROMPT, N_NEW)
    other = LoopedLM(m.cfg.replace(skip_loop_final_norm=True)).double()
    other.load_state_dict(m.state_dict())
    assert Decoder(other, "pipelined", draft_depth=1).generate(PROMPT, N_NEW).tokens != want
