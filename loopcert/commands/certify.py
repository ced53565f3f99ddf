"""`loopcert certify`: run every check, write certificate.md and certificate.json.

Exit status: 0 when every check passes, 1 when one fails (or NON-REPRODUCIBLE), 2 on a usage error
(loopcert/cli.py), 3 INCOMPLETE: a time budget cut a check short of its planned power and nothing
failed (docs/certify.md#verdicts-and-exit-codes).
With --shard i/n it runs the i-th of n deterministic parts of the plan's work units and writes
their raw results to OUT/shard.json (exit 0); `loopcert merge` assembles the certificate.
Every place it will write (--out, --plan-out) is checked before any work: a usage error names
the path and why. Both files are written together (refdec.files.write_together: both or neither,
certificate.json last), and only once the whole run has finished: a run that crashes or is
interrupted leaves the last report in place; one whose write fails at the end (a full disk) keeps
its result in a temporary folder the error names (exit 2).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from loopcert.commands.common import (
    add_http_arguments,
    http_command_parts,
    http_decoder_stamp,
    http_options,
    uninterrupted,
)
from proofs.certificate import Certificate
from proofs.cost.parts import part_of, row_of
from proofs.cost.predict import predict
from proofs.cost.prediction import Estimate, Prediction
from proofs.run.budget import RUNAWAY
from proofs.run.certify import INCOMPLETE, run_certify
from proofs.run.jobs import MAX_DEFAULT_JOBS, default_jobs
from proofs.run.plan import PLANS
from proofs.run.shards import SHARD_FILE, Shard, write_shard
from refdec.errors import LoopcertError
from refdec.files import check_output_file, check_output_folder, json_text, write_together
from reports.console import failure_line
from reports.render import render_certificate
from reports.scope import scope_parts

HELP = "certify a decoder lossless: greedy, bitwise, sampling, mutants, Theorems 1/2, speed"
ON_INTERRUPT = "no certificate written, the previous one is left in place"
DEFAULT_OUT = Path("reports") / "out"


def add_arguments(p) -> None:
    p.add_argument(
        "model",
        nargs="?",
        default=None,
        help="preset name or model folder (default: 'default' if installed, else tiny-raven)",
    )
    p.add_argument(
        "--decoder",
        default=None,
        metavar="MODULE:FACTORY",
        help="certify factory(model) instead of fastdec's strategy grid; or a server: "
        "http://HOST:PORT/v1 (loopcert serve, vLLM, SGLang, OpenAI-compatible); or Apple's mlx-lm "
        "in process: mlx-lm[:draft=DIR|self,num_draft=N]; or llama.cpp in process: "
        "llama.cpp[:draft=DIR|draft_loops=N|ngram=KIND,num_draft=N,kv=f16|f32|bf16]; "
        "or OpenVINO GenAI in process: "
        "openvino[:backend=pa|sdpa,spec=plain|prompt_lookup,draft=DIR|self,precision=f32|bf16|default] "
        "(docs/decoders.md)",
    )
    p.add_argument(
        "--relative-to",
        default=None,
        metavar="SPEC2",
        help="add the engine-relative check: --decoder's samples against SPEC2's (the same "
        "engine's plain decoder; the syntax of --decoder) on every sampling case, a two-sample "
        "test per view with the plan's power (docs/certify.md#the-engine-relative-check)",
    )
    add_http_arguments(p)
    p.add_argument(
        "--compile",
        action="store_true",
        help="certify fastdec with compiled engine steps (torch.compile; docs/speed.md#compiled-steps)",
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", default="float32", help="float32, float64, bfloat16, float16")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        dest="mode",
        action="store_const",
        const="quick",
        help="the CI plan (default): minutes on a CPU",
    )
    mode.add_argument(
        "--full",
        dest="mode",
        action="store_const",
        const="full",
        help="the nightly plan: TV 0.01, more settings and models, the false-alarm rate (~1 h on 2 cores)",
    )
    mode.add_argument(
        "--smoke",
        dest="mode",
        action="store_const",
        const="smoke",
        help="seconds on a tiny preset: every check cut down (assert_lossless's plan; not a "
        "certificate to publish)",
    )
    p.set_defaults(mode="quick")
    p.add_argument("--out", default=str(DEFAULT_OUT), help=f"output folder (default: {DEFAULT_OUT})")
    p.add_argument("--seed", type=int, default=0, help="base seed of every sampled check")
    p.add_argument(
        "--time-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="a hard cap on the sampling time, pooled across settings; without it the plan's "
        "budget (quick 270 s, full 2400 s) stretches to the sampling rate measured in the run, up "
        f"to {RUNAWAY:g}x, so load alone never decides the verdict. A case the budget cuts short "
        "of the plan's detectable TV with nothing rejected is INCOMPLETE (exit 3), not FAIL",
    )
    p.add_argument(
        "--predict",
        type=float,
        default=None,
        metavar="SECONDS",
        help="certify nothing: predict the whole plan's time, per check: sample each (setting, "
        "case) for SECONDS (N per case, samples/s), run every other check at ~1/8 of its size; "
        "the wall time with --jobs. First, before the model is loaded, it times 1- and 2-layer "
        "cuts of the model and estimates each part; where that says the prediction would take "
        "over 20 min or the run over an hour, it stops there, naming the largest part and the "
        "flags that help",
    )
    p.add_argument(
        "--predict-measured",
        action="store_true",
        help="with --predict: go on to the measured prediction even when the layer-cut estimate "
        "says it would take over 20 min or the run over an hour",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="run the plan's work units in N worker processes, one torch thread each (default: one "
        f"per core, at most {MAX_DEFAULT_JOBS}; 1 on CUDA); the certificate is the one of --jobs 1",
    )
    p.add_argument(
        "--shard",
        default=None,
        metavar="I/N",
        help="run only the I-th of N parts of the plan's work units; write OUT/shard.json for "
        "`loopcert merge`",
    )
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local: --jobs N forked workers on this machine (default); ray: one Ray task per work "
        "unit (1 GPU on --device cuda, else 1 CPU), --jobs N at once (default: one per CPU/GPU of "
        "the cluster); needs pip install 'loopcert[ray]'",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDRESS",
        help="join the Ray cluster at ADDRESS (HOST:PORT, auto); default: start a local one",
    )
    plan = p.add_mutually_exclusive_group()
    plan.add_argument(
        "--plan-out",
        default=None,
        metavar="FILE",
        help="certify nothing: plan the run (cases, N per case, bins) and write FILE for --plan",
    )
    plan.add_argument(
        "--plan",
        default=None,
        metavar="FILE",
        help="a plan by name (quick, full, smoke: as --quick, --full, --smoke), or run the plan of "
        "--plan-out FILE instead of planning here (give it to every shard)",
    )


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def print_estimate(mode: str, model: str, est: Estimate) -> None:
    """The layer-cut estimate (proofs/cost/estimate.py), part by part."""
    at = est.at_layers
    print(
        f"{mode} plan on {model}, estimated from 1- and 2-layer cuts ({est.layer_field} "
        f"{est.layers}; {est.estimate_seconds:.0f}s), one process:"
    )
    how = {
        "load": est.load_how,
        "exact laws": f"{est.contexts} contexts x {at['forward64']:.3g}s",
        "greedy_float64": f"reference {at['reference_token']:.3g}s a token",
        "sampling": f"{at['sample']:.3g}s a sample, the budget's share or a first chunk per unit",
    }
    for part, t in est.parts.items():
        print(f"  {part}: {minutes(t)}" + (f" ({how[part]})" if part in how else ""))
    print(
        f"estimated: {minutes(est.serial_seconds)} in one process, {minutes(est.wall_seconds)} "
        f"with {est.jobs} worker(s) (not counted: mutants, false alarms, the Theorem 1 cases: "
        f"tiny models); the measured prediction: {minutes(est.prediction_seconds)}"
    )


def beside(check: str, dtype: str, parts) -> float | None:
    """The estimate's part of a check (proofs/cost/parts.py), to print beside its prediction; none
    beside a per-setting check (an estimate's part is the sum over the settings)."""
    row = row_of(check)
    return None if row is None or row.per_setting else parts.get(part_of(check, dtype))


def print_prediction(got: Prediction) -> None:
    """The measured prediction, check by check, with the layer-cut estimate's part beside each."""
    parts = got.estimate.parts
    print(f"{got.mode} plan on {got.model}, predicted per check (TV {got.target_tv:g}):")
    cut = f"; cut estimate {minutes(parts['load'] + parts['exact laws'])}"
    print(f"  setup (models, exact laws, N per case): {minutes(got.setup_seconds)}{cut}")
    for c in got.checks:
        capped = (
            f"; {minutes(c.budgeted_seconds)} within the budget" if c.budgeted_seconds is not None else ""
        )
        part = beside(c.check, got.dtype, parts)
        cut = f"; cut estimate {minutes(part)}" if part is not None else ""
        print(f"  {c.check}: {minutes(c.predicted_seconds)} ({c.how}{capped}{cut})")
    print(
        f"predicted: {minutes(got.serial_seconds)} in one process, "
        f"{minutes(got.wall_seconds)} with {got.workers_label} "
        f"(sampling within its budget of {minutes(got.sampling_budget_s)} per worker; "
        f"{minutes(got.sampling_seconds)} of sampling to reach TV {got.target_tv:g})"
    )


def command_line(args, model: str) -> str:
    """The effective command, defaults spelled out, so the stamp says how to rerun it."""
    parts = ["loopcert certify", model]
    if args.decoder:
        parts.append(f"--decoder {args.decoder}")
        if args.relative_to is not None:
            parts.append(f"--relative-to {args.relative_to}")
        parts += http_command_parts(args)
    parts += [f"--device {args.device}", f"--dtype {args.dtype}", f"--{args.mode}", f"--seed {args.seed}"]
    if args.compile:  # another decoder: fastdec's compiled grid
        parts.append("--compile")
    if args.time_budget is not None:
        parts.append(f"--time-budget {args.time_budget:g}")
    if args.plan is not None:  # the cases and N come from the file: a rerun without it plans anew
        parts.append(f"--plan {args.plan}")
    return " ".join(parts)


REPORT_FILES = ("certificate.md", "certificate.json")  # certificate.json, the record, lands last


def write_reports(cert: Certificate, out: Path) -> tuple[Path, Path]:
    """Both files or neither (refdec.files.write_together): certificate.json is renamed into place
    after certificate.md, so it never stands beside another run's report."""
    out = Path(out)
    text = cert.dumps()
    md = render_certificate(cert)  # render before writing: a render error leaves both old files
    md_path, json_path = (out / name for name in REPORT_FILES)
    write_together({md_path: md, json_path: text})
    return md_path, json_path


def check_outputs(args) -> None:
    """Every place the run will write, checked before any work (a LoopcertError naming the flag,
    the path and why): --plan-out's file; else --out, the shard's or the certificate's folder."""
    if args.predict is not None:
        return  # it writes nothing
    if args.plan_out is not None:
        check_output_file(args.plan_out, "--plan-out")
    else:
        check_output_folder(args.out, "--out", (SHARD_FILE,) if args.shard is not None else REPORT_FILES)


def keep_elsewhere(what: str, failure: str, write) -> LoopcertError:
    """A finished run whose result cannot be written where it was asked (`failure` says where and
    why: a full disk, a folder gone): the result is kept in a fresh folder of the system's temporary
    directory by `write(folder)`, or, if even that fails, printed on stdout by `write(None)`;
    -> the usage error that says where it is."""
    try:
        folder = Path(tempfile.mkdtemp(prefix="loopcert-kept-"))
        write(folder)
    except (OSError, LoopcertError) as e:
        print(f"{failure}; nor in a temporary folder ({e}): the {what} follows on stdout", file=sys.stderr)
        write(None)
        return LoopcertError(f"{failure}; the {what} was printed on stdout")
    return LoopcertError(f"{failure}; the {what} is kept in {folder}: move it where it belongs")


def plan_by_name(args) -> None:
    """--plan NAME (quick, full, smoke) is the plan of that name, as --quick / --full / --smoke;
    any other value is a --plan-out file."""
    if args.plan in PLANS and not Path(args.plan).exists():
        args.mode, args.plan = args.plan, None


def run(args) -> int:
    plan_by_name(args)
    progress = timed_progress()
    jobs = args.jobs
    if jobs is None and args.executor == "local":
        jobs = default_jobs(args.device)  # Ray's default: one per CPU (GPU) of the cluster
    check_outputs(args)
    http, relative_http = http_options(args)
    # the run: what, with what, where, which plan and seed (--predict takes them by name)
    what = (args.model, args.decoder, args.device, args.dtype, args.mode, args.seed, progress)
    if args.predict_measured and args.predict is None:
        raise LoopcertError("--predict-measured goes with --predict SECONDS: give both, or neither")
    if args.predict is not None:
        if args.relative_to is not None:
            raise LoopcertError(
                f"--predict does not predict the engine-relative check: drop --relative-to "
                f"{args.relative_to} (it draws each case from both decoders, about 4x the sampling "
                "check's draws)"
            )
        got = predict(
            args.model,
            args.decoder,
            plan=args.mode,
            device=args.device,
            dtype=args.dtype,
            seed=args.seed,
            progress=progress,
            slice_seconds=args.predict,
            jobs=jobs or default_jobs(),
            executor=args.executor,
            time_budget=args.time_budget,
            measured=args.predict_measured,
            http=http,
        )
        print_estimate(got.mode, got.model, got.estimate)
        if got.stopped:
            for w in got.warnings:
                print(f"stopped: {w}")
            return 0
        print_prediction(got)
        for w in got.estimate.warnings:
            print(f"estimate: {w}")
        for w in got.warnings:
            print(f"warning: {w}")
        return 0
    shard = Shard.parse(args.shard) if args.shard is not None else None
    if args.plan_out is not None:
        got = run_certify(
            *what,
            time_budget=args.time_budget,
            plan_out=args.plan_out,
            relative_to=args.relative_to,
            http=http,
            relative_http=relative_http,
        )
        print(
            f"wrote {got['path']}: the plan of {got['units']} work units; give it to every part with --plan"
        )
        return 0
    cert = run_certify(
        *what,
        time_budget=args.time_budget,
        shard=shard,
        jobs=jobs,
        executor=args.executor,
        ray_address=args.ray_address,
        plan_file=args.plan,
        relative_to=args.relative_to,
        compile=args.compile,
        http=http,
        relative_http=relative_http,
    )
    if shard is not None:
        cert["command"] = command_line(args, cert["identity"]["model"])  # the unsharded run's command
        try:
            path = write_shard(args.out, cert)
        except LoopcertError as e:
            raise keep_elsewhere(
                "shard", str(e), lambda f: write_shard(f, cert) if f else print(json_text(cert))
            ) from None
        print(
            f"shard {shard}: {len(cert['results'])} of {len(cert['units'])} work units in "
            f"{cert['seconds']:.0f}s; wrote {path} (loopcert merge assembles the certificate)"
        )
        return 0
    cert = cert.with_stamp(
        command=command_line(args, cert.stamp.model), decoder=http_decoder_stamp(args, cert.stamp.decoder)
    )
    return publish(cert, args.out, f" in {cert.stamp.seconds:.0f}s")


def timed_progress():
    """progress(msg): msg printed after the seconds since this call."""
    t0 = time.perf_counter()
    return lambda msg: print(f"[{time.perf_counter() - t0:6.1f}s] {msg}", flush=True)


def publish(cert: Certificate, out, how: str) -> int:
    """Write the certificate (both files or neither), say the verdict (`how` the run ended: its
    time, or the shards it came from), each failed check with its reason (reports/console.py),
    the skipped checks and where it went;
    -> the exit status (exit_status): 0 pass, 1 a check failed, 3 incomplete."""
    kept = None
    with uninterrupted():
        try:
            md_path, json_path = write_reports(cert, out)
        except OSError as e:
            kept = keep_elsewhere(
                "certificate",
                f"cannot write the certificate to {out}: {e.strerror or e}",
                lambda f: write_reports(cert, f) if f else print(cert.dumps()),
            )
    na = [c.name for c in cert.checks if c.passed and c.not_applicable]
    judged = len(cert.checks) - len(na)  # a check that does not apply is not counted as passed
    print(
        f"{cert.verdict}: {sum(c.passed for c in cert.checks) - len(na)}/{judged} checks passed{how}"
        + (f", {len(na)} not applicable ({', '.join(na)})" if na else "")
        + (f"; failed: {', '.join(cert.failed)}" if cert.failed else "")
        + (f"; incomplete: {', '.join(cert.incomplete)}" if cert.incomplete else "")
        + "".join(f"; {part}" for part in scope_parts(cert.scope))
    )
    for c in cert.checks:
        if c.incomplete is not None:
            print(f"incomplete: {c.name}: {c.incomplete}")
        elif not c.passed:
            print(f"failed: {c.name}: {failure_line(c)}")
    for name, why in cert.skipped.items():
        print(f"skipped: {name}: {why}")
    if kept is not None:
        raise kept
    print(f"wrote {md_path} and {json_path}")
    return exit_status(cert.verdict)


EXIT_INCOMPLETE = 3  # beside 0 pass, 1 a check failed, 2 a usage error (loopcert/cli.py)


def exit_status(verdict: str) -> int:
    """0 PASS; 3 INCOMPLETE (a time budget cut a check short of its planned power, nothing failed:
    neither a pass nor a failure); 1 FAIL or NON-REPRODUCIBLE."""
    return 0 if verdict == "PASS" else EXIT_INCOMPLETE if verdict == INCOMPLETE else 1
