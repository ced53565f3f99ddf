"""proofs/checks/seed_invariance.py: fastdec's batch rows keep their seeds whatever sits beside them,
in every lossless strategy and under the engines' parameters; one stream per batch fails."""

import pytest
import torch

import refdec
from fastdec import Decoder
from proofs.checks.seed_invariance import SharedStream, check_seed_invariance
from refdec.config import TINY_PRESETS, get_preset
from refdec.model import LoopedLM
from refdec.sampling import SamplingParams

MODEL = LoopedLM(get_preset(TINY_PRESETS[1])).init_weights(0).to(torch.float64).eval()
PROMPT = [3, 1, 4, 1, 5]
NEIGHBOURS = [[2, 7, 1], [8, 2, 8, 1, 8, 2], [9], [6, 6, 6, 6]]
T1 = SamplingParams(1.0)
PENALISED = SamplingParams(1.0, repetition_penalty=1.5, presence_penalty=0.5, top_k=8, stop_token_ids=[6])


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"strategy": "draft-verify", "draft_depth": 1},
        {"strategy": "pipelined", "draft_depth": 1, "second_depth": 3},
    ],
)
@pytest.mark.parametrize("sampling", [T1, PENALISED], ids=["T=1", "penalties"])
def test_fastdec_rows_keep_their_seeds(kw, sampling):
    dec = Decoder(MODEL, **kw)
    r = check_seed_invariance("seed_invariance", dec, "fastdec", PROMPT, NEIGHBOURS, 6, sampling, range(3))
    assert r.passed, r.details.differences
    assert r.details.runs[0].seeds == 9 and r.details.seed_sensitive


def test_one_stream_per_batch_fails():
    """Negative control: alone it is refdec; beside others its rows share one stream."""
    dec = SharedStream(MODEL)
    assert dec.generate(PROMPT, 6, T1, seed=3) == refdec.generate(MODEL, PROMPT, 6, T1, seed=3)
    r = check_seed_invariance("seed_invariance", dec, "shared stream", PROMPT, NEIGHBOURS, 6, T1, range(4))
    assert not r.passed and r.measured >= 8


def test_no_seed_sensitivity_is_no_power():
    r = check_seed_invariance(
        "seed_invariance", Decoder(MODEL), "fastdec", PROMPT, NEIGHBOURS, 4, SamplingParams(), range(3)
    )
    assert not r.passed and "no power" in r.error
