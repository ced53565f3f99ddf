"""The mlx-lm decoder against refdec, token for token (`tox -e mlx`; docs/decoders.md, "Certify mlx-lm").

tiny-loopcoder has a loop window of 8: PROMPT (16 tokens) is past it before the first new token,
SHORT (3 tokens) passes it while decoding, so both of mlx-lm's paths through its rotating window
cache (a prefill longer than the window, and the cache wrapping one token at a time) are compared.
The last test pins the finding of docs/measurements.md (mlx-lm): speculative decoding leaves
rejected draft tokens in the caches once the context reaches the loop window.
"""

from __future__ import annotations

import pytest
import torch
from mlx_models import DRAFT_NOISE, DRAFT_SEED, require_mlx, write_loopcoder

import refdec
from proofs.decoders.protocol import (
    BatchDecoder,
    NotApplicable,
    declared_compute_dtype,
    declared_sampler_order,
)
from refdec.sampling import FILTERS_FIRST, SamplingParams

pytestmark = pytest.mark.mlx
require_mlx()

from proofs.decoders.mlx_decoder import decoder_for, sampler_args  # noqa: E402 - after the skip

PROMPT = tuple(b"def main():\n    ")  # 16 tokens, window 8
SHORT = (3, 1, 4)
N = 20
GREEDY = SamplingParams()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlx-loopcoder")
    # the model; a near draft (its weights plus noise); a far draft (other weights: every draft rejected)
    return (
        write_loopcoder(root / "model"),
        write_loopcoder(root / "draft", noise=DRAFT_NOISE),
        write_loopcoder(root / "far", seed=DRAFT_SEED),
    )


@pytest.fixture(scope="module")
def model(folders):
    return refdec.load_model(folders[0], dtype=torch.float64)


def test_plain_greedy_is_refdecs_past_the_window(folders, model):
    dec = decoder_for("mlx-lm", model)
    assert dec.folder == folders[0].resolve()  # the folder refdec loaded, not a copy
    assert declared_sampler_order(dec) == FILTERS_FIRST
    assert declared_compute_dtype(dec) == torch.float32
    for p in (PROMPT, SHORT):
        assert dec.generate(p, N, GREEDY, 0) == refdec.generate(model, p, N), p


def test_a_preset_is_decoded_from_a_published_copy(model):
    preset = refdec.load_model("tiny-loopcoder", dtype=torch.float64)  # seed 0: the same weights
    dec = decoder_for("mlx-lm", preset)
    assert dec.folder.parent.name.startswith("loopcert-mlx-")
    assert dec.generate(PROMPT, N, GREEDY, 0) == refdec.generate(preset, PROMPT, N)


def test_other_families_are_declined():
    with pytest.raises(NotApplicable, match="tiny-ouro is ouro"):
        decoder_for("mlx-lm", refdec.load_model("tiny-ouro"))


def test_the_seed_decides_the_sample(model):
    dec = decoder_for("mlx-lm", model)
    sp = SamplingParams(1.0)
    runs = [dec.generate(PROMPT, 8, sp, s) for s in (5, 6, 5)]
    assert runs[0] == runs[2] and runs[0] != runs[1]
    assert len(runs[0]) == 8 and dec.generate(PROMPT, 0, sp, 5) == []


@pytest.mark.parametrize(
    "sampling", [SamplingParams(1.0), SamplingParams(1.5, top_p=0.9, order=FILTERS_FIRST)]
)
def test_a_batch_is_each_seed_alone(model, sampling):
    """generate_batch shares each prompt's prefill: the tokens must be generate()'s, seed by seed,
    for prompts past the window, short ones, a one-token one, mixed in one call."""
    dec = decoder_for("mlx-lm", model)
    assert isinstance(dec, BatchDecoder)
    prompts = [PROMPT] * 4 + [SHORT] * 3 + [(7,)] * 2 + [PROMPT]
    seeds = list(range(100, 100 + len(prompts)))
    got = dec.generate_batch(prompts, 6, sampling, seeds)
    assert got == [dec.generate(p, 6, sampling, s) for p, s in zip(prompts, seeds)]
    assert len({tuple(t) for t in got[:4]}) > 1  # the seeds differ, so do the samples


def test_speculative_decoding_is_not_batched(model):
    assert not isinstance(decoder_for("mlx-lm:draft=self", model), BatchDecoder)


def test_a_config_override_changes_what_mlx_computes(model):
    """The negative control's lever: the same weights with a loop window of 4."""
    wrong = decoder_for("mlx-lm:config.loop_window_size=4", model)
    assert wrong.generate(PROMPT, N, GREEDY, 0) != refdec.generate(model, PROMPT, N)


def test_the_near_draft_is_accepted_about_half_the_time(folders, model):
    """What makes the certify row's draft informative: both accepted and rejected drafts."""
    dec = decoder_for(f"mlx-lm:draft={folders[1]},num_draft=3", model)
    for p in (PROMPT, SHORT):
        dec.generate(p, N, GREEDY, 0)
    assert 0.2 < dec.stats.acceptance_rate < 0.9, dec.stats


def test_speculative_self_draft_greedy_is_refdecs(model):
    dec = decoder_for("mlx-lm:draft=self,num_draft=3", model)
    for p in (PROMPT, SHORT):
        assert dec.generate(p, N, GREEDY, 0) == refdec.generate(model, p, N), p
    assert dec.stats.acceptance_rate == 1.0  # greedy drafts of the model itself: none rejected


def test_finding_rejected_drafts_stay_in_the_cache_once_the_window_is_reached(folders, model, monkeypatch):
    """mlx-lm 0.32.2's speculative_generate_step rewinds its caches with trim_prompt_cache, which
    trims nothing unless every layer's cache is trimmable; a RotatingKVCache (the loop window's
    keys) is trimmable only while offset < max_size. Once the context reaches the window, the
    rejected drafts' keys stay in the global and the window caches, and the next token is computed
    with them in context. Greedy, other weights as the draft (every draft rejected): every rejection
    before the window is rewound (tokens equal refdec's), the first one after it is not, and the
    tokens leave refdec's there. When mlx-lm fixes this, the last assertion fails: update the finding."""
    import importlib

    import mlx.core as mx
    from mlx_lm.sample_utils import make_sampler
    from mlx_lm.utils import load_model

    mlx_generate = importlib.import_module("mlx_lm.generate")  # the package binds `generate` to a function
    target, draft = (load_model(f)[0] for f in (folders[0], folders[2]))
    trims = []  # (tokens yielded so far, tokens asked to trim, tokens trimmed) of the target's cache
    real = mlx_generate.trim_prompt_cache
    out: list[int] = []
    first: list[int] = []  # id of the first cache rewound: the target's (_rewind_cache trims it first)

    def spy(cache, n):
        got = real(cache, n)
        first[:] = first or [id(cache)]
        if id(cache) == first[0]:
            trims.append((len(out), n, got))
        return got

    monkeypatch.setattr(mlx_generate, "trim_prompt_cache", spy)
    steps = mlx_generate.speculative_generate_step(
        mx.array(SHORT, dtype=mx.uint32),
        target,
        draft,
        num_draft_tokens=3,
        max_tokens=N,
        sampler=make_sampler(**sampler_args(GREEDY, 256)),
    )
    for tok, _, _ in steps:
        out.append(int(tok))
    ref = refdec.generate(model, SHORT, N)
    lost = [at for at, asked, got in trims if asked > 0 and got == 0]
    rewound = [at for at, asked, got in trims if asked > 0 and got == asked]
    assert rewound and lost, trims
    first_lost = lost[0]
    assert all(at < first_lost for at in rewound)  # rewinds work until the window is reached
    assert out[:first_lost] == ref[:first_lost]
    assert out != ref
    diverged = next(i for i, (a, b) in enumerate(zip(out, ref)) if a != b)
    assert diverged >= first_lost, (diverged, first_lost, trims)
