"""benchmarks/size_sweep.py: the sweep of widths keeps everything of Ouro-1.4B's shape but the
width (a lab tool, not installed; pyproject's pytest pythonpath has benchmarks/)."""

from __future__ import annotations

from size_sweep import SWEEP_WIDTHS, main, sweep_table


def test_sweep_keeps_everything_but_the_width():
    rows = sweep_table()
    assert [r["width"] for r in rows] == list(SWEEP_WIDTHS) and SWEEP_WIDTHS[-1] == 2048
    assert all(r["vocab"] == 49152 and r["layers"] == 24 and r["R"] == 4 for r in rows)
    assert [r["intermediate"] for r in rows] == [int(2.75 * w) for w in SWEEP_WIDTHS]
    sizes = [r["parameters"] for r in rows]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    # embeddings + head 2 V d, each layer 4 d^2 (attention) + 3 d (2.75 d) (MLP) + 4 norms, gate, final norm
    for r in rows:
        d = r["width"]
        assert r["parameters"] == 2 * 49152 * d + 24 * (4 * d * d + 3 * d * int(2.75 * d) + 4 * d) + d + d + 1


def test_the_list_prints_every_size_and_writes_nothing(tmp_path, capsys):
    assert main(["--list", "--width", "256"]) == 0
    assert "ouro-w256: d=256 layers=24" in capsys.readouterr().out and not any(tmp_path.iterdir())
    assert main(["--width", "100", "--list"]) == 2  # a bad width is named, not a traceback
