"""`loopcert inspect` on LoopCoder: the family and the local attention window of a preset, a folder in
IQuest's published layout and one in loopcert's own; the other families show no window."""

from __future__ import annotations

from dataclasses import replace

import pytest

import refdec
from loopcert.cli import main as cli_main
from refdec import save_model
from refdec.checkpoints import write_published
from refdec.config import TINY_LOOPCODER


def inspect(capsys, model) -> dict[str, str]:
    """inspect's table: label -> value (labels padded to one width, then two spaces, then the value)."""
    assert cli_main(["inspect", str(model)]) == 0
    pairs = (line.split("  ", 1) for line in capsys.readouterr().out.splitlines())
    return {k.strip(): v.strip() for k, v in pairs}


def loopcoder(window: int) -> refdec.LoopedLM:
    cfg = replace(refdec.get_preset(TINY_LOOPCODER), loop_window_size=window, name="m")
    return refdec.LoopedLM(cfg).init_weights(1)


@pytest.mark.parametrize("where", ["preset", "published", "loopcert"])
def test_inspect_shows_loopcoders_family_and_window(tmp_path, capsys, where):
    if where == "preset":
        model, window = TINY_LOOPCODER, 8
    elif where == "published":
        model, window = write_published(loopcoder(5), tmp_path / "iquest"), 5
    else:
        model, window = tmp_path / "own", 6
        save_model(loopcoder(window), model)
    got = inspect(capsys, model)
    assert got["family / block"] == "loopcoder / prenorm"
    assert got["loop window"] == f"{window} (pass >= 2: own keys at t-{window - 1}..t, pass 1's at <= t)"
    assert got["initial state"] == "the embeddings"  # h(0) = e; the init_state field is unused
    if where == "published":
        assert got["recognised as"] == "iquestloopcoder"


@pytest.mark.parametrize("name", ["tiny-raven", "tiny-ouro"])
def test_other_families_have_no_window(capsys, name):
    got = inspect(capsys, name)
    assert "loop window" not in got and got["family / block"].startswith(refdec.get_preset(name).family)
    want = refdec.get_preset(name).init_state if name == "tiny-raven" else "the embeddings"
    assert got["initial state"] == want
