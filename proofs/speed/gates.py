"""Regression gates for fastdec's speed against a committed baseline file
(benchmarks/baseline.json, written by `loopcert bench --write-baseline`).

A gate run times a few settings (proofs.speed.settings.gate_settings) on fixed prompts, greedy
and sampling with fixed seeds, interleaved rounds (proofs.speed.timing.time_runs), and compares
two kinds of figure with the baseline:

- exact: for every setting and mode, the emitted tokens (a hash), every count of Stats (token
  sources, proposals, acceptances, gate checks and opens, engine and lane steps, ...), peak
  lanes and calls per (phase, width). With fixed seeds they are deterministic on one machine
  and torch build, so they are gated EXACTLY: any change is a change in what the decoder does,
  and the gate names the figure. (Another CPU may round float32 differently: rewrite the baseline there.)
- speed: each setting's speedup over the autoregressive baseline of the same run, and the
  baseline's over proofs.decoders.naive_kv (below 1: the engine's per-call machinery, R + 1 planned
  calls per token, against a plain loop's one forward per token; the gate claims only that
  this cost did not grow beyond the tolerance, not that the baseline beats the loop);
  ratios, never absolute times. A regression is
  measured < baseline * (1 - tolerance), tolerance SPEEDUP_TOL unless the baseline file says
  otherwise. Speedups come from process CPU time on a CPU (steadier than wall time when other
  jobs share the host) and from wall time on CUDA. Faster passes (and is reported).

A baseline written for other weights or another plan is not comparable: the gate fails and
says so. Checks return CheckResults (proofs.result); the command prints the failing ones.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from fastdec import DecodeConfig, Decoder
from proofs.progress import Progress
from proofs.result import CheckResult
from proofs.speed.settings import BASELINE, NAIVE, gate_settings
from proofs.speed.timing import COUNTS, GREEDY, SAMPLING, Workload, loadavg, ratio, time_runs
from proofs.stamp import stamp
from refdec.errors import LoopcertError
from refdec.load import exact_fingerprint
from refdec.values import jsonable

FORMAT = 1
# The tolerance covers how far the gate plan's speedup ratios spread between rounds and between
# whole gate runs on a shared, busy host (docs/measurements.md); the regressions the gate exists
# for (a dearer step, a less accepting draft) move the ratio far more, and their exact figures move.
SPEEDUP_TOL = 0.25
# Gated exactly: the emitted tokens (a hash), every count of Stats, peak lanes, calls per (phase, width).
EXACT = ("tokens_sha", *COUNTS, "peak_lanes", "calls")
MODES = {"greedy": GREEDY, "sampling": SAMPLING}


def tokens_sha(tokens: Sequence[Sequence[int]]) -> str:
    return hashlib.sha256(json.dumps([list(t) for t in tokens]).encode()).hexdigest()[:16]


def measure(
    model,
    model_name: str,
    prompts: Sequence[Sequence[int]],
    plan: Workload = Workload(),
    device="cpu",
    build: Callable[[DecodeConfig], object] | None = None,
    naive=None,
    settings: Sequence[DecodeConfig] | None = None,
    modes: Sequence[str] = tuple(MODES),
    progress: Progress | None = None,
) -> dict:
    """The gated figures of one run. `build(setting)` makes the decoder timed under that
    setting's label (default: the setting itself): tests pass deliberately worse decoders.
    `modes`: a subset of MODES (a gate compares every mode its baseline has)."""
    settings = list(settings or gate_settings(model.cfg.recurrence))
    if settings[0].label != BASELINE:
        raise LoopcertError(f"the first gate setting must be {BASELINE!r}, got {settings[0].label!r}")
    build = build or (lambda st: Decoder(model, st, device=device))
    prompts = plan.select(prompts)
    # process time on any CPU run (the baseline's clock; with several threads it sums them, so
    # gate with one thread, as `loopcert bench` does), wall time on CUDA
    clock = "wall" if torch.device(device).type == "cuda" else "cpu"
    load = {"start": loadavg()}
    figures: dict = {}
    for mode in modes:
        sampling = MODES[mode]
        decoders = {st.label: build(st) for st in settings}
        if naive is not None and mode == "greedy":
            decoders[NAIVE] = naive
        if progress:
            progress(
                f"gate: {mode}, {len(decoders)} decoders x {len(prompts)} prompts x {plan.tokens} tokens, "
                f"{plan.repeats} rounds"
            )
        t = time_runs(decoders, prompts, plan.tokens, plan.repeats, sampling, plan.seed)
        base = t[BASELINE]
        per = {}
        for st in settings:
            rec = t[st.label]
            s = rec["stats"]
            per[st.label] = {
                "exact": {
                    "tokens_sha": tokens_sha(rec["tokens"]),
                    **{k: s[k] for k in EXACT if k != "tokens_sha"},
                },
                "deterministic": rec["deterministic"],
            }
            if st.label != BASELINE:
                per[st.label]["speedup"] = ratio(base[clock], rec[clock])
                per[st.label]["rounds"] = [b / x for b, x in zip(base[clock], rec[clock])]
        if NAIVE in t:  # whole-call times: naive_kv has no decode-only clock
            key = f"{clock}_total"
            per[BASELINE]["speedup_over_naive"] = ratio(t[NAIVE][key], base[key])
            per[BASELINE]["rounds_over_naive"] = [n / b for n, b in zip(t[NAIVE][key], base[key])]
        figures[mode] = per
    load["end"] = loadavg()
    return jsonable(
        {
            "format": FORMAT,
            "stamp": stamp(
                model_name,
                device,
                next(model.parameters()).dtype,
                {"prompt i": f"{plan.seed} + i", "weights": "as shipped"},
            ),
            "model": model_name,
            "model_fingerprint": exact_fingerprint(model),  # the exact weights a baseline timed
            "device": str(device),
            "clock": clock,
            "plan": dataclasses.asdict(plan),
            "prompts": [list(p) for p in prompts],
            "settings": [st.label for st in settings],
            "speedup_tolerance": SPEEDUP_TOL,
            "load_average": load,
            "figures": figures,
        }
    )


def compare(current: dict, baseline: dict, tolerance: float | None = None) -> list[CheckResult]:
    """One CheckResult per gated figure (and one for comparability). measured/bound: the
    figure and its baseline value (exact) or its lowest passing value (speed)."""
    tol = baseline.get("speedup_tolerance", SPEEDUP_TOL) if tolerance is None else tolerance
    out = []
    same = {
        k: (current.get(k), baseline.get(k))
        for k in ("model_fingerprint", "plan", "prompts", "settings", "clock")
    }
    moved = [k for k, (a, b) in same.items() if a != b]
    out.append(
        CheckResult(
            "comparable",
            len(moved),
            0,
            not moved,
            {
                "moved": moved,
                "current": {k: same[k][0] for k in moved},
                "baseline": {k: same[k][1] for k in moved},
                "message": (
                    f"the baseline was written for another {', '.join(moved)}: rewrite it with "
                    "`loopcert bench --write-baseline`"
                )
                if moved
                else "ok",
            },
        )
    )
    if moved:
        return out
    for mode, per in baseline["figures"].items():
        for label, base in per.items():
            cur = current["figures"].get(mode, {}).get(label)
            name = f"{mode} / {label}"
            if cur is None:
                out.append(
                    CheckResult(f"{name} / present", 0, 1, False, {"message": f"{name}: not measured"})
                )
                continue
            if not cur.get("deterministic", True):
                out.append(
                    CheckResult(
                        f"{name} / deterministic",
                        0,
                        1,
                        False,
                        {"message": f"{name}: rounds of one run disagreed (nondeterminism)"},
                    )
                )
            for k, want in base["exact"].items():
                got = cur["exact"].get(k)
                ok = got == want
                num = lambda v: v if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0  # noqa: E731
                out.append(
                    CheckResult(
                        f"{name} / {k}",
                        num(got),
                        num(want),
                        ok,
                        {
                            "kind": "exact",
                            "current": got,
                            "baseline": want,
                            "message": f"{name}: {k} moved: baseline {want} -> now {got}" if not ok else "ok",
                        },
                    )
                )
            for k, what in (
                ("speedup", "speedup over autoregressive"),
                ("speedup_over_naive", "speedup over proofs.decoders.naive_kv"),
            ):
                if k not in base:
                    continue
                got, want = cur.get(k), base[k]
                bound = want * (1 - tol)
                ok = got is not None and got >= bound
                out.append(
                    CheckResult(
                        f"{name} / {k}",
                        got if got is not None else float("nan"),
                        bound,
                        ok,
                        {
                            "kind": "speed",
                            "current": got,
                            "baseline": want,
                            "tolerance": tol,
                            "rounds": cur.get("rounds" if k == "speedup" else "rounds_over_naive"),
                            "message": (
                                f"{name}: {what} not measured"
                                if got is None
                                else f"{name}: {what} fell to {got:.3f}x, below {want:.3f}x * (1 - {tol}) = "
                                f"{bound:.3f}x"
                                if not ok
                                else f"{name}: {what} {got:.3f}x (baseline {want:.3f}x)"
                            ),
                        },
                    )
                )
    return out


def failures(results: Sequence[CheckResult]) -> list[str]:
    return [r.details.get("message", r.name) for r in results if not r.passed]


def read_baseline(path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise LoopcertError(f"no baseline at {path}: write one with `loopcert bench --write-baseline`")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise LoopcertError(f"{path}: not JSON ({e})") from None
    if data.get("format") != FORMAT:
        raise LoopcertError(f"{path}: baseline format {data.get('format')!r}, expected {FORMAT}")
    return data
