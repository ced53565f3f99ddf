"""benchmarks/scale_report.py (a lab tool, not installed): the growth exponent, the parts a
certificate's checks fall into (proofs/cost/parts.py's groups), and the layer extrapolation of a
shape too large to run whole."""

from __future__ import annotations

import json

import pytest
from scale_report import LAYERS, PARTS, extrapolated, fit, macs_per_position, part_of

from refdec.errors import LoopcertError


def test_fit_recovers_a_power_law():
    xs = [1e7, 4e7, 1.6e8, 6.4e8]
    assert fit(xs, [3.0 * x**1.25 for x in xs]) == pytest.approx(1.25)
    assert fit(xs, [5.0] * 4) == pytest.approx(0.0)
    assert fit([1e7], [1.0]) is None  # one point: no exponent
    assert fit([1e7, 2e7], [0.0, 1.0]) is None  # a zero time is not on a log scale


@pytest.mark.parametrize(
    "check, part",
    [
        ("greedy_float64", "greedy"),
        ("greedy_float32", "greedy"),
        ("sampling[/x/ouro-w256: autoregressive]", "sampling"),
        ("theorem1_traces", "theorems"),
        ("theorem2_published", "theorems"),
        ("mutation", "mutants"),
        ("speed", "speed"),
    ],
)
def test_every_check_has_its_part(check, part):
    assert part_of(check) == part and part in PARTS


def test_layer_extrapolation_scales_by_the_multiply_adds(tmp_path):
    """Each cut's time times macs(24 layers) / macs(its layers); the two estimates' geometric mean."""
    f1 = macs_per_position(2048, LAYERS) / macs_per_position(2048, 1)
    f2 = macs_per_position(2048, LAYERS) / macs_per_position(2048, 2)
    assert 8 < f1 < 9 and 6 < f2 < 7  # the 49k-token head is 100M of the 1.3G multiply-adds
    for n, greedy in {1: 100.0, 2: 150.0}.items():
        parts = {
            "load": {"seconds": 10.0 * n, "peak_rss": 1, "load1": 1.0},
            "greedy": {"seconds": greedy},
            "reference": {"seconds": 3.0 * n, "per_token": 1.0 * n},
        }
        (tmp_path / f"parts-ouro-w2048-l{n}.json").write_text(json.dumps({"parts": parts}))
    e = extrapolated(tmp_path, "ouro-w2048")
    assert e["greedy"]["from_l1"] == pytest.approx(100.0 * f1)
    assert e["greedy"]["from_l2"] == pytest.approx(150.0 * f2)
    assert e["greedy"][f"l{LAYERS}"] == pytest.approx((100.0 * f1 * 150.0 * f2) ** 0.5)
    assert e["reference_per_token"]["from_l2"] == pytest.approx(2.0 * f2)
    assert extrapolated(tmp_path, "ouro-w1024") is None


def test_macs_count_the_published_shape():
    # Ouro-1.4B: 24 x (4 x 2048^2 + 3 x 2048 x 5632) + 49152 x 2048, and the early-exit gate's 2048
    assert macs_per_position(2048, 24) == 24 * (4 * 2048**2 + 3 * 2048 * 5632) + 49152 * 2048 + 2048


def _certificate(path, seconds, sampling, planned, drawn, budget):
    checks = [
        {"name": "greedy_float64", "seconds": 10.0},
        {
            "name": "sampling[m: autoregressive]",
            "seconds": sampling,
            "details": {"cases": [{"planned": planned, "samples": drawn}]},
        },
    ]
    stamp = {"seconds": seconds, "sampling_budget_s": budget}
    path.mkdir(parents=True)
    (path / "certificate.json").write_text(
        json.dumps({"checks": checks, "stamp": stamp, "verdict": "PASS", "failed": []})
    )


def test_the_full_n_runs_get_their_own_table(tmp_path):
    """A size certified with the budget its plan needs (cert-wW-budget/) is read beside its quick
    run; the table says the verdict, the samples drawn of those planned, and the sampling exponent."""
    from scale_report import collect, table

    for w, sampling in ((128, 100.0), (512, 800.0)):
        _certificate(tmp_path / f"cert-w{w}", 300.0, 50.0, 8000, 400, 270)
        _certificate(tmp_path / f"cert-w{w}-budget", sampling + 100.0, sampling, 8000, 8000, 6000)
    (tmp_path / "cert-w512-budget.log").write_text("\tMaximum resident set size (kbytes): 1048576\n")
    data = collect(tmp_path, ["ouro-w128", "ouro-w256", "ouro-w512"])
    sizes = {s["name"]: s for s in data["sizes"]}
    assert sizes["ouro-w256"]["certified_full"] is None
    assert sizes["ouro-w512"]["certified_full"]["samples"] == {"planned": 8000, "drawn": 8000}
    assert sizes["ouro-w512"]["certified_full"]["peak_rss"] == 2**30
    md = table(data)
    assert "With the `--time-budget` the plan needs" in md
    assert "| samples drawn / planned | 8,000 / 8,000 | 8,000 / 8,000 | |" in md
    k = fit([s["parameters"] for s in data["sizes"] if s["certified_full"]], [100.0, 800.0])
    assert f"| sampling (s) | 100 | 800 | {k:.2f} |" in md
    assert "| peak RSS (GiB) | - | 1.00 |" in md


def test_update_keeps_what_the_new_logs_do_not_hold(tmp_path):
    """collect --update: a new size's certificate and estimate join the committed data; the other
    sizes, and the figures of a size the new logs lack (its prediction), keep their old values."""
    from scale_report import collect, table, updated

    old_logs, new_logs = tmp_path / "old", tmp_path / "new"
    _certificate(old_logs / "cert-w128", 300.0, 50.0, 8000, 400, 270)
    _certificate(old_logs / "cert-w512", 900.0, 50.0, 8000, 400, 270)
    (old_logs / "predict-w512.json").write_text(
        json.dumps({"wall_seconds": 800.0, "predicted_seconds": 1.0, "setup_seconds": 1.0})
    )
    old = collect(old_logs, ["ouro-w128", "ouro-w512"])
    _certificate(new_logs / "cert-w512", 1000.0, 50.0, 8000, 400, 270)  # w512 again, no prediction
    _certificate(new_logs / "cert-w2048", 3000.0, 50.0, 8000, 400, 270)
    (new_logs / "cut-w2048.json").write_text(
        json.dumps({"serial_seconds": 2400.0, "parts": {"load": 10.0}, "dtype": "float64"})
    )
    data = updated(old, collect(new_logs, ["ouro-w512", "ouro-w2048"]))
    sizes = {s["name"]: s for s in data["sizes"]}
    assert [s["name"] for s in data["sizes"]] == ["ouro-w128", "ouro-w512", "ouro-w2048"]
    assert sizes["ouro-w128"]["certified"]["seconds"] == 300.0  # not in the new logs: kept
    assert sizes["ouro-w512"]["certified"]["seconds"] == 1000.0  # measured anew: replaced
    assert sizes["ouro-w512"]["predicted"]["wall_seconds"] == 800.0  # the new logs have none: kept
    assert sizes["ouro-w2048"]["estimated"]["serial_seconds"] == 2400.0
    md = table(data)
    assert "| --predict (s, predicted/measured) | - | 800 (0.80x) | - | |" in md
    assert "| --predict's layer-cut estimate (s, estimated/measured) | - | - | 2400 (0.80x) | |" in md


def test_collect_update_names_a_missing_file_and_keeps_the_old_data(tmp_path):
    from scale_report import main

    out = tmp_path / "scale-data.json"
    out.write_text('{"sizes": []}\n')
    with pytest.raises(LoopcertError, match="--update .*missing.json: no such file"):
        main(["collect", str(tmp_path), "--update", str(tmp_path / "missing.json"), "--out", str(out)])
    assert out.read_text() == '{"sizes": []}\n'


def test_sampling_to_n_at_the_runs_rates(tmp_path):
    """A quick run cut short by its budget: the time every case needs to reach its N at the rates
    the run measured (its certificate's budget advice), a row of the table."""
    from scale_report import certified, collect, table

    _certificate(tmp_path / "cert-w2048", 3000.0, 50.0, 8000, 16, 270)
    path = tmp_path / "cert-w2048" / "certificate.json"
    cert = json.loads(path.read_text())
    cert["checks"][1]["details"]["cases"] = [
        {"planned": 8000, "samples": 16, "samples_per_s": 0.2},
        {"planned": 3000, "samples": 10, "samples_per_s": 0.5},
        {"planned": 100, "samples": 0, "samples_per_s": 0.0},  # drew nothing: no rate, not counted
    ]
    path.write_text(json.dumps(cert))
    assert certified(tmp_path, "w2048")["sampling_to_n_s"] == pytest.approx(8000 / 0.2 + 3000 / 0.5)
    md = table(collect(tmp_path, ["ouro-w2048"]))
    assert "| sampling every case to its N, at the run's rates (s) | 46,000 | |" in md
