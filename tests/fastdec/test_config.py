"""fastdec.DecodeConfig: validation naming the field, the one label format, the one default
draft depth, and the Decoder built from a config equal to the Decoder built from keywords."""

import re

import pytest

from fastdec import DecodeConfig, Decoder, default_draft_depth
from refdec import LoopcertError, LoopedLM, SamplingParams
from refdec.config import get_preset


def test_labels():
    assert DecodeConfig("autoregressive").label == "autoregressive"
    assert DecodeConfig("pipelined", draft_depth=2, second_depth=8).label == "pipelined d1=2 d2=8"
    assert DecodeConfig("draft-verify", draft_depth=4).label == "draft-verify d1=4 k=4"
    adaptive = DecodeConfig("adaptive-verify", draft_depth=2, rewind_depth=8)
    assert adaptive.label == "adaptive-verify d1=2 k=4 V=8"
    assert (
        DecodeConfig("pipelined", draft_depth=2, second_depth=8, gate="inverted").label
        == "pipelined d1=2 d2=8 gate=inverted"
    )
    assert DecodeConfig("pipelined", draft_depth=2, gate=False).label == "pipelined d1=2 gate=off"
    unfiltered = DecodeConfig("pipelined", draft_depth=1, draft_filter=False)
    assert unfiltered.label == "pipelined d1=1 unfiltered draft"
    assert DecodeConfig("pipelined", draft_depth=16, rewind_depth=31).label == "pipelined d1=16 rewind=31"
    assert DecodeConfig("draft-verify", depth=9, draft_depth=3).label == "draft-verify d1=3 k=4 R=9"
    labels = {
        DecodeConfig("pipelined", draft_depth=a, second_depth=b).label for a in (1, 2) for b in (None, 4)
    }
    assert len(labels) == 4


def test_one_default_draft_depth():
    assert [default_draft_depth(r) for r in (2, 4, 8, 24, 32, 64)] == [1, 1, 1, 2, 2, 4]
    assert DecodeConfig("pipelined").resolve(32) == DecodeConfig("pipelined", depth=32, draft_depth=2)
    assert DecodeConfig("autoregressive").resolve(32).draft_depth is None  # autoregressive drafts nothing
    assert DecodeConfig("draft-verify", depth=48).resolve(32).draft_depth == 3  # from the target depth


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"strategy": "fast"}, "'fast'"),
        ({"draft_depth": 0}, "draft_depth must be an integer >= 1, got 0"),
        ({"strategy": "pipelined", "depth": 4, "draft_depth": 4}, "draft_depth=4 must be < depth=4"),
        ({"strategy": "draft-verify", "second_depth": 3}, "second_depth=3 applies to strategy 'pipelined'"),
        ({"strategy": "pipelined", "draft_depth": 3, "second_depth": 3}, "second_depth=3 must satisfy"),
        ({"gate": "maybe"}, "'maybe'"),
        ({"draft_ahead": True}, "draft_ahead must be an integer >= 1, got True"),
        ({"depth": 4, "rewind_depth": 5}, "rewind_depth=5"),
        ({"telemetry_depths": 3}, "telemetry_depths"),
        ({"depth": 4, "telemetry_depths": (9,)}, "telemetry_depths=(9,)"),
        ({"strategy": "adaptive-verify", "depth": 4, "draft_depth": 2}, "verify depth 4"),
        ({"draft_filter": "yes"}, "draft_filter"),
    ],
)
def test_bad_fields_name_the_field(kw, match):
    with pytest.raises(LoopcertError, match=re.escape(match)):
        DecodeConfig(**kw)


def test_a_config_is_frozen_and_resolving_validates_against_the_model():
    c = DecodeConfig("pipelined", draft_depth=6)
    with pytest.raises(AttributeError):
        c.depth = 3
    with pytest.raises(LoopcertError, match="draft_depth=6 must be < depth=4"):
        c.resolve(4)


def test_decoder_from_config_equals_decoder_from_keywords():
    model = LoopedLM(get_preset("tiny-raven")).init_weights(1)
    cfg = DecodeConfig("pipelined", draft_depth=1, second_depth=2)
    a = Decoder(model, cfg)
    b = Decoder(model, "pipelined", draft_depth=1, second_depth=2)
    assert a.config == b.config and a.label == cfg.label
    sp = SamplingParams(temperature=1.0)
    assert a.generate([1, 2, 3], 8, sp, seed=2).tokens == b.generate([1, 2, 3], 8, sp, seed=2).tokens
    with pytest.raises(LoopcertError, match="not both"):
        Decoder(model, cfg, draft_depth=2)
    with pytest.raises(LoopcertError, match="unexpected keyword"):
        Decoder(model, "pipelined", draft_dpeth=2)
