"""speed.batch_table: the batch table's structure (never its timings: speed is a ratio measured
by `loopcert bench`, not asserted by a test)."""

import subprocess
import sys
from pathlib import Path

import pytest

from fastdec import DecodeConfig
from refdec import LoopcertError, LoopedLM
from refdec.config import get_preset
from speed.batch_table import BatchPlan, BatchRow, BatchTable, SampleRate, batch_table, judge_batch

PLAN = BatchPlan(
    batches=(1, 2), prompt_len=6, tokens=4, repeats=2, sample_batch=4, sample_calls=1, sample_alone=2
)


def test_batch_table_has_every_setting_at_every_batch_against_the_baseline_at_that_batch():
    model = LoopedLM(get_preset("tiny-raven").replace(recurrence=4)).init_weights(0)
    settings = [DecodeConfig("autoregressive"), DecodeConfig("pipelined", draft_depth=1)]
    prompts = [[1, 2, 3, 4, 5, 6, 7], [3, 2, 1]]
    t = batch_table(model, settings, prompts, model, "tiny-raven", settings[1:], PLAN, "cpu")
    assert [(r.label, r.batch) for r in t.rows] == [(s.label, b) for s in settings for b in (1, 2)]
    for r in t.rows:
        assert r.tokens_per_s > 0 and r.speedup > 0 and 0 <= r.acceptance <= 1
        if r.label == "autoregressive":
            assert r.speedup == 1.0 and r.acceptance == 0.0  # the baseline against itself, each round
    assert t.row("pipelined d1=1", 1).over_b1 == 1.0
    assert [(s.label, s.batch) for s in t.samples] == [("pipelined d1=1", 4)]
    s = t.samples[0]
    assert s.samples_per_s > 0 and s.ratio == pytest.approx(s.samples_per_s / s.alone_per_s)
    assert s.lane_steps_per_sample >= 2 * 4  # two tokens after the first, each a lane deepened to R = 4
    assert t.to_json()["rows"][0]["label"] == "autoregressive"
    assert [c.width for c in t.width_costs] == [2, 4, 8, 16, 32, 64, 128]  # B = 2 rows, up to the widest call
    assert all(c.us_per_lane_step > 0 for c in t.width_costs)
    assert all(r.lane_steps_per_token >= 4 for r in t.rows)  # every token is one lane deepened to R = 4
    assert t.ceiling("pipelined d1=1", 2) > 0 and t.ceiling("pipelined d1=1", 1) is None  # costs at B=2 only


def test_a_bad_plan_names_the_field():
    with pytest.raises(LoopcertError, match="batches"):
        BatchPlan(batches=())
    with pytest.raises(LoopcertError, match="sample_batch"):
        BatchPlan(sample_batch=0)


def test_batch_targets_are_judged_in_proofs():
    def table(speedup, ratio):
        rows = [
            BatchRow("autoregressive", "autoregressive", 16, 100.0, 1.0, 5.0, 0.0),
            BatchRow("pipelined d1=2", "pipelined", 16, 100.0 * speedup, speedup, 2.0, 0.99),
            BatchRow("pipelined d1=2", "pipelined", 1, 50.0, 3.0, 1.0, 0.99),
        ]
        samples = [SampleRate("pipelined d1=1", 64, ratio, 1.0, ratio)]
        return BatchTable(BatchPlan(), "cpu", "tiny-raven", rows, samples)

    met = {t.name.split(" (")[0]: t.met for t in judge_batch(table(1.6, 21.0))}
    assert met == {
        "best pipelined at B=16": True,
        "samples/s through generate_batch >= 20x generate() one at a time": True,
    }
    assert not any(t.met for t in judge_batch(table(1.4, 19.0)))


def test_the_prepared_gpu_check_refuses_to_run_without_cuda(tmp_path):
    """benchmarks/gpu_check.sh (the prepared device run) is valid bash, runs the three device
    steps, and without CUDA exits 2 having checked nothing (it never passes by skipping). On a CUDA
    machine the test hides the devices (CUDA_VISIBLE_DEVICES empty), so it runs there too."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "certify --device cuda --quick" in text and "bench --device cuda --quick" in text
    assert "-m gpu" in text
    env = {
        "PATH": "/usr/bin:/bin",
        "OUT": str(tmp_path / "out"),
        "PYTHON": sys.executable,
        "CUDA_VISIBLE_DEVICES": "",
    }
    r = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "NO CUDA" in summary and "nothing was checked" in summary
