"""proofs.gates.baseline: the regression gates pass on the decoder that wrote the baseline and fail,
naming the figure, the baseline, the measured value and the tolerance, on a deliberately slowed
decoder (speed.slowdown: 25% dearer per step) and on a less accepting one (greedy
verification rejecting accepted proposals); the exact figures do not depend on the CPU's kernels;
a baseline of other weights or another protocol is refused. proofs.gates.false_alarm's maths in
closed form."""

import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys

import pytest
import torch

import fastdec.strategies
from fastdec import DecodeConfig, Decoder
from fastdec.accept import Source
from proofs.gates import baseline as gates
from proofs.gates import false_alarm
from refdec import LoopedLM
from refdec.config import get_preset
from refdec.errors import LoopcertError
from speed.slowdown import slow
from speed.timing import Workload

PROMPTS = [(1, 2, 3, 4, 5, 6), (7, 3, 9, 1, 4)]
PLAN = Workload(prompts=2, prompt_len=8, tokens=12, repeats=2)  # the default run's tests time nothing
R = 8
SETTINGS = [
    DecodeConfig("autoregressive"),
    DecodeConfig("pipelined", draft_depth=3),
    DecodeConfig("pipelined", draft_depth=3, second_depth=5),
]
SLOWED = "pipelined d1=3 d2=5"


def damped_model(seed=2):
    m = LoopedLM(get_preset("tiny-raven").replace(recurrence=R)).init_weights(seed)
    with torch.no_grad():  # depths agree, as a trained looped model's do
        m.adapter.weight[:, : m.cfg.d_model] *= 0.3
    return m.eval()


@pytest.fixture(scope="module")
def model():
    return damped_model()


@pytest.fixture(scope="module")
def baseline(model):
    return gates.measure(model, "tiny", PROMPTS, PLAN, settings=SETTINGS)


def greedy_only(baseline):
    """The greedy half of the baseline: the failing variants are timed greedy only (fast tests)."""
    return {**baseline, "figures": {"greedy": baseline["figures"]["greedy"]}}


def by_name(results):
    return {r.name: r for r in results}


# Timing-dependent (speed figures within the gate's tolerance): nightly, and in `tox -e gate`
# (benchmarks/test_bench.py), never in the default run: the team rule is no timed assertions
# in tests that gate every change.
@pytest.mark.slow
def test_the_baseline_passes_its_own_gate(model):
    plan = dataclasses.replace(PLAN, repeats=5)
    baseline = gates.measure(model, "tiny", PROMPTS, plan, settings=SETTINGS)
    again = gates.measure(model, "tiny", PROMPTS, plan, settings=SETTINGS)
    results = gates.compare(again, baseline)
    assert not gates.failures(results), gates.failures(results)
    kinds = [r.details.what for r in results]
    assert kinds.count("speed") == 2 * 2 and kinds.count("exact") == 2 * 3 * len(gates.EXACT)
    # the exact figures really are exact: a second run reproduces every one
    assert all(r.details.measured == r.details.baseline for r in results if r.details.what == "exact")


@pytest.mark.slow
def test_a_setting_made_25_percent_dearer_fails_on_its_speed_figure_only(model):
    plan = Workload(prompts=2, prompt_len=8, tokens=24, repeats=9)
    base = gates.measure(model, "tiny", PROMPTS, plan, settings=SETTINGS, modes=["greedy"])

    def build(st, dtype):
        dec = Decoder(model, st, dtype=dtype)
        return slow(dec, 0.25) if st.label == SLOWED else dec

    cur = gates.measure(model, "tiny", PROMPTS, plan, build=build, settings=SETTINGS, modes=["greedy"])
    results = gates.compare(cur, base, tolerance=0.12)
    bad = gates.failures(results)
    assert len(bad) == 1 and bad[0].startswith(
        f"greedy / {SLOWED} / speedup (speedup over autoregressive)"
    ), bad
    assert "baseline" in bad[0] and "measured" in bad[0] and "tolerance 0.12" in bad[0]
    assert (
        by_name(results)[f"greedy / {SLOWED} / speedup"].measured
        < 0.9 * base["figures"]["greedy"][SLOWED]["speedup"]
    )


def test_the_slowdown_hook_adds_work_and_changes_nothing_else(model):
    plain = Decoder(model, SETTINGS[2]).generate(list(PROMPTS[0]), 12)
    dec = slow(Decoder(model, SETTINGS[2]), 0.25)
    res = dec.generate(list(PROMPTS[0]), 12)
    assert res.tokens == plain.tokens and res.stats.steps == plain.stats.steps
    assert (
        dec.slowdown.steps == res.stats.steps + res.stats.prefill_steps - 1
    )  # all but the call's first step
    with pytest.raises(LoopcertError, match="fraction"):
        slow(Decoder(model, SETTINGS[2]), 0)


def test_a_speed_drop_beyond_the_tolerance_fails_naming_figure_baseline_measured_tolerance(baseline):
    cur = json.loads(json.dumps(baseline))
    fig = cur["figures"]["sampling"][SLOWED]
    fig["speedup"] = baseline["figures"]["sampling"][SLOWED]["speedup"] * 0.75  # 25% lower
    results = gates.compare(cur, baseline, tolerance=0.2)
    bad = gates.failures(results)
    want, got = baseline["figures"]["sampling"][SLOWED]["speedup"], fig["speedup"]
    assert bad == [
        f"sampling / {SLOWED} / speedup (speedup over autoregressive): baseline {want:.3f}x, "
        f"measured {got:.3f}x, tolerance 0.2: below {want * 0.8:.3f}x, REGRESSION"
    ]
    r = by_name(results)[f"sampling / {SLOWED} / speedup"]
    assert (r.details.baseline, r.details.measured, r.details.tolerance) == (want, got, 0.2)
    fig["speedup"] = want * 0.85  # within the tolerance: passes
    assert not gates.failures(gates.compare(cur, baseline, tolerance=0.2))


def test_an_acceptance_rule_rejecting_more_fails_the_exact_figures(model, baseline, monkeypatch):
    verify, seen = fastdec.strategies.greedy_verify, {"accepted": 0}

    def reject_every_third(target, proposals):  # still emits the target's token: lossless, less accepting
        tok, src = verify(target, proposals)
        if src != Source.RESTART:
            seen["accepted"] += 1
            if seen["accepted"] % 3 == 0:
                return tok, Source.RESTART
        return tok, src

    monkeypatch.setattr(fastdec.strategies, "greedy_verify", reject_every_third)
    quick = {**greedy_only(baseline), "plan": {**baseline["plan"], "repeats": 1}}
    cur = gates.measure(
        model, "tiny", PROMPTS, Workload(**quick["plan"]), settings=SETTINGS, modes=["greedy"]
    )
    results = by_name(gates.compare(cur, quick))
    was = baseline["figures"]["greedy"][SLOWED]["exact"]["accepted"]
    r = results[f"greedy / {SLOWED} / accepted"]
    assert not r.passed and r.details.what == "exact" and r.details.baseline == was and r.measured < was
    assert r.details.message == (
        f"greedy / {SLOWED} / accepted (exact): baseline {was}, measured {r.details.measured}, "
        "tolerance none (any change fails)"
    )
    assert results[f"greedy / {SLOWED} / tokens_sha"].passed  # same tokens: only the counts tell
    assert results["greedy / autoregressive / tokens"].passed  # the baseline accepts nothing


@pytest.mark.tier2
def test_the_exact_figures_do_not_depend_on_the_cpu_kernels(baseline):
    """The exact pass under ATEN_CPU_CAPABILITY=default (torch's most portable kernels) in a child
    process gives this process's figures bit for bit."""
    code = (
        "import json, sys, torch; torch.set_num_threads(1)\n"
        "from test_gates import *\n"
        "plan = Workload(prompts=2, prompt_len=8, tokens=12, repeats=1)\n"
        "m = gates.measure(damped_model(), 'tiny', PROMPTS, plan, settings=SETTINGS)\n"
        "print(json.dumps([torch.backends.cpu.get_cpu_capability(), m['figures']]))\n"
    )
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    capability, figures = json.loads(out.stdout.splitlines()[-1])
    assert capability == "DEFAULT"
    exact = lambda f: {m: {lb: v["exact"] for lb, v in per.items()} for m, per in f.items()}  # noqa: E731
    assert exact(figures) == exact(baseline["figures"])


def test_a_baseline_of_other_weights_or_another_protocol_is_refused(baseline, tmp_path):
    other = gates.measure(
        damped_model(seed=3),
        "tiny",
        PROMPTS,
        Workload(prompts=1, prompt_len=4, tokens=4, repeats=1),
        settings=SETTINGS,
    )
    results = gates.compare(other, baseline)
    assert len(results) == 1 and not results[0].passed
    assert "model_fingerprint" in results[0].details.baseline and gates.REWRITE in gates.failures(results)[0]
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(baseline))
    assert gates.read_baseline(path) == baseline
    assert baseline["protocol"] == gates.PROTOCOL and baseline["machine"]["cores"] == os.cpu_count()
    P = gates.PROTOCOL
    for old in ({k: v for k, v in baseline.items() if k != "protocol"}, {**baseline, "protocol": 99}):
        path.write_text(json.dumps(old))
        was = old.get("protocol", 1)
        with pytest.raises(
            LoopcertError, match=rf"protocol {was}, this gate measures with protocol {P}.*write-baseline"
        ):
            gates.read_baseline(path)
    with pytest.raises(LoopcertError, match="write-baseline"):
        gates.read_baseline(tmp_path / "missing.json")


@pytest.mark.tier2
def test_cli_writes_a_baseline_and_gates_against_it(tmp_path, capsys):
    from loopcert.cli import main

    base = tmp_path / "baseline.json"
    common = ["tiny-raven", "--baseline", str(base), "--out", str(tmp_path / "out")]
    assert main(["bench", *common, "--quick", "--write-baseline", "--tokens", "8", "--repeats", "2"]) == 0
    data = json.loads(base.read_text())
    assert data["model"] == "tiny-raven" and data["settings"][0] == "autoregressive"
    assert (data["plan"]["tokens"], data["plan"]["repeats"]) == (8, 2)  # --gate reuses the baseline's plan
    assert data["protocol"] == gates.PROTOCOL and data["commit"] and data["machine"]["cpu_capability"]
    out = capsys.readouterr().out
    assert f"protocol {gates.PROTOCOL}, commit" in out and f"the mean of {gates.BASELINE_RUNS} runs" in out
    assert data["baseline_runs"] == gates.BASELINE_RUNS
    data["figures"]["greedy"]["pipelined d1=2"]["exact"]["accepted"] += 1  # pretend it used to accept more
    base.write_text(json.dumps(data))
    assert main(["bench", *common, "--quick", "--gate", "--reference", "stored", "--tolerance", "0.9"]) == 1
    out = capsys.readouterr().out
    assert "exact figures (float64 pass" in out and "fails below baseline x (1 - 0.9)" in out
    assert "against the baseline's stored ones (--reference stored" in out
    assert "FAIL greedy / pipelined d1=2 / accepted (exact): baseline" in out
    assert json.loads((tmp_path / "out" / "gate.json").read_text())["failures"]
    base.write_text(json.dumps({**data, "protocol": 1}))
    assert main(["bench", *common, "--gate"]) == 2  # refused, naming both protocols
    assert f"protocol 1, this gate measures with protocol {gates.PROTOCOL}" in capsys.readouterr().err
    assert main(["bench", *common, "--threads", "0"]) == 2  # a usage error


def test_false_alarm_maths():
    lo, hi = false_alarm.clopper_pearson(0, 10)
    assert lo == 0 and hi == pytest.approx(0.3085, abs=1e-4)  # 1 - 0.025 ** (1 / 10)
    lo, hi = false_alarm.clopper_pearson(3, 10)
    assert (lo, hi) == (pytest.approx(0.0667, abs=1e-4), pytest.approx(0.6525, abs=1e-4))
    s = 0.05
    # against a one-run baseline the difference of two draws spreads s sqrt 2 (Phi(x) = erfc(-x/sqrt 2)/2)
    assert false_alarm.false_rate(s, 0.1, 1) == pytest.approx(0.5 * math.erfc(-math.log(0.9) / (s * 2)))
    moved = math.log(0.9) + math.log(1.25)  # a 25% dearer step moves log(ratio) by log 1.25
    got = false_alarm.detect_rate(s, 0.1, baseline_runs=1)
    assert got == pytest.approx(0.5 * math.erfc(-moved / (s * 2)))
    # against the mean of 3 runs: s sqrt(1 + 1/3)
    c = s * math.sqrt(4 / 3) * math.sqrt(2)
    assert false_alarm.false_rate(s, 0.1, 3) == pytest.approx(0.5 * math.erfc(-math.log(0.9) / c))
    assert false_alarm.detect_rate(s, 0.1, baseline_runs=3) == pytest.approx(0.5 * math.erfc(-moved / c))
    # paired (None): the figure is itself the comparison, spread s
    paired = s * math.sqrt(2)
    assert false_alarm.false_rate(s, 0.1, None) == pytest.approx(0.5 * math.erfc(-math.log(0.9) / paired))
    assert false_alarm.detect_rate(s, 0.1, baseline_runs=None) == pytest.approx(
        0.5 * math.erfc(-moved / paired)
    )
    # the 5% quantile of chi-square with 9 degrees of freedom is 3.3251
    assert false_alarm.sd_upper(1.0, 10) == pytest.approx(math.sqrt(9 / 3.3251), abs=1e-3)
    tol = false_alarm.suggest_tolerance([s, s])
    assert false_alarm.run_rate([s, s], tol) < 1 / 50 <= false_alarm.run_rate([s, s], tol - 0.005)


def test_false_alarm_summary_counts_failures_per_figure(baseline):
    runs = []
    for scale in (1.0, 0.98, 0.7):  # the third run's ratio fell 30%: a failure at tolerance 0.2
        cur = json.loads(json.dumps(baseline))
        cur["figures"]["greedy"][SLOWED]["speedup"] *= scale
        runs.append(cur)
    results = [gates.compare(cur, baseline, 0.2) for cur in runs]
    out = false_alarm.summarise(runs, results, 0.2, 1, busy=False, slowed=None, seconds=1.0)
    fig = {f.figure: f for f in out.figures}
    hit = fig[f"greedy / {SLOWED} / speedup"]
    assert hit.failures == 1 and hit.interval == false_alarm.clopper_pearson(1, 3)
    assert hit.log_sd == pytest.approx(statistics.stdev([0.0, math.log(0.98), math.log(0.7)]))
    assert all(f.failures == 0 and f.log_sd == 0 for name, f in fig.items() if name != hit.figure)
    assert (out.run_failures, out.exact_failures, out.runs) == (1, 0, 3)
    assert f"greedy / {SLOWED} / speedup" in false_alarm.render(out)


def test_trimmed_ratio_drops_the_extreme_rounds():
    from speed.timing import trimmed_ratio

    # 10 rounds: ratios 2 (x8), one burst of load (0.5) and one lucky round (9): both dropped at 20%
    base = [2.0] * 8 + [1.0, 9.0]
    assert trimmed_ratio(base, [1.0] * 8 + [2.0, 1.0]) == pytest.approx(2.0)
    assert trimmed_ratio([1.0, 4.0], [1.0, 1.0]) == pytest.approx(2.0)  # 2 rounds: nothing dropped, geometric
    assert trimmed_ratio([1.0, 4.0], [1.0, 1.0], trim=0) == pytest.approx(2.0)
    assert math.isnan(trimmed_ratio([], []))


def test_a_baseline_is_the_geometric_mean_of_its_runs_and_refuses_runs_that_disagree(baseline, monkeypatch):
    runs = []
    for scale in (1.0, 2.0, 4.0):
        cur = json.loads(json.dumps(baseline))
        cur["figures"]["greedy"][SLOWED]["speedup"] *= scale
        runs.append(cur)
    said = []
    monkeypatch.setattr(gates, "measure", lambda *a, **kw: runs.pop(0))
    got = gates.measure_baseline(progress=said.append)
    fig = got["figures"]["greedy"][SLOWED]
    was = baseline["figures"]["greedy"][SLOWED]["speedup"]
    assert fig["speedup"] == pytest.approx(2 * was)  # (1 x 2 x 4) ** (1/3)
    assert fig["speedup_runs"] == pytest.approx([was, 2 * was, 4 * was])
    assert got["baseline_runs"] == gates.BASELINE_RUNS == 3 and said[0] == "baseline run 1/3"
    # negative control: a run whose exact figures differ is refused, naming the figure
    runs[:] = [json.loads(json.dumps(baseline)) for _ in range(2)]
    runs[1]["figures"]["sampling"][SLOWED]["exact"]["accepted"] += 1
    with pytest.raises(LoopcertError, match=f"sampling / {SLOWED} / accepted: the baseline's runs disagree"):
        gates.measure_baseline(runs=2)
