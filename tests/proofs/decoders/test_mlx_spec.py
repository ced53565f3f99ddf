"""--decoder mlx-lm[:...]: the spec, the sampler mapping, the draft counts and the missing-extra
message. None of these needs mlx (tests/proofs/engines/test_mlx_*.py run mlx-lm itself)."""

from __future__ import annotations

import sys

import pytest

import refdec
from proofs.decoders.candidates import user_candidate
from proofs.decoders.mlx_decoder import DraftStats, import_mlx, sampler_args
from proofs.decoders.mlx_spec import DEFAULT_NUM_DRAFT, is_mlx_spec, parse_mlx_spec
from refdec.errors import LoopcertError
from refdec.sampling import FILTERS_FIRST, SamplingParams


@pytest.fixture
def draft_dir(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    return tmp_path


def test_plain_and_speculative_specs(draft_dir):
    assert parse_mlx_spec("mlx-lm").speculative is False
    s = parse_mlx_spec(f"mlx-lm:draft={draft_dir},num_draft=3,config.loop_window_size=4")
    assert (s.draft, s.num_draft, s.overrides) == (str(draft_dir), 3, {"loop_window_size": 4})
    assert parse_mlx_spec("mlx-lm:draft=self").num_draft == DEFAULT_NUM_DRAFT
    assert parse_mlx_spec("mlx-lm:config.rms_norm_eps=1e-3,config.tie_word_embeddings=true").overrides == {
        "rms_norm_eps": 1e-3,
        "tie_word_embeddings": True,
    }
    assert is_mlx_spec("mlx-lm") and is_mlx_spec("mlx-lm:draft=self")
    assert not is_mlx_spec("mlx-lmx:make") and not is_mlx_spec("mypkg:make") and not is_mlx_spec(None)


@pytest.mark.parametrize(
    "spec, named",
    [
        ("mlx-lm:", "nothing after"),
        ("mlx-lm:draft", "'draft' is not KEY=VALUE"),
        ("mlx-lm:draft=/no/such/folder", "draft='/no/such/folder' is not a model folder"),
        ("mlx-lm:draft=self,num_draft=0", "num_draft must be an integer >= 1, got '0'"),
        ("mlx-lm:draft=self,num_draft=two", "got 'two'"),
        ("mlx-lm:num_draft=3", "num_draft= needs draft="),
        ("mlx-lm:draft=self,draft=self", "draft= given twice"),
        ("mlx-lm:temperature=1", "unknown key 'temperature'"),
        (
            "mlx-lm:config.loop_num=two",
            "config.loop_num must be an integer, a number, true or false, got 'two'",
        ),
        ("mlx-lm:config.=1", "unknown key 'config.'"),
    ],
)
def test_bad_specs_are_named(spec, named):
    with pytest.raises(LoopcertError, match="--decoder") as e:
        parse_mlx_spec(spec)
    assert named in str(e.value) and repr(spec) in str(e.value)


def test_user_candidate_parses_an_mlx_spec_before_anything_loads():
    with pytest.raises(LoopcertError, match="unknown key 'tempo'"):
        user_candidate("mlx-lm:tempo=1")
    c = user_candidate("mlx-lm")  # builds nothing yet: no mlx needed
    assert c.label == "mlx-lm" and c.settings == {"decoder": "mlx-lm"} and not c.own_model


def test_sampler_args_map_refdec_to_make_sampler():
    V = 256
    assert sampler_args(SamplingParams(), V) == {"temp": 0.0}
    assert sampler_args(SamplingParams(0.7, top_k=4), V) == {"temp": 0.7, "top_k": 4, "top_p": 0.0}
    # top-k >= V and top-p = 1 are refdec's "no filter"; mlx-lm wants 0 for that (it refuses k >= V)
    assert sampler_args(SamplingParams(1.0, top_k=V), V) == {"temp": 1.0, "top_k": 0, "top_p": 0.0}
    fp = SamplingParams(1.5, top_p=0.9, order=FILTERS_FIRST)
    assert sampler_args(fp, V) == {"temp": 1.5, "top_k": 0, "top_p": 0.9}
    assert sampler_args(SamplingParams(1.0, top_p=1.0, order=FILTERS_FIRST), V)["top_p"] == 0.0


def test_a_top_p_law_of_the_other_convention_is_refused_by_name():
    with pytest.raises(
        LoopcertError, match="'temperature-first': mlx-lm's make_sampler samples filters-first"
    ):
        sampler_args(SamplingParams(1.5, top_p=0.9), 256)
    # where the conventions agree (no top-p), the order is not asked
    assert sampler_args(SamplingParams(0.7, top_k=4), 256)["top_k"] == 4


@pytest.mark.parametrize(
    "flags, num_draft, proposed, accepted",
    [
        ([False] * 4, 3, 9, 0),  # every draft rejected: min(left, 3) proposed per round: 3 + 3 + 2 + 1
        ([True, True, True, False, True, False], 3, 5, 4),  # all 3, then 1 of the 2 left
        ([True, True, True], 3, 3, 3),  # the run ends on accepted drafts: no target token after
        ([True, False, True], 2, 3, 2),  # last round drafts only the 1 token left
    ],
)
def test_draft_stats_read_mlx_lm_rounds(flags, num_draft, proposed, accepted):
    s = DraftStats()
    s.add(flags, num_draft)
    assert (s.proposed, s.accepted, s.tokens) == (proposed, accepted, len(flags))
    assert s.acceptance_rate == accepted / proposed


def test_a_missing_mlx_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlx", None)  # import mlx.core -> ImportError
    monkeypatch.setitem(sys.modules, "mlx.core", None)
    with pytest.raises(LoopcertError, match=r"needs mlx and mlx-lm .*pip install 'loopcert\[mlx\]'"):
        import_mlx()
    with pytest.raises(LoopcertError, match=r"loopcert\[mlx\]"):
        user_candidate("mlx-lm").build(refdec.load_model("tiny-loopcoder"))
