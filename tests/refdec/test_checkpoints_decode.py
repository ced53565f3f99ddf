"""Every published layout loads and decodes in fastdec and refdec alike."""

import pytest
import torch

import refdec
from fastdec import Decoder
from refdec.checkpoint_config import default_layout
from refdec.checkpoints import write_published
from refdec.config import TINY_LOOPCODER, TINY_NANBEIGE, TINY_PRESETS
from refdec.sampling import SamplingParams

SETTINGS = [
    dict(strategy="autoregressive"),
    dict(strategy="draft-verify", draft_depth=1, draft_ahead=3),
    dict(strategy="pipelined", draft_depth=1, second_depth=2),
    dict(strategy="pipelined", draft_depth=2, gate=False, rewind_depth=3),
]


@pytest.fixture(scope="module", params=TINY_PRESETS + (TINY_LOOPCODER, TINY_NANBEIGE))
def published(request, tmp_path_factory):
    """A tiny model written in its published layout and read back (float64)."""
    model = refdec.load_model(request.param, seed=2)
    folder = tmp_path_factory.mktemp(request.param)
    write_published(model, folder, default_layout(model.cfg))
    return refdec.load_model(folder, dtype=torch.float64)


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "-".join(map(str, s.values())))
def test_fastdec_equals_refdec_on_a_published_checkpoint(published, settings):
    prompt = [3, 1, 4, 1, 5]
    depth = max(published.cfg.recurrence, 4)  # LoopCoder's and Nanbeige's R = 2 hold no d2: 4 loops
    want = refdec.generate(published, prompt, 10, depth=depth)
    got = Decoder(published, dtype=torch.float64, depth=depth, **settings).generate(prompt, 10)
    assert got.tokens == want


def test_sampling_baseline_equals_refdec_on_a_published_checkpoint(published):
    sp = SamplingParams(temperature=1.0, top_p=0.9)
    want = refdec.generate(published, [2, 7], 10, sp, seed=5)
    got = Decoder(published, dtype=torch.float64).generate([2, 7], 10, sp, seed=5)
    assert got.tokens == want
