"""--predict's layer-cut estimate (proofs/cost/estimate.py): the cuts are the model's own config
but for its repeated layers, each is scaled to the model by the work of a position, and --predict stops before
loading the model, naming the largest part and the flags that help, when the estimate says the
measured prediction or the run would take too long. Timings are injected: no assertion reads a
clock (tests/proofs/run/test_certify.py runs the real, timed path end to end)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from plans import SMALL_PLAN

import proofs.run.plan as plan_mod
from loopcert.cli import main
from proofs.cost import estimate as ce
from proofs.cost import predict as predict_mod
from proofs.cost.extrapolate import scaled, work
from proofs.decoders.candidates import fastdec_grid
from proofs.run import run as run_mod
from proofs.run.plan import QUICK
from refdec.checkpoints import meta_model
from refdec.config import PRESETS
from refdec.sizes import parameters, write_checkpoint

FLAGS = (
    "--time-budget",
    "--jobs N",
    "--shard I/N",
    "loopcert merge",
    "--executor ray",
    "--dtype",
    "--device cuda",
)


@pytest.mark.parametrize("name", ["tiny-ouro", "tiny-raven", "tiny-loopcoder", "ouro-1.4b", "huginn-0125"])
@pytest.mark.parametrize("layers", ce.CUT_LAYERS)
def test_a_cut_is_the_config_but_its_repeated_layers(name, layers):
    cfg = PRESETS[name]
    cut = ce.cut_config(cfg, layers)
    assert cut.n_core == layers
    changed = {f.name for f in dataclasses.fields(cfg) if getattr(cfg, f.name) != getattr(cut, f.name)}
    assert changed <= {"n_core", "name"}  # tiny presets already have 2 core layers: then only the name
    m, c = meta_model(cfg), meta_model(cut)
    assert len(c.core) == layers and len(c.prelude) == len(m.prelude) and len(c.coda) == len(m.coda)
    assert c.embed_tokens.weight.shape == m.embed_tokens.weight.shape  # width and vocabulary as they are


def test_the_config_of_a_folder_is_read_from_its_files(tmp_path):
    cfg = PRESETS["tiny-ouro"]
    folder = write_checkpoint(cfg, tmp_path / "ouro")
    got = ce.model_config(folder)
    assert got == cfg.replace(name=got.name)
    assert ce.model_config("tiny-raven") is PRESETS["tiny-raven"]
    # its load is timed on its own stored tensors, once per copy; a preset's from the cuts' builds
    seconds, how = ce.load_seconds(folder, (torch.float64, torch.float32), 0.0)
    assert seconds > 0 and "stored read in" in how
    assert ce.load_seconds("tiny-ouro", (torch.float64,) * 2, 5.0)[0] == 10.0
    with pytest.raises(Exception, match="neither a preset"):
        ce.model_config(tmp_path / "missing")


OURO = PRESETS["ouro-1.4b"]
WORK = {k: work(ce.cut_config(OURO, k)) for k in ce.CUT_LAYERS}  # multiply-adds of a position
SIZE = {k: parameters(ce.cut_config(OURO, k)) for k in ce.CUT_LAYERS}


def test_each_cut_is_scaled_by_its_work_and_the_estimates_meet_geometrically():
    # a time proportional to the work is recovered exactly, from either cut
    assert scaled({1: 2.0, 2: 4.0}, {1: 10, 2: 20}, 240) == pytest.approx(48.0)
    # two cuts that disagree (the host's load moved between them): the geometric mean of their reads
    assert scaled({1: 2.0, 2: 8.0}, {1: 10, 2: 20}, 240) == pytest.approx(math.sqrt(48.0 * 96.0))
    assert scaled({1: 0.0, 2: 8.0}, {1: 10, 2: 20}, 240) == 0.0  # nothing measurable
    # Ouro-1.4B's shape: the work of a position is its projections, MLPs and head, not its embedding
    per_layer = WORK[2] - WORK[1]
    assert work(OURO) == WORK[1] + 23 * per_layer
    head = OURO.vocab_size * OURO.d_model
    assert WORK[1] - per_layer == head + OURO.d_model  # the head and the early-exit gate
    vectors = sum(p.numel() for p in meta_model(OURO).parameters() if p.dim() < 2)  # norms, biases
    assert parameters(OURO) - work(OURO) == head + vectors  # and the embedding table: a lookup
    tied = PRESETS["tiny-raven"]
    assert tied.tie_embeddings and work(tied) >= tied.vocab_size * tied.d_model


def cut_timings(per_cut1: float) -> dict[int, dict[str, float]]:
    """Every quantity as the work of the cut (the build as its parameters), `per_cut1` seconds on the
    1-layer cut: the model's own time is then per_cut1 x work(model) / work(cut 1), exactly."""
    return {
        k: {q: per_cut1 * (SIZE[k] / SIZE[1] if q == "build" else WORK[k] / WORK[1]) for q in ce.QUANTITIES}
        for k in ce.CUT_LAYERS
    }


def estimate_of(dtype, timings, jobs=1, load=1.0):
    """The estimate of the quick plan at Ouro-1.4B's config, 3 settings, from these timings."""
    settings = fastdec_grid(4, False)
    return ce.estimate(
        "ouro-1.4b", QUICK, dtype, "cpu", settings, 270.0, jobs, timings=timings, load=(load, "given")
    )


def test_the_estimate_extrapolates_each_quantity_and_multiplies_by_the_plan():
    est = estimate_of(torch.float32, cut_timings(3.0), load=60.0)
    assert est["layers"] == 24 and est["layer_field"] == "n_core"
    at = 3.0 * work(OURO) / WORK[1]
    build = 3.0 * parameters(OURO) / SIZE[1]
    assert est["at_layers"] == {
        **dict.fromkeys(ce.QUANTITIES, pytest.approx(at)),
        "build": pytest.approx(build),
    }
    p = est["parts"]
    assert p["load"] == 60.0
    cases = len(QUICK.sampling_cases)  # 3: temperature + top-k, top-p, the engines' parameters
    assert est["contexts"] == 6 + ce.CONTEXTS_PER_CASE * cases
    assert p["exact laws"] == pytest.approx(est["contexts"] * at)
    # 2 prompts x 12 tokens: the reference, then every setting (greedy64_token is their sum)
    assert p["greedy_float64"] == pytest.approx(2 * 12 * (at + at))
    assert p["greedy_float32"] == pytest.approx(2 * 12 * at)
    assert p["speed"] == pytest.approx(2 * 32 * 3 * (at + at))  # the settings and the baseline
    # 3 settings x 3 cases (setting, case) units, each its first chunk of 64 samples: 64 x 26 s
    # is past 270 / 9
    assert p["sampling"] == pytest.approx(3 * cases * 64 * at)
    assert est["serial_seconds"] == pytest.approx(sum(p.values()))
    assert est["wall_seconds"] == pytest.approx(est["serial_seconds"])  # one worker
    two = estimate_of(torch.float32, cut_timings(3.0), jobs=2, load=60.0)
    assert est["parts"]["load"] + est["parts"]["exact laws"] < two["wall_seconds"] < est["wall_seconds"]
    f64 = estimate_of(torch.float64, cut_timings(3.0))
    assert [k for k in f64["parts"] if k.startswith("greedy_")] == ["greedy_float64"]
    # a float64 run's bitwise loads its float32 copy: the load of one copy more than its tokens
    assert f64["parts"]["bitwise_fixed_width"] == pytest.approx(p["bitwise_fixed_width"] + 1.0)
    # sampling cheap enough: each unit takes its share of the budget, the budget in all
    cheap = estimate_of(torch.float32, cut_timings(1e-4))
    assert cheap["parts"]["sampling"] == pytest.approx(270.0)


def test_sampling_is_fitted_at_one_batch_for_both_cuts():
    """A cut too slow to time the certify batch leaves both at SAMPLE_ROWS' rate."""
    both = {1: {"sample_rows": 2.0, "sample_chunk": 1.0}, 2: {"sample_rows": 3.0, "sample_chunk": 1.5}}
    assert [t["sample"] for t in ce.with_sample(both).values()] == [1.0, 1.5]
    one = {1: {"sample_rows": 2.0, "sample_chunk": 1.0}, 2: {"sample_rows": 3.0}}
    assert [t["sample"] for t in ce.with_sample(one).values()] == [2.0, 3.0]
    # a run that samples fewer rows a call (its caches): SAMPLE_ROWS' rate, and below it more a sample
    assert [t["sample"] for t in ce.with_sample(both, rows=ce.SAMPLE_ROWS).values()] == [2.0, 3.0]
    assert [t["sample"] for t in ce.with_sample(both, rows=32).values()] == [2.0, 3.0]
    assert [t["sample"] for t in ce.with_sample(both, rows=2).values()] == [8.0, 12.0]
    assert [t["sample"] for t in ce.with_sample(both, rows=64).values()] == [1.0, 1.5]


def test_the_estimate_samples_as_many_rows_a_call_as_the_run():
    """Where the run samples 8 rows a call, the estimate's sampling is the 8-row rate and each
    unit's first chunk is 8 samples, not 64; the first-chunk floor of the measured prediction too."""
    timings = {
        k: {**dict.fromkeys(ce.QUANTITIES, 1.0 * k), "sample_rows": 2.0 * k, "sample_chunk": 1.0 * k}
        for k in ce.CUT_LAYERS
    }
    for t in timings.values():
        del t["sample"]
    settings = fastdec_grid(4, False)
    full = ce.estimate(
        "ouro-1.4b", QUICK, torch.float32, "cpu", settings, 1.0, timings=timings, load=(1.0, "")
    )
    few = ce.estimate(
        "ouro-1.4b", QUICK, torch.float32, "cpu", settings, 1.0, timings=timings, load=(1.0, ""), rows=8
    )
    chunk = scaled({1: 1.0, 2: 2.0}, WORK, work(OURO))  # the certify batch's rate, at the model
    assert full["at_layers"]["sample"] == pytest.approx(chunk) and full["first_chunk"] == 64
    assert few["at_layers"]["sample"] == pytest.approx(2 * chunk) and few["first_chunk"] == 8
    units = 3 * len(QUICK.sampling_cases)  # (setting, case) units
    assert few["parts"]["sampling"] == pytest.approx(units * 8 * 2 * chunk)  # each its first 8
    assert full["parts"]["sampling"] == pytest.approx(units * 64 * chunk)


def est_of(parts: dict, wall: float) -> dict:
    return {"parts": parts, "wall_seconds": wall, "jobs": 1}


def test_decide_stops_past_the_limit_or_the_hour_naming_the_part_and_the_flags():
    parts = {"load": 900.0, "exact laws": 3800.0, "sampling": 300.0}
    go, said = ce.decide(est_of(parts, 5000.0), prediction_s=5000.0)
    assert not go and len(said) == 3
    assert "measured prediction would take ~83 min, past the 20-min limit" in said[0]
    assert "cannot finish within 1 h (~1.4 h" in said[1]
    assert all("its largest part is exact laws (63 min)" in s for s in said[:2])
    assert all(flag in said[2] for flag in FLAGS) and "--predict-measured" in said[2]
    # only the prediction too dear, or only the run
    go, said = ce.decide(est_of(parts, 3000.0), prediction_s=ce.PREDICT_LIMIT + 1)
    assert not go and "past the 20-min limit" in said[0] and "cannot finish" not in " ".join(said)
    go, said = ce.decide(est_of(parts, ce.HOUR + 1), prediction_s=ce.PREDICT_LIMIT)
    assert not go and "cannot finish within 1 h" in said[0]
    assert ce.decide(est_of(parts, ce.HOUR), prediction_s=ce.PREDICT_LIMIT) == (True, [])


@pytest.fixture
def small_plan(monkeypatch):
    monkeypatch.setitem(plan_mod.PLANS, "quick", SMALL_PLAN)


@pytest.fixture
def slow_cuts(monkeypatch):
    """Each cut's quantities 110 s on the 1-layer cut, 210 s on the 2-layer one."""
    monkeypatch.setattr(
        ce, "time_cut", lambda cfg, k, *a, **kw: dict.fromkeys(ce.QUANTITIES, 10.0 + 100.0 * k)
    )


@pytest.fixture
def no_load(monkeypatch):
    """Loading the model fails loudly: only a stop that comes before loading passes."""

    def refuse(*_a, **_kw):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(run_mod.RunModels, "load", refuse)


def test_predict_stops_before_loading_when_the_estimate_says_so(
    small_plan, slow_cuts, no_load, tmp_path, capsys
):
    got = predict_mod.predict("tiny-ouro", slice_seconds=1.0)
    assert got.stopped and got.warnings == got.estimate.warnings
    assert "past the 20-min limit" in got.warnings[0]
    assert main(["certify", "tiny-ouro", "--predict", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "quick plan on tiny-ouro, estimated from 1- and 2-layer cuts (n_core 2" in out
    assert "  exact laws: " in out and "the measured prediction: " in out
    stops = [line for line in out.splitlines() if line.startswith("stopped: ")]
    assert "its largest part is" in stops[0] and all(flag in stops[-1] for flag in FLAGS)
    assert "predicted per check" not in out and not (tmp_path / "certificate.json").exists()


def test_predict_measured_goes_on_past_the_estimate(small_plan, slow_cuts):
    got = predict_mod.predict("tiny-ouro", slice_seconds=0.2, measured=True)
    assert not got.stopped and got.estimate.warnings and got.units


def test_predict_measured_needs_predict(tmp_path, capsys):
    assert main(["certify", "tiny-ouro", "--predict-measured", "--out", str(tmp_path)]) == 2
    assert "--predict-measured goes with --predict SECONDS" in capsys.readouterr().err


def test_a_cut_that_does_not_fit_is_refused_before_it_is_built(monkeypatch):
    monkeypatch.setenv("LOOPCERT_MEMORY_FREE", "1M")
    monkeypatch.setattr(ce, "time_cut", lambda *a, **kw: pytest.fail("a cut was built"))
    with pytest.raises(Exception, match="the 2-layer cut of ouro-1.4b does not fit"):
        ce.estimate("ouro-1.4b", QUICK, torch.float32, "cpu", fastdec_grid(4, False), 270.0)
