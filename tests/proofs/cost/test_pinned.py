"""What a run costs, pinned: the memory a run needs (from the headers), the layer-cut estimate's
arithmetic on fixed cut timings, and `loopcert certify --predict`'s printout of both, as they read
before the cost of a run moved into one package. Deterministic parts only: the timings are
injected (no assertion reads a clock), so each figure here must stay what it was; a change of the
arithmetic that is meant changes this file in the same commit, saying why. Changed once, on purpose:
the layer-cut estimate's extrapolation (each cut scaled by the multiply-adds of a position, no
longer a line through the two cuts: proofs/cost/extrapolate.py says why); the memory figures, the
printout's form and every figure of a certificate stayed."""

from __future__ import annotations

import re

import pytest
import torch

from loopcert.cli import main
from proofs.cost import estimate as ce
from proofs.cost import predict as predict_mod
from proofs.cost.kv_need import certify_caches
from proofs.cost.need import run_need, sampling_rows
from proofs.cost.prediction import CheckCost, Estimate, Prediction
from proofs.run.plan import FULL, QUICK
from refdec.memory import FREE_ENV, config_of

# fixed timings of the 1- and 2-layer cuts (seconds; cut_estimate.QUANTITIES and the two sample batches)
CUTS = {
    1: dict(
        build=2.0,
        forward64=1.2,
        reference_token=0.7,
        greedy64_token=0.9,
        greedy_token=0.3,
        baseline_token=0.1,
        sample_rows=0.05,
        sample_chunk=0.02,
    ),
    2: dict(
        build=3.5,
        forward64=1.5,
        reference_token=1.0,
        greedy64_token=1.3,
        greedy_token=0.45,
        baseline_token=0.13,
        sample_rows=0.08,
        sample_chunk=0.03,
    ),
}
LOAD = (123.0, "given")

NEEDS = {  # (model, dtype, device, plan, rows) -> (bytes, describe())
    ("tiny-ouro", torch.float32, "cpu", QUICK, 64): (
        324139532,
        "309 MiB (0.0M parameters: float64 reference 145 KiB + float32 copy 72.5 KiB, + KV caches 52.9 MiB, "
        "+ headroom)",
    ),
    ("tiny-raven", torch.float64, "cpu", FULL, 8): (
        346771968,
        "331 MiB (0.0M parameters: float64 reference 298 KiB, + KV caches 74.4 MiB, + headroom)",
    ),
    ("ouro-1.4b", torch.float64, "cpu", QUICK, 1): (
        19429956006,
        "18.1 GiB (1,434.7M parameters: float64 reference 10.7 GiB, + KV caches 1017 MiB, + float32 copy "
        "while bitwise runs 5.34 GiB, + headroom)",
    ),
    ("ouro-1.4b", torch.bfloat16, "cpu", QUICK, 64): (
        45840027868,
        "42.7 GiB (1,434.7M parameters: float64 reference 10.7 GiB + bfloat16 copy 2.67 GiB + float32 copy "
        "to sample 5.34 GiB, + KV caches 22.1 GiB, + headroom)",
    ),
    ("ouro-1.4b", torch.float32, "cuda", QUICK, 64): (
        12624943522,
        "11.8 GiB (1,434.7M parameters: float64 reference 10.7 GiB, + headroom)",
    ),
}


@pytest.mark.parametrize("key", list(NEEDS), ids=lambda k: f"{k[0]}-{k[1]}-{k[2]}-{k[3].mode}-{k[4]}")
def test_the_memory_a_run_needs_is_pinned(key):
    need = run_need(*key[:3], key[3], True, key[4])
    assert (need.total, need.describe()) == NEEDS[key]


def test_the_kv_caches_and_the_rows_that_fit_are_pinned(monkeypatch):
    assert certify_caches(config_of("tiny-ouro"), "tiny-ouro", QUICK, torch.float32, "cpu") == 55481344
    monkeypatch.setenv(FREE_ENV, "19G")
    assert sampling_rows("ouro-1.4b", torch.float64, "cpu", QUICK) == 1
    monkeypatch.setenv(FREE_ENV, "1T")
    assert sampling_rows("ouro-1.4b", torch.float64, "cpu", QUICK) is None


@pytest.fixture
def fixed_cuts(monkeypatch):
    """The cuts' timings and the load, injected: the estimate is arithmetic on them alone."""
    monkeypatch.setattr(ce, "time_cut", lambda cfg, k, *a, **kw: dict(CUTS[k]))
    monkeypatch.setattr(ce, "load_seconds", lambda *a, **kw: LOAD)


PARTS_F32 = {
    "load": 123.0,
    "exact laws": 366.2996927054004,
    "greedy_float64": 349.165496934698,
    "greedy_float32": 66.87686816731944,
    "bitwise_fixed_width": 89.16915755642593,
    "sampling": 270.0,
    "reproducibility": 100.31530225097917,
    "traces": 40.6999658561556,
    "positions": 3273.243450340115,
    "speed": 701.0388814210335,
}
PARTS_F64 = {
    "load": 123.0,
    "exact laws": 366.2996927054004,
    "greedy_float64": 349.165496934698,
    "bitwise_fixed_width": 212.16915755642594,
    "sampling": 270.0,
    "reproducibility": 100.31530225097917,
    "traces": 40.6999658561556,
    "positions": 3273.243450340115,
    "speed": 701.0388814210335,
}
AT_LAYERS = {  # each cut x the model's multiply-adds of a position / the cut's (the build: parameters)
    "build": 13.69188282901657,
    "forward64": 10.1749914640389,
    "reference_token": 6.345221995297158,
    "greedy64_token": 8.203340376981924,
    "greedy_token": 2.7865361736383103,
    "baseline_token": 0.8647080004295729,
}
STOP = (
    "the measured prediction would take ~{pred} min, past the 20-min limit (PREDICT_LIMIT): it loads the "
    "model and runs the setup and a probe of every check; its largest part is positions (55 min)",
    "the run cannot finish within 1 h (~{hours} h estimated with {jobs} worker(s)); its largest part is "
    "positions (55 min)",
    "what helps: --time-budget SECONDS (the sampling pool), --jobs N (worker processes), --shard I/N with "
    "loopcert merge (machines), --executor ray (a cluster), --dtype float64 (one copy of the weights) or "
    "bfloat16, --device cuda (a GPU); --predict-measured runs the measured prediction anyway",
)


@pytest.mark.parametrize(
    ("free", "dtype", "jobs", "parts", "sample", "rows", "serial", "wall", "prediction", "pred", "hours"),
    [
        (
            "1T",
            torch.float32,
            2,
            PARTS_F32,
            0.185769078242554,
            None,
            5379.808815232127,
            4212.023942231192,
            2168.4567894894617,
            36,
            1.2,
        ),
        (
            "19G",
            torch.float64,
            1,
            PARTS_F64,
            3.8372295801264773,
            1,
            5435.931947064808,
            5435.931947064808,
            2124.050432559229,
            35,
            1.5,
        ),
    ],
)
def test_the_layer_cut_estimate_is_pinned(
    monkeypatch, fixed_cuts, free, dtype, jobs, parts, sample, rows, serial, wall, prediction, pred, hours
):
    monkeypatch.setenv(FREE_ENV, free)
    est = predict_mod.cut_first(
        "ouro-1.4b", QUICK, dtype, "cpu", None, QUICK.sampling_budget_s, jobs, 3.0, print
    )
    assert est.parts == pytest.approx(parts, rel=1e-12)
    assert list(est.parts) == list(parts)  # the order the printout reads them in
    assert est.at_layers == pytest.approx({**AT_LAYERS, "sample": sample}, rel=1e-12)
    assert est.contexts == 36 and est.layers == 24 and est.sampling_rows == rows
    assert est.serial_seconds == pytest.approx(serial, rel=1e-12)
    assert est.wall_seconds == pytest.approx(wall, rel=1e-12)
    assert est.prediction_seconds == pytest.approx(prediction, rel=1e-12)
    assert est.warnings == (STOP[0].format(pred=pred), STOP[1].format(hours=hours, jobs=jobs), STOP[2])


ESTIMATE_PRINTOUT = """\
quick plan on ouro-1.4b, estimated from 1- and 2-layer cuts (n_core 24; Ns), one process:
  load: 2.0 min (given)
  exact laws: 6.1 min (36 contexts x 10.2s)
  greedy_float64: 5.8 min (reference 6.35s a token)
  greedy_float32: 1.1 min
  bitwise_fixed_width: 1.5 min
  sampling: 4.5 min (0.186s a sample, the budget's share or a first chunk per unit)
  reproducibility: 1.7 min
  traces: 40.7 s
  positions: 54.6 min
  speed: 11.7 min
estimated: 89.7 min in one process, 70.2 min with 2 worker(s) (not counted: mutants, false alarms, \
the Theorem 1 cases: tiny models); the measured prediction: 36.1 min
"""


def printout(capsys) -> str:
    """stdout without the timed progress lines, the estimate's own time as N."""
    out = capsys.readouterr().out
    kept = [line for line in out.splitlines(keepends=True) if not line.startswith("[")]
    return re.sub(r"; \d+s\), one process", "; Ns), one process", "".join(kept))


def test_the_predict_printout_of_a_stopped_estimate_is_pinned(monkeypatch, fixed_cuts, capsys):
    monkeypatch.setenv(FREE_ENV, "1T")
    assert main(["certify", "ouro-1.4b", "--predict", "3", "--jobs", "2"]) == 0
    stopped = "".join(f"stopped: {w}\n" for w in (STOP[0].format(pred=36), STOP[1].format(hours=1.2, jobs=2)))
    assert printout(capsys) == ESTIMATE_PRINTOUT + stopped + f"stopped: {STOP[2]}\n"


def measured_prediction(est: Estimate) -> Prediction:
    """A measured prediction with fixed figures around the pinned estimate `est`."""
    return Prediction(
        mode="quick",
        model="ouro-1.4b",
        dtype="float32",
        target_tv=0.05,
        estimate=est,
        stopped=False,
        warnings=("sampling: it is short",),
        checks=(
            CheckCost("greedy_float64", 400.0, "probe greedy_prompts 1 of 2 in 200.0s"),
            CheckCost("sampling[autoregressive]", 900.0, "N / samples/s measured per case", 100, 90.0),
            CheckCost("theorem1_traces", 20.0, "probe trace_prompts 1 of 2 in 10.0s"),
            CheckCost("mutation", 30.0, "probe 3 of 12 mutants in 7.5s"),
        ),
        setup_seconds=250.0,
        sampling_seconds=900.0,
        serial_seconds=1600.0,
        jobs=2,
        workers_label="--jobs 2",
        wall_seconds=1000.0,
        sampling_budget_s=270.0,
    )


MEASURED_PRINTOUT = """\
quick plan on ouro-1.4b, predicted per check (TV 0.05):
  setup (models, exact laws, N per case): 4.2 min; cut estimate 8.2 min
  greedy_float64: 6.7 min (probe greedy_prompts 1 of 2 in 200.0s; cut estimate 5.8 min)
  sampling[autoregressive]: 15.0 min (N / samples/s measured per case; 1.5 min within the budget)
  theorem1_traces: 20.0 s (probe trace_prompts 1 of 2 in 10.0s; cut estimate 40.7 s)
  mutation: 30.0 s (probe 3 of 12 mutants in 7.5s)
predicted: 26.7 min in one process, 16.7 min with --jobs 2 (sampling within its budget of 4.5 min per \
worker; 15.0 min of sampling to reach TV 0.05)
"""


def test_the_predict_printout_of_a_measured_prediction_is_pinned(monkeypatch, fixed_cuts, capsys):
    monkeypatch.setenv(FREE_ENV, "1T")
    est = predict_mod.cut_first("ouro-1.4b", QUICK, torch.float32, "cpu", None, 270.0, 2, 3.0, print)
    capsys.readouterr()
    monkeypatch.setattr("loopcert.commands.certify.predict", lambda *a, **kw: measured_prediction(est))
    assert main(["certify", "ouro-1.4b", "--predict", "3", "--jobs", "2"]) == 0
    warned = "".join(f"estimate: {w}\n" for w in est.warnings) + "warning: sampling: it is short\n"
    assert printout(capsys) == ESTIMATE_PRINTOUT + MEASURED_PRINTOUT + warned
