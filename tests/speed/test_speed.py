"""speed and reports/speedup.py: the arithmetic in closed form (ideal speedup,
efficiency, paired ratios, the performance model, the Theorem 2 fit), the measurements on a
tiny model (determinism, call accounting, depth spectrum against refdec), certify's speed check
against `loopcert bench` (one protocol, one figure), and the rendering."""

import json
import math
import re
import time
from types import SimpleNamespace

import pytest
import torch

import refdec
from fastdec import DecodeConfig, Decoder
from proofs.checks.speed import check_speed
from proofs.decoders.candidates import Candidate, fastdec_candidate, fastdec_grid
from refdec import LoopedLM
from refdec.config import get_preset
from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams, transform
from reports.speedup import render
from speed import context, costs, rows, settings, targets, theorem2_vs_measured, timing
from speed import measure as bench_mod
from speed.batch_table import BatchPlan
from speed.report import BenchPlan
from speed.timing import Workload

PROMPTS = [(1, 2, 3, 4, 5, 6), (7, 3, 9, 1), (2, 2, 8, 5, 0, 11, 4)]


@pytest.fixture(scope="module")
def model():
    """tiny-raven at R=8 with the adapter's state half damped: depths agree the way a trained
    looped model's readouts converge (a speed-only knob), so drafts get accepted."""
    m = LoopedLM(get_preset("tiny-raven").replace(recurrence=8)).init_weights(2)
    with torch.no_grad():
        m.adapter.weight[:, : m.cfg.d_model] *= 0.3
    return m.eval()


def test_settings_labels_and_grid():
    assert DecodeConfig("pipelined", draft_depth=2, second_depth=8).label == "pipelined d1=2 d2=8"
    assert DecodeConfig("draft-verify", draft_depth=4, draft_ahead=4).label == "draft-verify d1=4 k=4"
    for R in (4, 8, 32):
        for quick in (True, False):
            g = settings.grid(R, quick)
            assert g[0].label == "autoregressive" and len({s.label for s in g}) == len(g)
            for s in g[1:]:
                assert s.draft_depth < R and (s.second_depth is None or s.draft_depth < s.second_depth < R)
    labels = {s.label for s in settings.grid(32, True)}
    assert {"pipelined d1=2 d2=8", "draft-verify d1=4 k=4"} <= labels  # the targets
    assert [s.label for s in settings.gate_settings(32)] == [
        "autoregressive",
        "draft-verify d1=4 k=4",
        "pipelined d1=2",
        "pipelined d1=2 d2=8",
    ]
    assert settings.rewind_depths(32) == [4, 8, 16] and settings.rewind_depths(4) == [1, 2]
    # the batch table: the gate settings and a deeper-drafting pipeline where R allows one
    assert [s.label for s in settings.batch_settings(32)][-2:] == ["pipelined d1=4", "pipelined d1=8"]
    assert [s.label for s in settings.batch_settings(16)][-1] == "pipelined d1=4"  # R/8 = 2: not deeper
    assert settings.batch_settings(8) == settings.gate_settings(8)
    for R in (2, 3, 4, 7):  # the tiny presets' depths: R // 8 = 0 is no depth (it raised)
        assert settings.batch_settings(R) == settings.gate_settings(R)


def test_ratio_is_paired_by_round():
    # a load spike in round 2 slows both settings: per-round pairing cancels it
    assert timing.ratio([1.0, 3.0, 1.0], [0.5, 1.5, 0.5]) == 2.0
    assert timing.ratio([1.0, 1.0, 1.0], [0.5, 0.25, 1.0]) == 2.0  # the median, not the mean
    assert math.isnan(timing.ratio([], []))


def _times(calls_by_label, seconds, rounds=2, tokens=10):
    """Synthetic time_runs output: decode time per round, call counts and pooled call seconds."""
    out = {}
    for label, calls in calls_by_label.items():
        stats = {k: 0 for k in timing.COUNTS}
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
    pooled = costs.pooled_costs(t)
    assert pooled[("recur", 16)][:2] == pytest.approx((2e-3, 2e-3))
    ar, pipe = rows.rows_from(
        t, [DecodeConfig("autoregressive"), DecodeConfig("pipelined", draft_depth=2)], pooled
    )
    assert ar.speedup == 1.0 and ar.ideal_speedup == pytest.approx(0.35 / 0.325)
    assert pipe.speedup == pytest.approx(3.5)
    assert pipe.ideal_speedup == pytest.approx((0.35 / 10) / (0.09 / 10))
    assert pipe.efficiency == pytest.approx(0.09 / 0.1)  # = ideal time / measured time
    assert pipe.efficiency == pytest.approx(pipe.speedup / pipe.ideal_speedup)


def test_time_runs_on_a_tiny_model(model):
    grid = [
        DecodeConfig("autoregressive"),
        DecodeConfig("pipelined", draft_depth=2, second_depth=4),
        DecodeConfig("draft-verify", draft_depth=2, draft_ahead=3),
    ]
    decs = {s.label: Decoder(model, s) for s in grid}
    t = timing.time_runs(decs, PROMPTS, 10, 2)
    for s in grid:
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
    got = rows.rows_from(t, grid, costs.pooled_costs(t))
    assert all(r.ideal_speedup > 0 and 0 < r.efficiency for r in got)


def test_depth_spectrum_against_refdec(model):
    gen = [[3, 4, 5, 6], [1, 1, 2]]
    s = theorem2_vs_measured.depth_spectrum(model, PROMPTS[:2], gen)
    R = model.cfg.recurrence
    assert s.positions == 7 and s.depth == list(range(1, R + 1))
    assert s.mean_tv[-1] == 0 and s.agreement[-1] == 1
    assert all(0 <= tv <= 1 for tv in s.mean_tv) and all(0 <= a <= 1 for a in s.agreement)
    # by hand: depth 2 at the first decoded position of prompt 0
    ids = list(PROMPTS[0])
    laws = transform(model.depth_logits(ids, [2, R])[:, -1], SamplingParams(temperature=1.0))
    tv = 0.5 * float((laws[0] - laws[1]).abs().sum())
    s1 = theorem2_vs_measured.depth_spectrum(model, PROMPTS[:1], [[7]])
    assert s1.mean_tv[1] == pytest.approx(tv, rel=1e-5, abs=1e-7)  # float32 model, SDPA vs refdec attention


def _spectrum(mean_tv):
    R = len(mean_tv)
    return theorem2_vs_measured.DepthSpectrum(R, 1, 1.0, list(range(1, R + 1)), mean_tv, mean_tv, [1.0] * R)


def test_theorem2_compare_recovers_a_power_law():
    R, alpha, beta = 32, 1.03, 0.175
    spectrum = _spectrum([beta * r**-alpha for r in range(1, R)] + [0.0])
    grid = [
        SimpleNamespace(strategy="pipelined", draft_depth=a, second_depth=b, speedup=s, label=f"{a},{b}")
        for a, b, s in ((1, None, 2.0), (2, 8, 3.5), (4, 8, 3.0))
    ]
    t = theorem2_vs_measured.theorem2_compare(spectrum, grid)
    assert t.fitted and t.alpha == pytest.approx(alpha) and t.beta == pytest.approx(beta)
    assert (round(t.d1_star, 2), round(t.d2_star, 2)) == (1.26, 8.85)  # the published check
    assert t.measured_best.d1 == 2 and t.measured_best_with_d2.d2 == 8
    assert t.best_on_grid in ((2, 8), (4, 8)) and set(t.bound_cost) == {"2,8", "4,8"}
    flat = theorem2_vs_measured.theorem2_compare(_spectrum([0.0] * R), grid)
    assert not flat.fitted and "two distinct depths" in flat.reason
    # a curve that grows with depth (tiny-raven's random weights): no optimum, said, not raised
    rising = theorem2_vs_measured.theorem2_compare(_spectrum([0.1 * r for r in range(1, R)] + [0.0]), grid)
    assert not rising.fitted and "does not decay with depth (fitted alpha" in rising.reason
    assert rising.measured_best.d1 == 2 and rising.d1_star is None


def test_perf_model_matches_design_formula(model):
    R, d1 = 32, 2
    small, big = context.perf_model(model, d1, R, 1), context.perf_model(model, d1, R, 10**7)
    wb, a = small.weight_bytes, small.kv_bytes_per_lane
    assert small.predicted == pytest.approx(R * (wb + a) / (d1 * wb + R * a))
    assert big.kv_bytes_per_lane == a * 10**7
    assert 0.9 * R / d1 < small.predicted <= R / d1 and big.predicted == pytest.approx(1.0, abs=0.01)


def test_long_sequence_cycles_the_prompts():
    assert context.long_sequence([(1, 2), (3,)], 7) == [1, 2, 3, 1, 2, 3, 1]
    with pytest.raises(LoopcertError):
        context.long_sequence([()], 3)


@pytest.mark.parametrize("d1", [1, 2, 5])
def test_fill_steps_are_exact_for_a_pipeline_that_never_rejects(d1):
    """With the adapter's state half zeroed every depth reads out the same law: every draft is
    accepted, and the steps per token are exactly the pipeline's fill formula."""
    m = LoopedLM(get_preset("tiny-raven").replace(recurrence=8)).init_weights(2)
    with torch.no_grad():
        m.adapter.weight[:, : m.cfg.d_model] *= 0.0
    dec = Decoder(m.eval(), DecodeConfig("pipelined", draft_depth=d1))
    s = dec.generate(list(PROMPTS[0]), 20, SamplingParams(), 0).stats
    assert s.accepted == s.proposals > 0
    assert s.steps / s.decode_tokens == pytest.approx(context.fill_steps_per_token(8, d1, s.decode_tokens))


TINY_PLAN = BenchPlan(
    "quick",
    Workload(prompts=2, prompt_len=6, tokens=8, repeats=2),
    sampling_repeats=1,
    lengths=(8, 24),
    sweep_tokens=6,
    sweep_repeats=1,
    batch=BatchPlan(
        batches=(1, 2), prompt_len=6, tokens=4, repeats=1, sample_batch=4, sample_calls=1, sample_alone=2
    ),
)


def test_bench_end_to_end_renders(model):
    from proofs.decoders.naive_kv import NaiveKVDecoder

    res = bench_mod.bench(model, "tiny-raven R=8", TINY_PLAN, PROMPTS, naive=NaiveKVDecoder(model))
    data = res.to_json()
    json.dumps(data, allow_nan=False)  # strict JSON
    assert data["rows"][0]["label"] == "autoregressive" and data["plan"]["grid"]["tokens"] == 8
    md = render(res)
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
        "## Batches",
    ):
        assert section in md
    assert "issue" not in md.lower()
    assert res.naive.same_tokens
    assert [r.context for r in res.context.rows] == [8, 24]
    for r in res.context.rows:  # measured / model is exactly the product of the named factors
        assert r.of_model == pytest.approx(math.prod(context.factors(r).values()), rel=1e-9)
        assert r.engine_factor == pytest.approx(r.of_model / (r.fill_factor * r.rejection_factor), rel=1e-9)
    assert res.context.main_loss in context.factors(res.context.rows[-1])
    assert "### Where the difference from the model goes" in md
    last, cause = res.context.rows[-1], res.context.step_cause
    assert (cause.context, cause.width) == (last.context, last.width)
    assert cause.share == max(last.parts_w.shares().values()) and "the largest part of it is" in md
    for r in res.context.rows:  # the parts' totals are the step-cost figures of the row
        assert (r.parts_1.width, r.parts_w.width, r.parts_1.total, r.parts_w.total) == (
            1,
            r.width,
            r.recur_1,
            r.recur_w,
        )
    # the honest baseline: every timed setting over proofs.decoders.naive_kv, and the target on the best
    # pipelined
    assert set(res.naive.over_naive) == {r.label for r in res.rows}
    assert any(t.name.startswith("best pipelined (") and "naive_kv" in t.name for t in res.targets)
    assert "speedup over proofs.decoders.naive_kv" in md
    assert all(r.label in md for r in res.rows)
    assert [(r.label, r.batch) for r in res.batch.rows][:2] == [("autoregressive", 1), ("autoregressive", 2)]
    judged = {t.name.split(" (")[0] for t in res.targets}
    assert "best pipelined at B=2" in judged
    assert "samples/s through generate_batch >= 20x generate() one at a time" in judged
    assert "Why B=2 speedups are small" in md and "us/lane-step" in md  # the step cost against width
    assert "us/lane-step (decoding)" in md  # each setting's own cost per lane-step at B
    assert "us/lane-step (decoding)" in md  # each setting's own cost per lane-step at B
    assert render(res) == md  # rendering computes nothing


def test_targets_are_judged_in_proofs_not_in_the_renderer():
    row = SimpleNamespace(label="pipelined d1=2 d2=8", strategy="pipelined", speedup=2.9, efficiency=0.9)
    dv = SimpleNamespace(label="draft-verify d1=4 k=4", strategy="draft-verify", speedup=1.9, efficiency=0.7)
    got = {t.name: t for t in targets.judge([row, dv], None)}
    assert not got["pipelined (2, 8) >= 3.0x"].met and got["draft-verify (draft 4, ahead 4) >= 1.8x"].met
    worst = got["efficiency >= 0.8 for every setting (lowest: draft-verify d1=4 k=4)"]
    assert not worst.met and worst.measured == 0.7


# -- certify's speed check: the same protocol as `loopcert bench` ---------------------------------


def test_speed_check_reports_ratios_and_fails_only_on_errors():
    model = refdec.load_model("tiny-ouro")
    grid = fastdec_grid(4, False)
    work = Workload(prompts=1, prompt_len=8, tokens=6, repeats=1)
    r = check_speed("speed", grid, grid[0], model, [(1, 2, 3)], work)
    assert r.kind == "speed" and r.passed and r.details.rows[0].speedup == 1.0
    assert len(r.details.rows) == 3 and all(math.isfinite(x.speedup) for x in r.details.rows)
    assert r.details.rows[1].gamma is not None  # fastdec telemetry carried over

    def broken(m):
        raise RuntimeError("cannot build")

    baseline = fastdec_candidate(DecodeConfig("autoregressive"))
    r = check_speed("speed", [Candidate("broken", broken)], baseline, model, [(1, 2, 3)], work)
    assert not r.passed and "cannot build" in r.details.errors[0].error


def test_the_speed_check_prepares_a_user_decoder_before_timing_it():
    """The protocol's `prepare(n_positions)` (docs/decoders.md): certify calls it before it times a
    decoder, the speed check included, with the longest sequence it will time (prompt + tokens)."""
    model = refdec.load_model("tiny-ouro")
    events = []

    class Prepared:
        def __init__(self, m):
            self.inner = Decoder(m, "autoregressive")

        def prepare(self, n_positions):
            events.append(("prepare", n_positions))

        def generate(self, prompt, n, sampling, seed):
            events.append(("generate", len(prompt)))
            return self.inner.generate(prompt, n, sampling, seed)

    work = Workload(prompts=2, prompt_len=8, tokens=6, repeats=1)
    base = fastdec_candidate(DecodeConfig("autoregressive"))
    r = check_speed("speed", [Candidate("mine", Prepared)], base, model, [(1, 2, 3), tuple(range(10))], work)
    assert r.passed and [row.setting for row in r.details.rows] == ["autoregressive (baseline)", "mine"]
    assert events[0] == ("prepare", 8 + 6) and events.count(("prepare", 14)) == 1


@pytest.fixture
def tick_clock(monkeypatch):
    """Every read of either clock advances it by 2^-10 s (~1 ms; a power of two, so differences of
    readings are exact): timings become a deterministic count of clock reads, so two runs of one
    protocol agree exactly and two protocols do not."""
    now = [0.0]

    def read():
        now[0] += 2.0**-10
        return now[0]

    monkeypatch.setattr(time, "perf_counter", read)
    monkeypatch.setattr(time, "process_time", read)


def test_certificate_and_speedup_report_give_one_speedup_for_one_setting(model, tick_clock):
    res = bench_mod.bench(model, "tiny-raven R=8", TINY_PLAN, PROMPTS)
    by_label = {r.label: r for r in res.rows}
    cands = [
        fastdec_candidate(DecodeConfig("autoregressive")),
        fastdec_candidate(DecodeConfig("pipelined", draft_depth=2)),
        fastdec_candidate(DecodeConfig("draft-verify", draft_depth=4, draft_ahead=4)),
    ]
    cert = check_speed("speed", cands, cands[0], model, PROMPTS, TINY_PLAN.grid)
    rows_by = {r.setting: r for r in cert.details.rows}
    assert cert.details.clock == res.clock
    for label in ("pipelined d1=2", "draft-verify d1=4 k=4"):
        assert rows_by[label].speedup == by_label[label].speedup
        assert rows_by[label].tokens_per_s == by_label[label].tokens_per_s
    # negative control: certify's old protocol (whole generate() calls) gives another figure
    whole = timing.time_runs(
        {"a": cands[0].build(model), "b": cands[1].build(model)}, TINY_PLAN.grid.select(PROMPTS), 8, 2
    )
    old = timing.ratio(whole["a"]["cpu_total"], whole["b"]["cpu_total"])
    assert old != rows_by["pipelined d1=2"].speedup


def test_call_parts_times_every_part_and_removes_its_instruments(model):
    """Each part is hit in the engine's own calls (a part the engine stopped calling would read 0)
    and the instruments are gone afterwards: the same outputs, bit for bit, before and after."""
    import fastdec.engine
    import refdec.layers

    eng = Decoder(model, DecodeConfig("pipelined", draft_depth=2)).engine(64)
    # positions 0..3: they read nothing the probes (around position 24) write
    lanes = costs.probe_lanes(eng, "recur", 4, 0, torch.Generator().manual_seed(1))
    before = eng.run_phase("recur", lanes)[1][0]
    funcs = (fastdec.engine.attention, refdec.layers.mlp)
    for reads in ("view", "gather"):
        eng.reads = reads
        p = costs.call_parts(eng, 24, 4, calls=2)
        assert p.width == 4 and p.context == 24 and p.total > 0
        for part in ("host", "cache_write", "cache_read", "attention", "mlp"):
            assert getattr(p, part) > 0, (reads, part)
        assert p.other == pytest.approx(p.total - sum(getattr(p, k) for k in p.shares() if k != "other"))
    eng.reads = "view"
    tl = eng.timeline("recur")
    assert (fastdec.engine.attention, refdec.layers.mlp) == funcs
    assert not {"write", "run_view", "side_view", "gather"} & set(vars(tl))
    assert torch.equal(eng.run_phase("recur", lanes)[1][0], before)


@pytest.mark.tier2
def test_the_speedup_report_runs_to_its_end_on_a_tiny_preset(tmp_path):
    """`loopcert bench` on the tiny presets (R < 8, random weights) failed after all its timing:
    tiny-raven's depth curve, which grows with depth, made Theorem 2's optimum raise, and the batch
    table built a pipeline of draft depth R // 8 = 0 (every tiny preset). The report is written now,
    saying why no envelope was fitted."""
    from loopcert.cli import main

    argv = ["bench", "tiny-raven", "--quick", "--tokens", "4", "--repeats", "1", "--out", str(tmp_path)]
    assert main(argv) == 0
    md = (tmp_path / "speedup.md").read_text()
    assert (
        json.loads((tmp_path / "speedup.json").read_text())["theorem2"]["R"]
        == get_preset("tiny-raven").recurrence
        < 8
    )
    assert "Envelope not fitted: the mean TV to the full depth does not decay with depth" in md


@pytest.fixture
def compile_watch(monkeypatch):
    """Compiled decoders "compile" each graph into the eager step itself (what is compiled when, not
    how: tests/fastdec/test_compiled.py traces the graphs), and every generate / generate_batch call
    records (decoder, name, whether a graph compiled during it, its arguments)."""
    import fastdec.compiled as compiled_mod

    made, calls = [], []
    real_init = compiled_mod.CompiledPhases.__init__

    def init(self, engine, backend="inductor"):
        real_init(self, engine, backend)
        made.append(self)

    monkeypatch.setattr(compiled_mod.CompiledPhases, "_wrap", lambda self, step: step)

    def compiled_so_far():
        return sum(len(p.compile_seconds) for p in made)

    def watch(name):
        real = getattr(Decoder, name)

        def call(self, *a, **k):
            before = compiled_so_far()
            out = real(self, *a, **k)
            calls.append((self, name, compiled_so_far() > before, repr((name, a, k))))
            return out

        monkeypatch.setattr(Decoder, name, call)

    monkeypatch.setattr(compiled_mod.CompiledPhases, "__init__", init)
    watch("generate")
    watch("generate_batch")
    return calls


def test_time_runs_compiles_a_compiled_decoder_before_timing_it(model, compile_watch):
    """Two prompts whose sequences need two cache sizes (64 and 128 positions: two engines, each
    compiling its own graphs) and widths a short warm-up never reaches: a compiled decoder's warm-up
    decodes the whole workload, so no call of a round compiles (the figures would time compiles as
    decoding); compile_seconds says what it took. An eager decoder warms up on 4 tokens."""
    V = model.cfg.vocab_size
    prompts = [tuple(range(1, 9)), tuple(t % V for t in range(80))]
    dec = Decoder(model, DecodeConfig("pipelined", draft_depth=2), compile=True)
    eager = Decoder(model, "autoregressive")
    t = timing.time_runs({"p": dec, "eager": eager}, prompts, 12, 2)
    assert t["p"]["compile_seconds"] > 0 and t["eager"]["compile_seconds"] == 0.0
    # timed whole: per-call timing would run its unfused per-phase graphs, not its fused steps
    assert not dec.time_calls and not t["p"]["call_seconds"] and eager.time_calls
    assert sorted(k[0] for k in dec._engines) == [64, 128]
    calls = [name for d, name, _, _ in compile_watch if d is dec]
    assert calls.count("generate") == 2 + 2 * 2  # the warm-up and 2 rounds, 2 prompts each
    assert [name for d, name, _, _ in compile_watch if d is eager].count("generate") == 1 + 2 * 2
    # the rounds' 4 generate calls, each with the generate_batch it makes: none compiled
    timed = [compiled for d, _, compiled, _ in compile_watch if d is dec][-8:]
    assert len(timed) == 8 and not any(timed)


@pytest.mark.tier2
def test_a_compiled_bench_times_compiled_decoders_warmed_up_by_the_calls_they_time(model, compile_watch):
    """`loopcert bench --compile`: every decoder the report times (the grid, the sampling table, the
    context sweep, the batch rows and samples/s) runs compiled steps, and no call it times compiles
    (its warm-ups make the same calls first); only the untimed telemetry decodes eager. The stamp
    says so."""
    res = bench_mod.bench(model, "tiny-raven R=8", TINY_PLAN, PROMPTS, compile=True)
    assert {name for d, name, _, _ in compile_watch if d.compile} == {"generate", "generate_batch"}
    eager = [d for d, _, _, _ in compile_watch if not d.compile]
    # a compiled decoder's timed call repeats its warm-up's (the same arguments): every call is made
    # at least twice, and only a first one may compile (a short warm-up, then a longer timed call
    # that compiles, fails both)
    seen = {}
    for d, _, during, args in (c for c in compile_watch if c[0].compile):
        key = (id(d), args)
        assert not (during and key in seen), f"a repeated call of {d.config.label} compiled"
        seen[key] = seen.get(key, 0) + 1
    assert min(seen.values()) >= 2
    assert eager and all(d.config.telemetry_depths for d in eager)  # speed.rows.telemetry's
    assert res.stamp["compile"] is True and res.stamp["compile_seconds"] > 0
    assert res.context.compiled and res.context.compile_seconds > 0
    assert res.batch.compiled and res.batch.compile_seconds > 0
    assert all(math.isnan(r.ideal_speedup) for r in res.rows) and not res.step_costs  # timed whole
    md = render(res)
    assert "compiled (--compile" in md and "timed on an eager engine's calls" in md
    assert "Not timed: compiled decoders are timed whole" in md and "efficiency >= 0.8" not in md
    plain = bench_mod.bench(model, "tiny-raven R=8", TINY_PLAN, PROMPTS)
    assert plain.stamp["compile"] is False and plain.stamp["compile_seconds"] == 0.0
    assert re.search(r"\| engine steps +\| eager +\|", render(plain))


def test_bench_compile_is_refused_with_the_gate_and_stamped(tmp_path, capsys):
    """The gate's baseline is eager fastdec's (bitwise exact figures): --compile with --gate or
    --write-baseline is a usage error naming both, before any work; the report's command says
    --compile, so a rerun of it is compiled too."""
    import argparse

    from loopcert.cli import main
    from loopcert.commands.bench import add_arguments, command_line

    for flag in ("--gate", "--write-baseline"):
        argv = ["bench", "tiny-raven", "--quick", "--compile", flag, "--baseline", str(tmp_path / "b.json")]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"--compile with {flag}" in err and "drop --compile" in err
    assert not (tmp_path / "b.json").exists()
    p = argparse.ArgumentParser()
    add_arguments(p)
    for argv, compiled in ((["tiny-raven", "--compile"], True), (["tiny-raven"], False)):
        args = p.parse_args(argv)
        args.threads = 1
        assert ("--compile" in command_line(args).split()) == compiled
