"""reports/scale.py: the growth exponent, the parts a certificate's checks fall into, and the layer
extrapolation of a shape too large to run whole."""

from __future__ import annotations

import json

import pytest

from reports.scale import LAYERS, PARTS, extrapolated, fit, macs_per_position, part_of


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
    # Ouro-1.4B: 24 x (4 x 2048^2 + 3 x 2048 x 5632) + 49152 x 2048
    assert macs_per_position(2048, 24) == 24 * (4 * 2048**2 + 3 * 2048 * 5632) + 49152 * 2048


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
    from reports.scale import collect, table

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
