"""The llama.cpp decoder against refdec, token for token (`tox -e llamacpp`; docs/decoders.md,
"Certify llama.cpp"): the GGUF conversion (both readout conventions, the loop count), seeds, the
speculative modes' statistics, and the levers of the negative control."""

from __future__ import annotations

import pytest
import torch
from llamacpp_models import require_llamacpp
from nanbeige_models import DRAFT_NOISE, PROMPT, write_nanbeige

import refdec
from proofs.decoder_attributes import declared_compute_dtype, declared_sampler_order
from proofs.decoders.protocol import NotApplicable
from refdec.sampling import FILTERS_FIRST, SamplingParams

pytestmark = pytest.mark.llamacpp
require_llamacpp()

from proofs.decoders.llamacpp_decoder import decoder_for  # noqa: E402 - after the skip

SHORT = (3, 1, 4)
N = 20
GREEDY = SamplingParams()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("llamacpp-nanbeige")
    return write_nanbeige(root / "model"), write_nanbeige(root / "draft", noise=DRAFT_NOISE)


@pytest.fixture(scope="module")
def model(folders):
    return refdec.load_model(folders[0], dtype=torch.float64)


@pytest.mark.parametrize("skip", [False, True], ids=["norm-each-loop", "norm-once"])
@pytest.mark.parametrize("kv", ["f16", "f32"])
def test_plain_greedy_is_refdecs(tmp_path, skip, kv):
    m = refdec.load_model(write_nanbeige(tmp_path / "m", skip_loop_final_norm=skip), dtype=torch.float64)
    dec = decoder_for(f"llama.cpp:kv={kv}", m)
    assert declared_sampler_order(dec) == FILTERS_FIRST
    assert declared_compute_dtype(dec) == {"f16": torch.float16, "f32": torch.float32}[kv]
    for p in (PROMPT, SHORT):
        assert dec.generate(p, N, GREEDY, 0) == refdec.generate(m, p, N), p


def test_more_loops_than_two_are_converted(tmp_path):
    """num_loops is read by llama.cpp from the GGUF: R = 3 decodes refdec's depth 3."""
    m = refdec.load_model(write_nanbeige(tmp_path / "m", recurrence=3), dtype=torch.float64)
    assert decoder_for("llama.cpp:kv=f32", m).generate(PROMPT, N, GREEDY, 0) == refdec.generate(m, PROMPT, N)


def test_other_families_are_declined():
    with pytest.raises(NotApplicable, match="tiny-ouro is ouro"):
        decoder_for("llama.cpp", refdec.load_model("tiny-ouro"))


def test_the_seed_decides_the_sample(model):
    dec = decoder_for("llama.cpp", model)
    sp = SamplingParams(1.0)
    runs = [dec.generate(PROMPT, 8, sp, s) for s in (5, 6, 5)]
    assert runs[0] == runs[2] and runs[0] != runs[1]
    assert len(runs[0]) == 8 and dec.generate(PROMPT, 0, sp, 5) == []


@pytest.mark.parametrize("override", ["config.num_loops=1", "config.skip_loop_final_norm=true"])
def test_a_config_override_changes_what_llamacpp_computes(model, override):
    """The negative control's levers: the same weights run one loop, or normed once."""
    wrong = decoder_for(f"llama.cpp:{override}", model)
    assert wrong.generate(PROMPT, N, GREEDY, 0) != refdec.generate(model, PROMPT, N)


def test_one_loop_gguf_is_refdecs_depth_one(model):
    """What draft_loops=1 drafts from: llama.cpp's one-loop file is refdec's depth-1 readout."""
    dec = decoder_for("llama.cpp:config.num_loops=1,kv=f32", model)
    assert dec.generate(PROMPT, N, GREEDY, 0) == refdec.generate(model, PROMPT, N, depth=1)


@pytest.mark.parametrize(
    "spec",
    ["llama.cpp:draft_loops=1", "llama.cpp:draft={draft},num_draft=3", "llama.cpp:ngram=simple,num_draft=4"],
)
def test_speculative_greedy_is_refdecs_and_drafting_happened(folders, model, spec):
    dec = decoder_for(spec.format(draft=folders[1]), model)
    for p in (PROMPT, SHORT, PROMPT * 2):
        assert dec.generate(p, N, GREEDY, 0) == refdec.generate(model, p, N), p
    s = dec.stats
    assert s.requests == 3 and s.tokens == 3 * N
    assert s.proposed > 0 and 0 < s.accepted < s.proposed, s  # drafts proposed, some accepted, some not


def test_speculative_sampling_keeps_the_seed(model):
    dec = decoder_for("llama.cpp:draft_loops=1", model)
    sp = SamplingParams(1.0)
    a, b = dec.generate(PROMPT, 12, sp, 3), dec.generate(PROMPT, 12, sp, 3)
    assert a == b and dec.stats.proposed > 0
