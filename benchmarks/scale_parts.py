"""The cost of each part of a quick certify run as the model grows (docs/scale.md).

Where a whole `loopcert certify --quick` run can finish, its certificate times each check; where it
cannot (Ouro-1.4B's shape on two CPU cores), `parts` runs the quick plan's parts one by one through
the same CertifyRun, writing each figure to a JSON record as soon as it is measured, so that a
run stopped by its time limit keeps what it reached:

    load       the float64 reference (and the run's dtype copy): seconds, peak RSS
    laws       the sampling setup: prompt choice and every case's exact law, bins, views, N
    vocab      the same laws again from remembered logits: the vocabulary's own cost (transform
               over V, head enumeration, binning, views), no forward pass
    reference  refdec's uncached float64 greedy decode: seconds per token
    sampling   each (setting, case): samples/s on a small chunk, and N / rate, the time the case
               needs to reach the plan's TV
    greedy     the greedy_float64 (and greedy_<dtype>) checks
    traces     the depth traces the Theorem 1/2 trace checks read

    python benchmarks/scale_parts.py parts /work/scale-ckpt/ouro-w2048 --dtype float64 --out rec.json
    python benchmarks/scale_parts.py predict /work/scale-ckpt/ouro-w256 --out pred.json
    python benchmarks/scale_parts.py cut /work/scale-ckpt/ouro-w2048 --dtype float64 --out cut.json

`cut` is --predict's layer-cut estimate alone (proofs/cost/estimate.py): nothing is loaded.

A lab tool (it was `python -m proofs.run.scale`), not installed: the cost a user sees is
proofs/cost/. The table and plot: benchmarks/scale_report.py.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import torch

from proofs.checks.distribution import sample_tally
from proofs.cost.predict import cut_first, predict
from proofs.decoders.protocol import NotApplicable
from proofs.run.cases import chosen_cases
from proofs.run.plan import PLANS
from proofs.run.run import CertifyRun
from proofs.run.sampling_units import decoder_of, sampling_checks
from refdec.decode import generate
from refdec.files import parse_dtype
from refdec.memory import free_bytes, parameters_of
from refdec.sampling import SamplingParams

PARTS = ("load", "laws", "vocab", "reference", "sampling", "greedy", "traces")
REFERENCE_TOKENS = 3  # tokens of the uncached reference decode timed by `reference`
SAMPLING_CHUNK = 4  # samples of each (setting, case) timed by `sampling`


def peak_rss() -> int:
    """This process's peak resident set, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def load_average() -> float:
    return os.getloadavg()[0]


class Record:
    """A JSON record written after every part (a run killed by its time limit keeps what it had)."""

    def __init__(self, path: Path, head: dict):
        self.path, self.data = Path(path), {**head, "parts": {}}
        self.write()

    def part(self, name: str, seconds: float, **fields) -> None:
        row = {"seconds": seconds, "peak_rss": peak_rss(), "load1": load_average(), **fields}
        self.data["parts"][name] = row
        print(f"[{name}] {seconds:.1f}s {json.dumps(fields)[:300]}", flush=True)
        self.write()

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2) + "\n")
        tmp.replace(self.path)


def measure_parts(model: str, dtype: str, out: Path, parts=PARTS, seed: int = 0) -> dict:
    """Run the quick plan's parts on `model`, one by one, recording each (module docstring)."""
    dt = parse_dtype(dtype)
    plan = PLANS["quick"]
    rec = Record(
        out,
        {
            "model": str(model),
            "parameters": parameters_of(model),
            "dtype": dtype,
            "threads": torch.get_num_threads(),
            "free_at_start": free_bytes(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        },
    )
    t = time.perf_counter()
    run = CertifyRun(plan, str(model), None, "cpu", dt, seed, lambda msg: print(msg, flush=True))
    rec.part("load", time.perf_counter() - t)
    if "laws" in parts or "sampling" in parts:
        t = time.perf_counter()
        setup = run.sampling_setup(run.model_name)
        rec.part(
            "laws",
            time.perf_counter() - t,
            contexts=run.oracle.contexts_seen,
            samples=list(setup.samples),
            cases=[law.case.name for law in setup.laws],
        )
    if "vocab" in parts:
        run.oracle.forget_laws()  # keep the logits, drop the transformed laws: no forward pass
        seen = run.oracle.contexts_seen
        t = time.perf_counter()
        chosen_cases(run.oracle, run.model_name, plan)
        rec.part(
            "vocab", time.perf_counter() - t, V=run.oracle.V, new_contexts=run.oracle.contexts_seen - seen
        )
    if "reference" in parts:
        prompt = run.prompts(1)[0]
        t = time.perf_counter()
        generate(run.model64, prompt, REFERENCE_TOKENS, SamplingParams())
        took = time.perf_counter() - t
        rec.part(
            "reference",
            took,
            tokens=REFERENCE_TOKENS,
            prompt_len=len(prompt),
            per_token=took / REFERENCE_TOKENS,
        )
    if "sampling" in parts:
        rows, total = [], 0.0
        for chk in sampling_checks(run):
            dec = decoder_of(run, chk)
            if isinstance(dec, NotApplicable):
                continue
            for u, law in zip(chk.units, run.sampling_setup(chk.model).laws, strict=True):
                t = time.perf_counter()
                got = sample_tally(dec, law, min(SAMPLING_CHUNK, u.samples), seed) if u.samples else None
                took = time.perf_counter() - t
                rate = got["samples"] / took if got and got["samples"] else 0.0
                need = u.samples / rate if rate else 0.0
                total += need
                rows.append({"unit": u.id, "N": u.samples, "samples_per_s": rate, "needed_s": need})
                print(f"  {u.id}: {rate:.3f} samples/s, N {u.samples} -> {need / 3600:.2f} h", flush=True)
                rec.part("sampling", total, units=rows, needed_s=total)
    if "greedy" in parts:
        t = time.perf_counter()
        g64 = run.greedy_float64()
        rec.part("greedy", time.perf_counter() - t, greedy_float64=g64.passed)
        if run.model_dt is not None:
            t = time.perf_counter()
            low = run.greedy_low(f"greedy_{dtype}")
            rec.part(f"greedy_{dtype}", time.perf_counter() - t, passed=low.passed)
    if "traces" in parts:
        t = time.perf_counter()
        _ = run.traces
        rec.part("traces", time.perf_counter() - t)
    return rec.data


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python benchmarks/scale_parts.py", description=__doc__.split("\n\n")[0]
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("parts", help="time each part of the quick plan on MODEL, one by one")
    p.add_argument("model")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {PARTS}")
    q = sub.add_parser("predict", help="loopcert certify --quick --predict SECONDS, as a JSON record")
    q.add_argument("model")
    q.add_argument("--dtype", default="float32")
    q.add_argument("--slice", type=float, default=3.0, help="seconds of sampling per (setting, case)")
    q.add_argument("--out", required=True, type=Path)
    c = sub.add_parser("cut", help="--predict's layer-cut estimate of the quick plan, as a JSON record")
    c.add_argument("model")
    c.add_argument("--dtype", default="float32")
    c.add_argument("--slice", type=float, default=3.0, help="--predict's SECONDS (the prediction's cost)")
    c.add_argument("--out", required=True, type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "parts":
        parts = tuple(x for x in a.parts.split(",") if x)
        bad = sorted(set(parts) - set(PARTS))
        if bad:
            ap.error(f"unknown part(s) {bad}; choose from {PARTS}")
        measure_parts(a.model, a.dtype, a.out, parts)
        return 0
    if a.cmd == "predict":
        t0 = time.perf_counter()
        say = lambda m: print(m, flush=True)  # noqa: E731
        got = predict(a.model, dtype=a.dtype, progress=say, slice_seconds=a.slice, measured=True).to_dict()
        got.update(
            predict_wall=time.perf_counter() - t0,
            peak_rss=peak_rss(),
            load1=load_average(),
            parameters=parameters_of(a.model),
            date=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        )
        a.out.write_text(json.dumps(got, indent=2, default=str) + "\n")
        return 0
    if a.cmd == "cut":
        plan = PLANS["quick"]
        say = lambda m: print(m, flush=True)  # noqa: E731
        est = cut_first(
            a.model, plan, parse_dtype(a.dtype), "cpu", None, plan.sampling_budget_s, 1, a.slice, say
        ).to_dict()
        est.update(
            dtype=a.dtype,
            peak_rss=peak_rss(),
            load1=load_average(),
            parameters=parameters_of(a.model),
            date=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        )
        for part, t in est["parts"].items():
            print(f"  {part}: {t:.0f}s")
        for w in est["warnings"]:
            print(f"stop: {w}")
        a.out.write_text(json.dumps(est, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
