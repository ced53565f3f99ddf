"""Decoder settings, sampling params, cached tiny models, the drawn setup of a batch and a cache
poisoner that the batch tests share (tests/fastdec/test_batch.py, test_continuous.py)."""

import torch
from hypothesis import strategies as st

from fastdec import STRATEGIES, DecodeConfig
from refdec import LoopedLM, SamplingParams
from refdec.config import TINY_PRESETS, get_preset

CONFIGS = {
    "autoregressive": DecodeConfig("autoregressive"),
    "draft-verify": DecodeConfig("draft-verify", draft_depth=2, draft_ahead=3, rewind_depth=3),
    "pipelined": DecodeConfig("pipelined", draft_depth=1, second_depth=3),
    "adaptive-verify": DecodeConfig("adaptive-verify", draft_depth=1, rewind_depth=3),
}
SAMPLINGS = [SamplingParams(), SamplingParams(temperature=1.0), SamplingParams(0.8, top_k=4, top_p=0.9)]
_models: dict = {}


@st.composite
def setups(draw) -> tuple[str, int, str, int]:
    """(tiny preset, its vocabulary size, strategy, fixed width) for a drawn batch."""
    name = draw(st.sampled_from(TINY_PRESETS))
    strategy = draw(st.sampled_from(STRATEGIES))
    width = draw(st.sampled_from([8, 16]))
    return name, get_preset(name).vocab_size, strategy, width


def model_for(name="tiny-raven", recurrence=5, seed=3, dtype=torch.float32) -> LoopedLM:
    key = (name, recurrence, seed, dtype)
    if key not in _models:
        cfg = get_preset(name).replace(recurrence=recurrence)
        _models[key] = LoopedLM(cfg).init_weights(seed).to(dtype)
    return _models[key]


def same(a, b) -> bool:
    return (
        a.tokens == b.tokens
        and len(a.target_logits) == len(b.target_logits)
        and all(torch.equal(x, y) for x, y in zip(a.target_logits, b.target_logits))
    )


def poisoner(seed: int, hit_committed: bool = False):
    gen = torch.Generator().manual_seed(seed)

    def hook(engine, lanes, lengths):
        engine.poison(gen, 1e4, lanes, {} if hit_committed else lengths)

    return hook
