"""mlx-lm 0.32.2's Nanbeige (mlx_lm/models/nanbeige.py) against refdec, token for token (`tox -e mlx`;
docs/decoders.md, "Certify mlx-lm"): plain and speculative, both readout conventions, and the loop
count mlx-lm takes from loop_loss_weights (refdec holds such a list to num_loops - 1 entries)."""

from __future__ import annotations

import json

import pytest
import torch
from mlx_models import require_mlx
from nanbeige_models import DRAFT_NOISE, PROMPT, write_nanbeige

import refdec
from proofs.decoder_attributes import declared_sampler_order
from proofs.decoders.protocol import BatchDecoder
from refdec.sampling import FILTERS_FIRST, SamplingParams

pytestmark = pytest.mark.mlx
require_mlx()

from proofs.decoders.mlx_decoder import decoder_for  # noqa: E402 - after the skip

SHORT = (3, 1, 4)
N = 20
GREEDY = SamplingParams()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlx-nanbeige")
    return write_nanbeige(root / "model"), write_nanbeige(root / "draft", noise=DRAFT_NOISE)


@pytest.fixture(scope="module")
def model(folders):
    return refdec.load_model(folders[0], dtype=torch.float64)


@pytest.mark.parametrize("skip", [False, True], ids=["norm-each-loop", "norm-once"])
def test_plain_greedy_is_refdecs(tmp_path, skip):
    folder = write_nanbeige(tmp_path / "m", skip_loop_final_norm=skip)
    m = refdec.load_model(folder, dtype=torch.float64)
    dec = decoder_for("mlx-lm", m)
    assert dec.folder == folder.resolve() and declared_sampler_order(dec) == FILTERS_FIRST
    for p in (PROMPT, SHORT):
        assert dec.generate(p, N, GREEDY, 0) == refdec.generate(m, p, N), p


def test_a_preset_is_decoded_from_a_published_copy():
    preset = refdec.load_model("tiny-nanbeige", dtype=torch.float64)
    dec = decoder_for("mlx-lm", preset)
    assert dec.folder.parent.name.startswith("loopcert-mlx-")
    assert dec.generate(PROMPT, N, GREEDY, 0) == refdec.generate(preset, PROMPT, N)


@pytest.mark.parametrize(
    "sampling", [SamplingParams(1.0), SamplingParams(1.5, top_p=0.9, order=FILTERS_FIRST)]
)
def test_a_batch_is_each_seed_alone(model, sampling):
    """generate_batch copies the prefilled caches: Nanbeige has one per loop and layer (4 here)."""
    dec = decoder_for("mlx-lm", model)
    assert isinstance(dec, BatchDecoder)
    prompts = [PROMPT] * 3 + [SHORT] * 2
    seeds = list(range(200, 200 + len(prompts)))
    got = dec.generate_batch(prompts, 6, sampling, seeds)
    assert got == [dec.generate(p, 6, sampling, s) for p, s in zip(prompts, seeds)]
    assert len({tuple(t) for t in got[:3]}) > 1


@pytest.mark.parametrize("spec", ["mlx-lm:draft=self,num_draft=3", "mlx-lm:draft={draft},num_draft=3"])
def test_speculative_greedy_is_refdecs(folders, model, spec):
    dec = decoder_for(spec.format(draft=folders[1]), model)
    for p in (PROMPT, SHORT):
        assert dec.generate(p, N, GREEDY, 0) == refdec.generate(model, p, N), p
    if "self" in spec:
        assert dec.stats.acceptance_rate == 1.0
    else:
        assert 0.1 < dec.stats.acceptance_rate < 1.0, dec.stats  # some drafts accepted, some not


def _with_weights(src, folder, weights):
    folder.mkdir()
    for f in src.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(raw | {"loop_loss_weights": weights}))
    return folder


def test_loop_loss_weights_set_mlx_lms_loop_count(folders, model, tmp_path):
    """mlx-lm runs len(loop_loss_weights) + 1 loops. One weight (num_loops - 1) agrees with
    num_loops = 2, refdec's and llama.cpp's count; two weights make mlx-lm run 3 loops (refdec's
    depth 3) although num_loops says 2, which is why refdec refuses such a folder by name."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlx_lm.sample_utils import make_sampler
    from mlx_lm.utils import load_model

    one = _with_weights(folders[0], tmp_path / "one", [0.5])
    m = refdec.load_model(one, dtype=torch.float64)
    assert m.cfg.recurrence == 2
    assert decoder_for("mlx-lm", m).generate(PROMPT, N, GREEDY, 0) == refdec.generate(model, PROMPT, N)
    two = _with_weights(folders[0], tmp_path / "two", [0.5, 0.5])
    with pytest.raises(refdec.LoopcertError, match="mlx-lm\\) would run 3 loops"):
        refdec.load_model(two)
    steps = generate_step(
        mx.array(PROMPT, dtype=mx.uint32), load_model(two)[0], max_tokens=N, sampler=make_sampler(0.0)
    )
    got = [int(t) for t, _ in steps]
    assert got == refdec.generate(model, PROMPT, N, depth=3) != refdec.generate(model, PROMPT, N)


def test_a_config_override_changes_what_mlx_computes(model):
    """The negative control's lever: the same weights run one loop."""
    wrong = decoder_for("mlx-lm:config.num_loops=1", model)
    assert wrong.generate(PROMPT, N, GREEDY, 0) != refdec.generate(model, PROMPT, N)
