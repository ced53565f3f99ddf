"""proofs.speedup and reports/speedup.py: the arithmetic in closed form (ideal speedup,
efficiency, paired ratios, the performance model, the Theorem 2 fit), the measurements on a
tiny model (determinism, call accounting, depth spectrum against refdec), and the rendering."""

import json
import math

import pytest
import torch

from fastdec import Decoder
from proofs import speedup as sp
from proofs.result import _plain
from refdec import LoopedLM
from refdec.config import get_preset
from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams, transform
from reports.speedup import render

PROMPTS = [(1, 2, 3, 4, 5, 6), (7, 3, 9, 1), (2, 2, 8, 5, 0, 11, 4)]


@pytest.fixture(scope="module")
def model():
    """tiny-raven at R=8 with the adapter's state half damped: depths agree the way a trained
    looped model's readouts converge (fastdec.bench's speed-only knob), so drafts get accepted."""
    m = LoopedLM(get_preset("tiny-raven").replace(recurrence=8)).init_weights(2)
    with torch.no_grad():
        m.adapter.weight[:, : m.cfg.d_model] *= 0.3
    return m.eval()


def test_settings_labels_and_grid():
    assert sp.Setting("autoregressive").label == "autoregressive"
    assert sp.Setting("pipelined", draft_depth=2, second_depth=8).label == "pipelined d1=2 d2=8"
    assert sp.Setting("draft-verify", draft_depth=4, draft_ahead=4).label == "draft-verify d1=4 k=4"
    adaptive = sp.Setting("adaptive-verify", draft_depth=2, draft_ahead=4, rewind_depth=8)
    assert adaptive.label == "adaptive-verify d1=2 k=4 V=8"
    for R in (4, 8, 32):
        for quick in (True, False):
            g = sp.grid(R, quick)
            assert g[0].label == "autoregressive" and len({s.label for s in g}) == len(g)
            for s in g[1:]:
                assert s.draft_depth < R and (s.second_depth is None or s.draft_depth < s.second_depth < R)
    labels = {s.label for s in sp.grid(32, True)}
    assert {"pipelined d1=2 d2=8", "draft-verify d1=4 k=4"} <= labels  # the targets
    assert [s.label for s in sp.gate_settings(32)] == [
        "autoregressive",
        "draft-verify d1=4 k=4",
        "pipelined d1=2",
        "pipelined d1=2 d2=8",
    ]
    assert sp.rewind_depths(32) == [4, 8, 16] and sp.rewind_depths(4) == [1, 2]


def test_ratio_is_paired_by_round():
    # a load spike in round 2 slows both settings: per-round pairing cancels it
    assert sp.ratio([1.0, 3.0, 1.0], [0.5, 1.5, 0.5]) == 2.0
    assert sp.ratio([1.0, 1.0, 1.0], [0.5, 0.25, 1.0]) == 2.0  # the median, not the mean
    assert math.isnan(sp.ratio([], []))


def _times(calls_by_label, seconds, rounds=2, tokens=10):
    """Synthetic time_runs output: decode time per round, call counts and pooled call seconds."""
    out = {}
    for label, calls in calls_by_label.items():
        stats = {k: 0 for k in sp.COUNTS}
        stats.update(
            peak_lanes=1,
            calls=calls,
            rewind_at={},
            gamma=1.0,
            acceptance_rate=0.0,
            gate_open_rate=0.0,
            mean_live_lanes=1.0,
            steps_per_token=1.0,
        )
        cs = {
            (p, w): [n * cost * rounds, n * cost * rounds, n * rounds]
            for p, per in calls.items()
            for w, n in per.items()
            for cost in [seconds["cost"][(p, w)]]
        }
        out[label] = {
            "wall": [seconds[label]] * rounds,
            "cpu": [seconds[label]] * rounds,
            "stats": stats,
            "tokens": [[1] * (tokens + 1)],
            "decode_tokens": tokens,
            "deterministic": True,
            "call_seconds": cs,
        }
    return out


def test_ideal_speedup_and_efficiency_in_closed_form():
    cost = {("recur", 1): 1e-3, ("recur", 16): 2e-3, ("readout", 1): 5e-4}
    calls = {
        "autoregressive": {"recur": {1: 320}, "readout": {1: 10}},
        "pipelined d1=2": {"recur": {16: 40}, "readout": {1: 20}},
    }
    # the baseline spends 0.325 s in calls and 0.35 s in all; the pipeline 0.09 s and 0.1 s
    t = _times(calls, {"cost": cost, "autoregressive": 0.35, "pipelined d1=2": 0.1})
    costs = sp.pooled_costs(t)
    assert costs[("recur", 16)][:2] == pytest.approx((2e-3, 2e-3))
    rows = sp.rows_from(t, [sp.Setting("autoregressive"), sp.Setting("pipelined", draft_depth=2)], costs)
    ar, pipe = rows
    assert ar["speedup"] == 1.0 and ar["ideal_speedup"] == pytest.approx(0.35 / 0.325)
    assert pipe["speedup"] == pytest.approx(3.5)
    assert pipe["ideal_speedup"] == pytest.approx((0.35 / 10) / (0.09 / 10))
    assert pipe["efficiency"] == pytest.approx(0.09 / 0.1)  # = ideal time / measured time
    assert pipe["efficiency"] == pytest.approx(pipe["speedup"] / pipe["ideal_speedup"])


def test_time_runs_on_a_tiny_model(model):
    settings = [
        sp.Setting("autoregressive"),
        sp.Setting("pipelined", draft_depth=2, second_depth=4),
        sp.Setting("draft-verify", draft_depth=2, draft_ahead=3),
    ]
    decs = {s.label: Decoder(model, s) for s in settings}
    t = sp.time_runs(decs, PROMPTS, 10, 2)
    for s in settings:
        rec = t[s.label]
        assert rec["deterministic"] and len(rec["wall"]) == len(rec["cpu"]) == 2
        assert rec["decode_tokens"] == sum(len(x) - 1 for x in rec["tokens"]) == 3 * 9
        st = rec["stats"]
        assert st["tokens"] == 30 and st["from_first"] + st["from_second"] + st["from_restart"] == 30
        # every timed call is counted once per round
        n_calls = sum(n for per in st["calls"].values() for n in per.values())
        assert sum(v[2] for v in rec["call_seconds"].values()) == 2 * n_calls
        assert rec["tokens"] == t["autoregressive"]["tokens"]  # greedy, lossless
    assert t["pipelined d1=2 d2=4"]["stats"]["accepted"] > 0  # the damped model accepts drafts
    rows = sp.rows_from(t, settings, sp.pooled_costs(t))
    assert all(r["ideal_speedup"] > 0 and 0 < r["efficiency"] for r in rows)


def test_depth_spectrum_against_refdec(model):
    gen = [[3, 4, 5, 6], [1, 1, 2]]
    s = sp.depth_spectrum(model, PROMPTS[:2], gen)
    R = model.cfg.recurrence
    assert s["positions"] == 7 and s["depth"] == list(range(1, R + 1))
    assert s["mean_tv"][-1] == 0 and s["agreement"][-1] == 1
    assert all(0 <= tv <= 1 for tv in s["mean_tv"]) and all(0 <= a <= 1 for a in s["agreement"])
    # by hand: depth 2 at the first decoded position of prompt 0
    ids = list(PROMPTS[0])
    laws = transform(model.depth_logits(ids, [2, R])[:, -1], SamplingParams(temperature=1.0))
    tv = 0.5 * float((laws[0] - laws[1]).abs().sum())
    s1 = sp.depth_spectrum(model, PROMPTS[:1], [[7]])
    assert s1["mean_tv"][1] == pytest.approx(tv, rel=1e-12)


def test_theorem2_compare_recovers_a_power_law():
    R, alpha, beta = 32, 1.03, 0.175
    spectrum = {"R": R, "mean_tv": [beta * r**-alpha for r in range(1, R)] + [0.0]}
    rows = [
        {"strategy": "pipelined", "draft_depth": a, "second_depth": b, "speedup": s, "label": f"{a},{b}"}
        for a, b, s in ((1, None, 2.0), (2, 8, 3.5), (4, 8, 3.0))
    ]
    t = sp.theorem2_compare(spectrum, rows)
    assert t["fitted"] and t["alpha"] == pytest.approx(alpha) and t["beta"] == pytest.approx(beta)
    assert (round(t["d1_star"], 2), round(t["d2_star"], 2)) == (1.26, 8.85)  # the published check
    assert t["measured_best"]["d1"] == 2 and t["measured_best_with_d2"]["d2"] == 8
    flat = sp.theorem2_compare({"R": R, "mean_tv": [0.0] * R}, rows)
    assert not flat["fitted"] and "two distinct depths" in flat["reason"]


def test_perf_model_matches_design_formula(model):
    R, d1 = 32, 2
    small, big = sp.perf_model(model, d1, R, 1), sp.perf_model(model, d1, R, 10**7)
    wb, a = small["weight_bytes"], small["kv_bytes_per_lane"]
    assert small["predicted"] == pytest.approx(R * (wb + a) / (d1 * wb + R * a))
    assert big["kv_bytes_per_lane"] == a * 10**7
    assert 0.9 * R / d1 < small["predicted"] <= R / d1 and big["predicted"] == pytest.approx(1.0, abs=0.01)


def test_long_sequence_cycles_the_prompts():
    assert sp.long_sequence([(1, 2), (3,)], 7) == [1, 2, 3, 1, 2, 3, 1]
    with pytest.raises(LoopcertError):
        sp.long_sequence([()], 3)


def test_bench_end_to_end_renders(model):
    plan = sp.Plan(
        "quick",
        prompts=2,
        prompt_len=6,
        tokens=8,
        repeats=2,
        sampling_repeats=1,
        lengths=(8, 24),
        sweep_tokens=6,
        sweep_repeats=1,
    )
    from proofs.naive_kv import NaiveKVDecoder

    res = sp.bench(model, "tiny-raven R=8", plan, PROMPTS, naive=NaiveKVDecoder(model))
    text = json.dumps(_plain(res), allow_nan=False)  # strict JSON
    md = render(json.loads(text))
    for section in (
        "## Stamp",
        "## Targets",
        "## Strategy grid",
        "## Honest baseline",
        "## Sampling",
        "## Cost of one engine call",
        "## Theorem 2",
        "## Depth spectrum",
        "## Speedup against context",
    ):
        assert section in md
    assert res["naive"]["same_tokens"]
    assert [r["context"] for r in res["context"]["rows"]] == [8, 24]
    assert all(r["label"] in md for r in res["rows"])
