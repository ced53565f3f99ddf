"""How often the regression gate fails a change that did nothing (docs/speed.md "How often the
gate cries wolf"; figures: docs/measurements.md "Gate false alarms").

    python -m proofs.gates.false_alarm --runs 10 [--busy] [--baseline F] [--slow LABEL=0.25]
                                       [--reference auto|stored|COMMIT|FOLDER]

Runs the gate (proofs.gates.baseline; paired with the baseline's commit by default, as `loopcert
bench --gate`: proofs/gates/paired.py) `--runs` times on the unchanged tree against the baseline
file, optionally with a busy-loop process holding another core (`--busy`: the realistic CI host),
and reports per speed figure the spread of its ratio over the runs and the failure count with a
Clopper-Pearson 95% interval. Ten runs cannot show a rate below 1 in 50 by counting, so each
figure's run-to-run spread is also fitted: log(ratio) ~ Normal(mu, s^2) across runs, and a gate
run compares one draw against the baseline's, the mean of the log of b runs (the baseline file's
`baseline_runs`: gates.measure_baseline), so with c = sqrt(1 + 1/b) (c = 1 paired: the figure is
itself the comparison, the reference's noise inside its spread s)

    P(false failure of a figure) = Phi(log(1 - tol) / (s c))
    P(a figure made 1 + x dearer fails) = Phi((log(1 - tol) + log(1 + x)) / (s c))

and a whole gate run fails falsely with 1 - prod(1 - p_figure). `suggest_tolerance` is the
smallest tolerance at which that whole-run rate is below 1 in 50. `--slow LABEL=F` makes one
setting (1 + F) times dearer per engine step (speed.slowdown) to count detections instead.
Writes the figures as JSON (--out); a check returns data and this module's main prints it.
"""

from __future__ import annotations

import argparse
import math
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from scipy import stats

from proofs.gates import baseline as gates
from proofs.gates import paired
from refdec.errors import LoopcertError
from speed.slowdown import slow
from speed.timing import Workload

TARGET_RATE = 1 / 50  # the whole gate run's false-failure rate the tolerance is set for
SLOWDOWN = 0.25  # the slowdown the tolerance must still catch: a setting 25% dearer


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval for k failures in n runs."""
    a = (1 - confidence) / 2
    lo = 0.0 if k == 0 else float(stats.beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def spread_factor(baseline_runs: int | None) -> float:
    """c: how much wider the comparison spreads than one run's figure. Against a stored baseline
    averaged over b runs, sqrt(1 + 1/b); paired (None), 1: the figure is itself the comparison,
    the reference's noise already inside its run-to-run spread."""
    return 1.0 if baseline_runs is None else math.sqrt(1 + 1 / baseline_runs)


def false_rate(s: float, tol: float, baseline_runs: int | None = gates.BASELINE_RUNS) -> float:
    """P(one figure fails with nothing changed), log-ratio spread s per run, against a baseline
    averaged over `baseline_runs` runs, or paired (None) (module docstring)."""
    if s == 0:  # no spread: a figure never falls below itself
        return 0.0
    return float(stats.norm.cdf(math.log(1 - tol) / (s * spread_factor(baseline_runs))))


def detect_rate(
    s: float, tol: float, slowdown: float = SLOWDOWN, baseline_runs: int | None = gates.BASELINE_RUNS
) -> float:
    """P(one figure fails when its setting costs 1 + slowdown as much per step)."""
    moved = math.log(1 - tol) + math.log(1 + slowdown)  # > 0: the slowed ratio's median is below the bound
    if s == 0:
        return 1.0 if moved > 0 else 0.0
    return float(stats.norm.cdf(moved / (s * spread_factor(baseline_runs))))


def run_rate(spreads: Sequence[float], tol: float, baseline_runs: int | None = gates.BASELINE_RUNS) -> float:
    """P(a whole gate run fails falsely): any of its speed figures."""
    return 1 - math.prod(1 - false_rate(s, tol, baseline_runs) for s in spreads)


def suggest_tolerance(
    spreads: Sequence[float], target: float = TARGET_RATE, baseline_runs: int | None = gates.BASELINE_RUNS
) -> float:
    """The smallest tolerance (to 0.005) with run_rate below target."""
    for i in range(1, 200):
        tol = i * 0.005
        if run_rate(spreads, tol, baseline_runs) < target:
            return tol
    return 0.995


def sd_upper(s: float, n: int, confidence: float = 0.95) -> float:
    """One-sided upper confidence bound on a normal standard deviation estimated as s from n draws."""
    return s * math.sqrt((n - 1) / float(stats.chi2.ppf(1 - confidence, n - 1)))


@dataclass(frozen=True)
class FigureSpread:
    figure: str  # "<mode> / <setting> / speedup"
    baseline: float  # the baseline file's ratio
    ratios: tuple[float, ...]  # this figure's ratio in each run
    log_sd: float  # s: the standard deviation of log(ratio) over the runs
    log_sd_upper: float  # its one-sided 95% upper bound (chi-square, runs - 1 degrees of freedom)
    failures: int  # runs in which this figure failed the gate
    interval: tuple[float, float]  # Clopper-Pearson 95% on the failure rate
    tolerance: float  # this figure's, in force
    implied_false_rate: float  # at its tolerance
    implied_detect_rate: float  # of a SLOWDOWN, at its tolerance


@dataclass(frozen=True)
class FalseAlarmRun:
    runs: int
    busy: bool
    slowed: str | None  # "LABEL=F" or None (an unchanged tree)
    tolerance: float | None  # --tolerance (every figure), or None: the baseline's per figure
    baseline_runs: int | None  # the runs the baseline's speed figures average; None: paired
    run_failures: int  # whole gate runs that failed
    run_interval: tuple[float, float]
    exact_failures: int  # runs in which an exact figure failed (must be 0 on an unchanged tree)
    implied_run_rate: float  # 1 - prod(1 - implied_false_rate) at `tolerance`
    implied_run_rate_upper: float  # the same at every figure's log_sd_upper
    suggested_tolerance: float  # of the strategies' speedups: the smallest with their implied rate below
    # TARGET_RATE less the figure over naive-kv's share at its tolerance
    suggested_run_rate: float
    suggested_detect_rate: float  # the least over the strategies, of a SLOWDOWN, at the suggested tolerance
    figures: tuple[FigureSpread, ...]
    load_average: tuple[tuple[float, ...] | None, ...]  # per run, at its start
    seconds: float


def summarise(
    measured: Sequence[dict], results: Sequence[list], tol: float | None, baseline_runs: int | None, **kw
) -> FalseAlarmRun:
    """The spread and failure counts of gate runs (`measured[i]` compared into `results[i]`)
    against a baseline averaged over `baseline_runs` runs, or paired (None)."""
    b = baseline_runs
    n = len(measured)
    names = [r.name for r in results[0] if r.details.what == "speed"]
    figures = []
    for name in names:
        per = [next(r for r in res if r.name == name) for res in results]
        ratios = tuple(r.measured for r in per)
        s = statistics.stdev(math.log(x) for x in ratios) if n > 1 else math.nan
        k = sum(not r.passed for r in per)
        t = per[0].details.tolerance
        figures.append(
            FigureSpread(
                name,
                per[0].details.baseline,
                ratios,
                s,
                sd_upper(s, n),
                k,
                clopper_pearson(k, n),
                t,
                false_rate(s, t, b),
                detect_rate(s, t, baseline_runs=b),
            )
        )
    uppers = [f.log_sd_upper for f in figures]
    tuned = ("/ speedup", f"/ {paired.FIGURE}")  # the figures the suggested tolerance is for
    strategies = [f.log_sd for f in figures if f.figure.endswith(tuned)]
    others = 1 - math.prod(1 - f.implied_false_rate for f in figures if not f.figure.endswith(tuned))
    k_run = sum(any(not r.passed for r in res) for res in results)
    k_exact = sum(any(not r.passed and r.details.what != "speed" for r in res) for res in results)
    sug = suggest_tolerance(strategies, 1 - (1 - TARGET_RATE) / (1 - others), b)
    return FalseAlarmRun(
        runs=n,
        tolerance=tol,
        run_failures=k_run,
        run_interval=clopper_pearson(k_run, n),
        exact_failures=k_exact,
        implied_run_rate=1 - math.prod(1 - f.implied_false_rate for f in figures),
        implied_run_rate_upper=1
        - math.prod(1 - false_rate(u, f.tolerance, b) for f, u in zip(figures, uppers)),
        suggested_tolerance=sug,
        suggested_run_rate=1 - (1 - run_rate(strategies, sug, b)) * (1 - others),
        suggested_detect_rate=min(detect_rate(s, sug, baseline_runs=b) for s in strategies),
        baseline_runs=b,
        figures=tuple(figures),
        load_average=tuple(tuple(m["load_average"]["start"] or ()) for m in measured),
        **kw,
    )


def render(r: FalseAlarmRun) -> str:
    lo, hi = r.run_interval
    tols = "the baseline's tolerances" if r.tolerance is None else f"tolerance {r.tolerance:g}"
    lines = [
        f"{r.runs} gate runs{' with a busy core' if r.busy else ''}"
        f"{', ' + r.slowed + ' slowed' if r.slowed else ', unchanged tree'}, {tols}: "
        f"{r.run_failures} failed (95% CI {lo:.3f}-{hi:.3f}), {r.exact_failures} on exact figures "
        f"({r.seconds:.0f} s)",
        f"{'figure':48} {'baseline':>8} {'min':>6} {'max':>6} {'s(log)':>7} {'fail':>4} {'95% CI':>11} "
        f"{'tol':>5} {'P(false)':>9} {'P(det 25%)':>10}",
    ]
    for f in r.figures:
        lines.append(
            f"{f.figure:48} {f.baseline:8.3f} {min(f.ratios):6.3f} {max(f.ratios):6.3f} {f.log_sd:7.4f} "
            f"{f.failures:4d} {f.interval[0]:5.3f}-{f.interval[1]:5.3f} {f.tolerance:5.2f} "
            f"{f.implied_false_rate:9.2e} {f.implied_detect_rate:10.3f}"
        )
    lines.append(
        f"implied false-failure rate of a whole run at {tols}: {r.implied_run_rate:.2e} "
        f"({r.implied_run_rate_upper:.2e} at the spreads' 95% upper bounds); "
        f"suggested tolerance of the strategies' speedups {r.suggested_tolerance:g}: implied "
        f"{r.suggested_run_rate:.2e} a run, and a "
        f"setting {SLOWDOWN:.0%} dearer fails with probability >= {r.suggested_detect_rate:.3f}"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m proofs.gates.false_alarm", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--busy", action="store_true", help="a busy-loop process holds another core")
    p.add_argument("--baseline", default="benchmarks/baseline.json")
    p.add_argument("--model", default="default")
    p.add_argument("--tolerance", type=float, default=None, help="default: the baseline's")
    p.add_argument("--slow", default=None, help="LABEL=F: that setting (1 + F) times dearer per step")
    p.add_argument(
        "--reference",
        default="auto",
        help="as loopcert bench --gate: auto (paired with the baseline's commit where this checkout has it), "
        "a commit, a folder, or stored",
    )
    p.add_argument("--out", default="reports/out/false-alarm.json")
    args = p.parse_args(argv)
    try:
        return _main(args)
    except LoopcertError as e:
        print(f"false_alarm: error: {e}", file=sys.stderr)
        return 2


def _main(args) -> int:
    import torch

    from fastdec import Decoder
    from proofs.decoders.naive_kv import NaiveKVDecoder
    from proofs.prompts import model_prompts
    from refdec.files import write_json
    from refdec.load import load_model

    if args.runs < 2:
        raise LoopcertError(f"--runs must be at least 2 (a spread needs two runs), got {args.runs}")
    torch.set_num_threads(1)
    base = gates.read_baseline(args.baseline)
    tol = args.tolerance  # None: the baseline's, per figure
    slowed, fraction = None, None
    if args.slow:
        slowed, _, f = args.slow.rpartition("=")
        if slowed not in base["settings"]:
            raise LoopcertError(
                f"--slow {args.slow!r}: no setting {slowed!r}; the baseline has {base['settings']}"
            )
        fraction = float(f)
    model = load_model(args.model)
    prompts = model_prompts(model, args.model, 16, max_len=4096)
    naive = NaiveKVDecoder(model)
    ref, why = paired.reference_of(args.reference, base)
    print(f"speed: {'paired with ' if ref is not None else 'against the stored ratios: '}{why}", flush=True)

    def build(st, dtype):
        dec = Decoder(model, st, dtype=dtype)
        return slow(dec, fraction) if st.label == slowed else dec

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so `finally` ends the busy loop
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    t0 = time.perf_counter()
    measured, results, out = [], [], None
    plan = Workload(**base["plan"])
    tmp = tempfile.TemporaryDirectory(prefix="loopcert-reference-")
    try:
        tree = (
            None if ref is None else ref if isinstance(ref, Path) else paired.export_tree(ref, Path(tmp.name))
        )
        for i in range(args.runs):
            if tree is None:
                cur = gates.measure(model, args.model, prompts, plan, build=build, naive=naive)
                res = gates.compare(cur, base, tol)
            else:  # the exact figures in this process, speed in the paired workers
                cur = gates.measure(model, args.model, prompts, plan, build=build, rounds=2)
                res = gates.compare(cur, base, speed=False)
                cur = paired.measure_paired(
                    args.model,
                    prompts,
                    plan,
                    base["settings"],
                    tree,
                    slow=(slowed, fraction) if slowed else None,
                )
                res += paired.compare_paired(
                    cur, base.get("paired_tolerance", paired.PAIRED_TOL) if tol is None else tol
                )
            measured.append(cur)
            results.append(res)
            bad = gates.failures(res)
            print(f"run {i + 1}/{args.runs}: {len(bad)} failed figures {bad}", flush=True)
            if i:  # the runs so far, written after each one: a cut-short measurement keeps them
                took = time.perf_counter() - t0
                out = summarise(
                    measured,
                    results,
                    tol,
                    None if tree is not None else base.get("baseline_runs", 1),
                    busy=args.busy,
                    slowed=args.slow,
                    seconds=took,
                )
                write_json(Path(args.out), {"command": " ".join(sys.argv), **asdict(out)})
    finally:
        tmp.cleanup()
        if busy is not None:
            busy.kill()
            busy.wait()
    print(render(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
