"""proofs/boundaries.py: where boundaries come from, and what crosses them."""

import pytest

import fastdec
import refdec
from proofs import boundaries as bd
from refdec.errors import LoopcertError


class Declares:
    def __init__(self, boundaries=None, widths=None):
        self.boundaries = boundaries
        if widths is not None:
            self.speculation_widths = widths


def test_model_windows_lengths_and_ladder():
    cfg = refdec.get_preset("tiny-loopcoder")  # window 8, max_seq_len 128
    got = bd.collect(cfg, None, 64, raw_config={"sliding_window": 32, "max_position_embeddings": 100})
    by_source = {(b.position, b.source) for b in got}
    assert (8, "model") in by_source and (32, "model") in by_source and (100, "model") in by_source
    assert (126, "model") in by_source  # max_seq_len - 2: a generation reaching the end crosses it
    assert [b.position for b in got if b.source == "ladder"] == [2, 4, 8, 16, 32, 64]
    assert all(not b.declared for b in got if b.source == "ladder")


def test_decoder_declarations_and_speculation_width():
    cfg = refdec.get_preset("tiny-ouro")
    got = bd.collect(cfg, Declares([5, (40, "page edge")], widths=[3]), 8)
    assert bd.Boundary(5, "decoder", "declared by the decoder") in got
    assert bd.Boundary(40, "decoder", "page edge") in got
    assert bd.Boundary(4, "speculation", "a prompt of 4 tokens (speculation width 3)") in got
    # past the model's length: dropped (no sequence reaches it)
    assert not [b for b in bd.collect(cfg, Declares([500]), 8) if b.position == 500]


@pytest.mark.parametrize("bad", ["64", [0], [(3, 4)], 7])
def test_bad_declarations_are_named(bad):
    with pytest.raises(LoopcertError, match="boundaries"):
        bd.declared_pairs(Declares(bad))


def test_fastdec_declares_widths_and_capacities():
    m = refdec.LoopedLM(refdec.get_preset("tiny-ouro"))
    dec = fastdec.Decoder(m, "draft-verify", draft_ahead=3)
    got = bd.collect(m.cfg, dec, 64)
    assert bd.Boundary(64, "decoder", "cache capacity 64 filled (next engine)") in got
    assert bd.Boundary(4, "speculation", "a prompt of 4 tokens (speculation width 3)") in got


def test_crossing():
    b = bd.Boundary(64, "model", "w")
    assert bd.crossing(b, 63, 3) == "generation"  # tokens at 63, 64, 65
    assert bd.crossing(b, 63, 2) is None  # tokens at 63, 64: not past it
    assert bd.crossing(b, 65, 1) == "prefill"
    assert bd.crossing(b, 64, 5) is None  # starts at the boundary: neither side before it
    k = bd.Boundary(5, "speculation", "k=4")
    assert bd.crossing(k, 5, 3) == "prompt" and bd.crossing(k, 4, 10) is None


def test_server_boundaries_from_the_http_flag():
    from loopcert.commands.common import parse_boundaries
    from proofs.decoders.http_decoder import HTTPOptions

    assert parse_boundaries("512, 16,16") == (16, 512) and parse_boundaries(None) == ()
    with pytest.raises(LoopcertError, match="'x' is not a position"):
        parse_boundaries("16,x")
    with pytest.raises(LoopcertError, match="--boundaries"):
        HTTPOptions(boundaries=(0,))

    class Served:
        server_boundaries = (16, 48)

    got = bd.collect(refdec.get_preset("tiny-ouro"), Served(), 8)
    assert [(b.position, b.source) for b in got if b.source == "server"] == [(16, "server"), (48, "server")]
    assert all(b.declared for b in got if b.source == "server")
