"""`loopcert bench`: the speedup report, and the regression gates.

    loopcert bench [MODEL] [--quick] [--device D] [--out DIR]   writes DIR/speedup.md + speedup.json
    loopcert bench [MODEL] --compile ...                          the same report of compiled fastdec
                                                                  (warmed up by the calls it times)
    loopcert bench [MODEL] --quick --write-baseline [--baseline F]  writes the gate baseline F (the gate
                                                                  plan, commit, machine, protocol)
    loopcert bench [MODEL] --quick --gate [--baseline F]          exit 1 if a gated figure moved
                                                                  (every figure: DIR/gate.json)
    loopcert bench [MODEL] --serve-load [--clients 32 --seconds 30]  load test of `loopcert serve MODEL`
                                                                  on 127.0.0.1: DIR/serve-load.md + .json

Reports are written atomically (refdec.load.write_atomic), only once the whole run has finished.
Exit status: 0 ok, 1 a gate failed, 2 a usage error.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path

from loopcert.commands.common import load_from_args, uninterrupted
from proofs.decoders.naive_kv import NaiveKVDecoder
from proofs.gates import baseline as gates
from proofs.gates import paired
from proofs.gates.paired import PAIRED_TOL
from proofs.prompts import model_prompts
from refdec.errors import LoopcertError
from refdec.files import write_atomic, write_json
from refdec.stamp import stamp
from refdec.validate import check_int
from refdec.values import jsonable
from reports.speedup import render
from speed.measure import bench, with_overrides
from speed.report import PLANS
from speed.timing import Workload

HELP = "speedup report of every strategy over the autoregressive baseline; regression gates"
ON_INTERRUPT = "no report written, the previous one is left in place"
DEFAULT_OUT = Path("reports") / "out"
DEFAULT_BASELINE = Path("benchmarks") / "baseline.json"


def add_arguments(p) -> None:
    p.add_argument(
        "model", nargs="?", default="default", help="preset name or model folder (default: default)"
    )
    p.add_argument("--seed-weights", type=int, default=0, help="weights seed for a preset")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", default="float32", help="float32, float64, bfloat16, float16")
    p.add_argument("--quick", action="store_true", help="the CI plan: under 5 minutes on a CPU")
    p.add_argument("--out", default=str(DEFAULT_OUT), help=f"report folder (default: {DEFAULT_OUT})")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--gate", action="store_true", help="run the regression gates against --baseline")
    what.add_argument("--write-baseline", action="store_true", help="measure and write --baseline")
    what.add_argument(
        "--serve-load",
        action="store_true",
        help="load-test `loopcert serve MODEL` on 127.0.0.1 (needs the serve extra)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="time fastdec with compiled engine steps (torch.compile; each decoder warmed up, untimed, "
        "by the calls it then times: docs/speed.md#compiled-steps); not with --gate or --write-baseline",
    )
    p.add_argument("--clients", type=int, default=32, help="--serve-load: concurrent clients")
    p.add_argument("--seconds", type=float, default=30.0, help="--serve-load: duration")
    p.add_argument("--requests", type=int, default=5000, help="--serve-load: at most this many requests")
    p.add_argument("--load-tokens", type=int, default=16, help="--serve-load: max_tokens per request")
    p.add_argument(
        "--baseline", default=str(DEFAULT_BASELINE), help=f"gate baseline (default: {DEFAULT_BASELINE})"
    )
    p.add_argument(
        "--reference",
        default="auto",
        help="--gate: what the speed figures are timed against, in this run: auto (default: the "
        "baseline's reference_commit, exported from this checkout; the stored ratios where it cannot be), "
        "a commit, a folder holding a loopcert tree, or stored (the baseline file's ratios)",
    )
    p.add_argument("--tokens", type=int, default=None, help="new tokens per prompt (default: the plan's)")
    p.add_argument("--repeats", type=int, default=None, help="interleaved rounds (default: the plan's)")
    p.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help=f"speed tolerance of every gate figure (default: the baseline's: {PAIRED_TOL} paired; stored: "
        f"{gates.SPEEDUP_TOL} for the strategies, {gates.NAIVE_TOL} over naive-kv)",
    )


def command_line(args) -> str:
    parts = [
        "loopcert bench",
        args.model,
        f"--device {args.device}",
        f"--dtype {args.dtype}",
        f"--threads {args.threads}",
    ]
    if args.quick:
        parts.append("--quick")
    if args.compile:
        parts.append("--compile")
    parts += [f"--{k} {getattr(args, k)}" for k in ("tokens", "repeats") if getattr(args, k) is not None]
    if args.gate:
        parts.append(f"--gate --baseline {args.baseline} --reference {args.reference}")
    if args.write_baseline:
        parts.append(f"--write-baseline --baseline {args.baseline}")
    if args.serve_load:
        parts.append(
            f"--serve-load --clients {args.clients} --seconds {args.seconds:g} --requests {args.requests} "
            f"--load-tokens {args.load_tokens}"
        )
    return " ".join(parts)


def say(msg: str) -> None:
    print(msg, flush=True)


def run(args) -> int:
    if args.tolerance is not None and not 0 <= args.tolerance < 1:
        raise LoopcertError(f"--tolerance must be in [0, 1), got {args.tolerance}")
    for name in ("tokens", "repeats"):
        if getattr(args, name) is not None:
            check_int(f"--{name}", getattr(args, name), 1)
    overrides = {k: getattr(args, k) for k in ("tokens", "repeats") if getattr(args, k) is not None}
    if args.compile and (args.gate or args.write_baseline):
        flag = "--gate" if args.gate else "--write-baseline"
        raise LoopcertError(
            f"--compile with {flag}: the gate's baseline and figures are eager fastdec's (its exact "
            "figures are bitwise, and compiled kernels round otherwise): drop --compile"
        )
    if args.serve_load:
        return run_serve_load(args)
    base = gates.read_baseline(args.baseline) if args.gate else None  # a missing baseline fails first
    model = load_from_args(args)
    prompts = model_prompts(model, args.model, 16, max_len=4096)
    naive = NaiveKVDecoder(model)
    t0 = time.perf_counter()
    if args.gate or args.write_baseline:
        return run_gate(args, model, prompts, naive, base, overrides, t0)
    plan = with_overrides(PLANS["quick" if args.quick else "full"], **overrides)
    res = bench(
        model, args.model, plan, prompts, args.device, naive=naive, progress=say, compile=args.compile
    )
    res.stamp["command"] = command_line(args)
    res.stamp["seconds"] = time.perf_counter() - t0
    md = render(res)  # render before writing: a render error leaves both old files
    out = Path(args.out)
    with uninterrupted():  # both files or neither
        write_json(out / "speedup.json", res.to_json())
        write_atomic(out / "speedup.md", lambda tmp: Path(tmp).write_text(md))
    say(f"wrote {out / 'speedup.md'} and speedup.json ({time.perf_counter() - t0:.0f} s)")
    return 0


def run_gate(args, model, prompts, naive, base, overrides, t0) -> int:
    """--write-baseline: measure the gate plan (gates.GATE_PLAN, shaped by --tokens / --repeats) and
    write it; --gate: measure with the baseline's plan, compare, write DIR/gate.json, exit 1 on a
    failed figure."""
    plan = Workload(**base["plan"]) if base else dataclasses.replace(gates.GATE_PLAN, **overrides)
    if args.write_baseline:
        cur = gates.measure_baseline(
            model, args.model, prompts, plan, device=args.device, naive=naive, progress=say
        )
        cur["command"] = command_line(args)
        write_json(Path(args.baseline), cur)
        m = cur["machine"]
        say(
            f"wrote {args.baseline} ({time.perf_counter() - t0:.0f} s; speed figures the mean of "
            f"{cur['baseline_runs']} runs): protocol {cur['protocol']}, "
            f"commit {cur['commit']}, {m['device_name']} ({m['cpu_capability']}, {m['cores']} cores), "
            f"torch {m['torch']}"
        )
        if cur["reference_commit"] is None:
            say(
                "warning: the code differs from every commit, so this baseline names no reference_commit "
                "and the gate will compare speed with its stored ratios only: commit the code, then "
                "write the baseline"
            )
        return 0
    ref, why = paired.reference_of(args.reference, base)
    m = base.get("machine", {})
    head = (
        f"gate against {args.baseline} (protocol {base['protocol']}, commit {base.get('commit')}, "
        f"{m.get('device_name')} {m.get('cpu_capability')}): exact figures ({base['exact_dtype']} pass: "
        f"tokens hash and every count; any change fails) and "
    )
    if ref is None:
        tol = base.get("speedup_tolerance", gates.SPEEDUP_TOL) if args.tolerance is None else args.tolerance
        naive_tol = base.get("naive_tolerance", gates.NAIVE_TOL) if args.tolerance is None else args.tolerance
        say(
            head + f"speed ratios of this run against the baseline's stored ones ({why}; each strategy over "
            f"autoregressive: fails below baseline x (1 - {tol:g}); autoregressive over naive-kv: below "
            f"baseline x (1 - {naive_tol:g}))"
        )
        cur = gates.measure(model, args.model, prompts, plan, device=args.device, naive=naive, progress=say)
        results = gates.compare(cur, base, args.tolerance)
        measured = {"stored": cur}
    else:
        tol = base.get("paired_tolerance", PAIRED_TOL) if args.tolerance is None else args.tolerance
        say(
            head + f"speed paired with {why}, re-timed in this run beside this tree (each setting's time "
            f"there over its time here: fails below 1 - {tol:g})"
        )
        cur = gates.measure(model, args.model, prompts, plan, device=args.device, progress=say, rounds=2)
        results = gates.compare(cur, base, speed=False)
        measured = {"exact": cur}
        if results[0].passed:  # comparable: the same weights, plan, prompts and settings
            with tempfile.TemporaryDirectory(prefix="loopcert-reference-") as tmp:
                tree = ref if isinstance(ref, Path) else paired.export_tree(ref, Path(tmp))
                got = paired.measure_paired(
                    args.model,
                    prompts,
                    plan,
                    base["settings"],
                    tree,
                    seed_weights=args.seed_weights,
                    dtype=args.dtype,
                    device=args.device,
                    progress=say,
                )
            got["reference"] = str(ref)
            results += paired.compare_paired(got, tol, label=why.removeprefix("the baseline's "))
            measured["paired"] = got
    cur["command"] = command_line(args)
    for r in results:
        if r.details.what == "speed":
            say(("  " if r.passed else "  FAIL ") + r.details.message)
    bad = gates.failures(results)
    report = {"measured": measured, "results": [r.to_dict() for r in results], "failures": bad}
    write_json(Path(args.out) / "gate.json", report)
    for msg in bad:
        say(f"FAIL {msg}")
    exact = [r for r in results if r.details.what == "exact"]
    say(
        f"gate: {len(results) - len(bad)}/{len(results)} figures pass ({sum(r.passed for r in exact)}/"
        f"{len(exact)} exact) ({time.perf_counter() - t0:.0f} s)"
    )
    return 1 if bad else 0


def run_serve_load(args) -> int:
    """The load test (loopcert/serve/load_run.py); exit 1 if a request was lost, duplicated, failed or
    differs from generate for its seed."""
    try:
        from loopcert.serve.load_run import serve_load
        from loopcert.serve.loadtest import LoadPlan
        from reports.serve_load import render as render_load
    except ImportError as e:
        raise LoopcertError(
            f"--serve-load needs the serve extra: pip install 'loopcert[serve]' ({e})"
        ) from None
    plan = LoadPlan(
        clients=args.clients, seconds=args.seconds, max_requests=args.requests, max_tokens=args.load_tokens
    )
    argv = [
        args.model,
        "--seed-weights",
        str(args.seed_weights),
        "--device",
        args.device,
        "--dtype",
        args.dtype,
        "--threads",
        str(args.threads),
        *(["--compile"] if args.compile else []),
    ]
    t0 = time.perf_counter()
    res = serve_load(argv, plan, say)
    seeds = {"requests": f"{plan.base_seed} + i for request i"}
    res["stamp"] = {
        **stamp(args.model, args.device, args.dtype, seeds),
        "command": command_line(args),
        "seconds": time.perf_counter() - t0,
    }
    md = render_load(jsonable(res))
    out = Path(args.out)
    write_json(out / "serve-load.json", res)
    write_atomic(out / "serve-load.md", lambda tmp: Path(tmp).write_text(md))
    s = res["summary"]
    say(
        f"{'PASS' if res['passed'] else 'FAIL'}: {s['completed']}/{s['sent']} requests, "
        f"lost {len(s['lost'])}, "
        f"duplicated {len(s['duplicated'])}, {res['mismatch_count']} differ from generate; "
        f"p50 {s['latency_p50_s']:.3f} s p99 {s['latency_p99_s']:.3f} s, {s['tokens_per_s']:.1f} tokens/s "
        f"(in process: {res['in_process']['sequential_tokens_per_s']:.1f} sequential)"
    )
    say(f"wrote {out / 'serve-load.md'} and serve-load.json")
    return 0 if res["passed"] else 1
