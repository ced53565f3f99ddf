"""reports/scale.py: the growth exponent, the parts a certificate's checks fall into, and the layer
extrapolation of a shape too large to run whole."""

from __future__ import annotations

import json

import pytest

from reports.scale import LAYERS, PARTS, extrapolated, fit, part_of


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


def test_layer_extrapolation_is_linear_in_the_layers(tmp_path):
    for n, (load, greedy) in {1: (10.0, 100.0), 2: (12.0, 150.0)}.items():
        parts = {
            "load": {"seconds": load, "peak_rss": 1, "load1": 1.0},
            "greedy": {"seconds": greedy},
            "reference": {"seconds": 3.0 * n, "per_token": 1.0 * n},
        }
        (tmp_path / f"parts-m-l{n}.json").write_text(json.dumps({"parts": parts}))
    e = extrapolated(tmp_path, "m")
    assert e["load"][f"l{LAYERS}"] == pytest.approx(10.0 + 23 * 2.0)
    assert e["greedy"][f"l{LAYERS}"] == pytest.approx(100.0 + 23 * 50.0)
    assert e["reference_per_token"][f"l{LAYERS}"] == pytest.approx(24.0)
    assert extrapolated(tmp_path, "absent") is None
