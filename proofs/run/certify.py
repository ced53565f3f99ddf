"""Certify a decoder: run every check of a plan and assemble the certificate (docs/design.md
sections 6 and 8).

`certify(...)` returns the certificate (proofs/certificate.py): a verdict, a stamp (commit,
versions, device, dtype, seeds, date) and one CheckResult per check. It computes; reports/
renders; loopcert/commands/certify.py writes. The plans are proofs/run/plan.py's, the checks'
bodies proofs/run/run.py's, the run as work units proofs/run/units.py's.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Sequence

import torch

import refdec
from proofs.certificate import Certificate, Refusal, Scope, Stamp
from proofs.checks.distribution import refusal_parameters
from proofs.decoder_attributes import bound_model
from proofs.decoders.candidates import (
    Candidate,
    python_candidate,
    user_candidate,
)
from proofs.decoders.http_decoder import HTTPOptions, is_http_spec
from proofs.decoders.protocol import Decoder, Factory
from proofs.details import SamplingDetails
from proofs.result import CheckResult
from proofs.run.jobs import Executor, LocalExecutor, check_jobs
from proofs.run.plan import PLANS, CertifyPlan
from proofs.run.planfile import check_plan, read_plan, write_plan
from proofs.run.run import CertifyRun
from proofs.run.sampling_units import pool_sampling, units_by_id
from proofs.run.shard_schema import check_tallies
from proofs.run.shards import Shard, plan_hash
from proofs.run.units import dispatch_order, plan_units
from refdec.errors import LoopcertError
from refdec.files import check_output_file, parse_dtype
from refdec.load import model_fingerprint
from refdec.progress import Progress
from refdec.sampling import ENGINE_FIELDS, TEMPERATURE_FIRST
from refdec.stamp import git_commit, stamp
from refdec.validate import check_int, check_number
from refdec.values import check_device, dtype_name
from speed.settings import default_depths

FALLBACK_MODEL = "tiny-raven"
NON_REPRODUCIBLE = "NON-REPRODUCIBLE"
INCOMPLETE = "INCOMPLETE"


def certify(
    model: str | None = None,
    decoder: str | Decoder | Factory | None = None,
    *,
    plan: str | CertifyPlan = "quick",
    device: str = "cpu",
    dtype="float32",
    seed: int = 0,
    label: str | None = None,
    http: HTTPOptions | None = None,
    progress: Progress | None = None,
    time_budget: float | None = None,
    jobs: int | None = 1,
    executor: str = "local",
    ray_address: str | None = None,
    relative_to: str | None = None,
    compile: bool = False,
    **renamed,
) -> Certificate:
    """Certify `decoder` on `model` (a preset, "default" or a folder; None: the default model)
    under `plan` ("quick", "full" or a CertifyPlan); -> the Certificate (docs/decoders.md "Certify
    from Python and from your tests"). It writes no file and leaves torch's thread count as it is.

    `decoder` is a --decoder spec string ("module:factory", "http://HOST:PORT/v1", "mlx-lm", ...),
    a decoder object (anything with generate(); certified on the model it was built for only:
    proofs.decoders.candidates.object_candidate), a factory (model -> decoder, a class included),
    or None for fastdec's grid. An object or factory is called `label` in the certificate (default:
    its qualified name). `http` holds an http:// spec's options (--server, --http-timeout,
    --api-key, --decoder-dtype, --served-model, --boundaries). The other arguments are the
    command's flags (loopcert certify --help); a decoder object or factory lives in this process
    and its forks, so it runs with `executor` "local" only. Every usage error is a LoopcertError
    raised before any check runs."""
    for old, new in (("model_name", "model"), ("mode", "plan")):
        if old in renamed:
            warnings.warn(f"certify({old}=...) is deprecated: pass {new}=", DeprecationWarning, stacklevel=2)
            if new == "model":
                model = renamed.pop(old)
            else:
                plan = renamed.pop(old)
    if renamed:
        raise TypeError(f"certify() got unexpected keyword argument(s): {', '.join(sorted(renamed))}")
    user, http = decoder_argument(decoder, label, executor, model, http, progress)
    cert = run_certify(
        model,
        user,
        device,
        dtype,
        plan,
        seed,
        progress,
        time_budget=time_budget,
        jobs=jobs,
        executor=executor,
        ray_address=ray_address,
        relative_to=relative_to,
        compile=compile,
        http=http,
    )
    if isinstance(decoder, str):  # what the command stamps too: the server it found, the versions
        cert = cert.with_stamp(decoder=described(decoder, cert.stamp.decoder))
    return cert


def decoder_argument(
    decoder: str | Decoder | Factory | None,
    label: str | None,
    executor: str,
    model: str | None,
    http: HTTPOptions | None,
    progress: Progress | None,
) -> tuple[str | Candidate | None, HTTPOptions | None]:
    """certify()'s and predict()'s `decoder`, `label` and `http` checked: (the spec string, None
    for fastdec, or a Python decoder's Candidate; the http:// spec's options, naming `model` unless
    they name one). A LoopcertError names a bad one, before any work."""
    if decoder is None or isinstance(decoder, str):
        if label is not None:
            raise LoopcertError(
                f"label={label!r} names a decoder object or factory; "
                f"{'fastdec' if decoder is None else repr(decoder)} is named by itself"
            )
        user = decoder
    else:
        user = python_candidate(decoder, label)
        if executor != "local":
            raise LoopcertError(
                f"{user.label} is a Python object: it runs in this process and its forks (executor "
                f"'local'), not with executor {executor!r}; certify it as a 'module:factory' spec there"
            )
    if http is not None and not isinstance(http, HTTPOptions):
        raise LoopcertError(f"http must be an HTTPOptions, got {type(http).__name__!r}")
    if http is not None and not is_http_spec(decoder):
        raise LoopcertError(f"http= holds an http:// decoder's options; the decoder is {decoder!r}")
    if is_http_spec(decoder):  # the server is checked to serve MODEL as given (a folder, a name)
        http = http or HTTPOptions()
        http = http if http.model else dataclasses.replace(http, model=model)
    if not isinstance(user, (str, type(None))) and bound_model(decoder) is None and progress is not None:
        progress(
            f"{user.label} has no `model` attribute saying which model it decodes: it is taken as built "
            f"for {model or 'the default model'}, and its tokens are judged as such"
        )
    return user, http


def run_certify(
    model_name: str | None = None,
    decoder: str | Candidate | None = None,
    device: str = "cpu",
    dtype="float32",
    mode: str | CertifyPlan = "quick",
    seed: int = 0,
    progress: Progress | None = None,
    time_budget: float | None = None,
    shard: Shard | None = None,
    results: dict | None = None,
    jobs: int | None = 1,
    executor: str = "local",
    ray_address: str | None = None,
    plan_file: str | None = None,
    plan_out: str | None = None,
    planned: dict | None = None,
    relative_to: str | None = None,
    compile: bool = False,
    http: HTTPOptions | None = None,
    relative_http: HTTPOptions | None = None,
) -> Certificate | dict:
    """Run every check of `mode` (a plan's name, or the plan) on the candidate (a --decoder spec,
    or a Candidate: certify()'s Python decoder); returns the certificate (proofs/certificate.py),
    or with `shard` or `plan_out` a dict: what `loopcert certify` and `loopcert merge` run.

    The run is a list of work units in plan order (proofs/run/units.py). With `shard` it runs only the
    shard's units and returns their raw results with the run's identity (proofs/run/shards.py);
    with `results` (merged shards) it runs nothing and assembles the certificate from them,
    through the same code as a single run. `jobs` > 1 runs the units (of the shard, if any) in
    that many forked worker processes (proofs/run/jobs.py); `executor` "ray" runs them as Ray tasks,
    `jobs` at once (None: one per CPU, or GPU, of the cluster), on the cluster at `ray_address` or
    a local one (proofs/run/ray_executor.py): the same results, apart from timings.

    One plan for every machine (proofs/run/planfile.py): with `plan_out` it plans, writes the plan
    file there and returns {"path", "units"}; with `plan_file` it takes the cases and N from that
    file instead of choosing them; `planned` is the same choices as data (merged shards').

    `relative_to` (--relative-to SPEC2, the syntax of --decoder) adds the engine-relative check:
    the candidate's samples against SPEC2's on every sampling case (proofs/checks/relative.py).

    `compile` (--compile) certifies fastdec's grid with compiled engine steps (fastdec/compiled.py;
    the bitwise check compares them with the compiled baseline); it takes no --decoder.

    `http` and `relative_http` are the HTTPOptions of an http:// `decoder` and `relative_to` (the
    command's HTTP flags; None: the defaults).

    Usage errors (bad mode, dtype, seed, device, --decoder or --relative-to spec, model, a decoder
    that does not apply to the model: check_applies) raise LoopcertError before any check runs."""
    say = progress or (lambda _msg: None)
    given_user = decoder if isinstance(decoder, Candidate) else None
    if given_user is not None:
        decoder = given_user.label
    plan = plan_of(mode)
    dtype = parse_dtype(dtype)
    # every sampled check seeds a torch.Generator with seed + i: keep the last one below 2**64
    if check_int("seed", seed, 0) >= 2**63:
        raise LoopcertError(
            f"seed must be < 2**63 (sampled checks seed generators with seed + i), got {seed!r}"
        )
    if time_budget is not None:
        check_number("--time-budget (seconds)", time_budget, 0, low_open=True)
    if plan_out is not None:  # where the plan goes, before the plan is made (minutes on a real model)
        check_output_file(plan_out, "--plan-out")
    runner = pick_executor(executor, jobs, device, ray_address)
    check_device(device)
    given = read_plan(plan_file) if plan_file is not None else None
    if given is not None:
        planned = given["sampling"]
    model_name = model_name or default_model_name()
    if relative_to is not None and not decoder:
        raise LoopcertError(
            f"--relative-to {relative_to} needs --decoder: it compares that decoder with this one"
        )
    if compile and decoder:
        raise LoopcertError(
            f"--compile compiles fastdec's engine steps; --decoder {decoder} is certified as it is: drop one"
        )
    connect = results is None  # merged shards: no server is reached
    user = given_user or (user_candidate(decoder, connect, http) if decoder else None)
    relative = user_candidate(relative_to, connect, relative_http) if relative_to is not None else None
    t_start = time.perf_counter()
    run = CertifyRun(
        plan,
        model_name,
        user,
        device,
        dtype,
        seed,
        say,
        time_budget,
        planned=planned,
        relative=relative,
        compile=compile,
        forks=isinstance(runner, LocalExecutor) and runner.workers > 1,
    )
    if results is None:  # a decoder that cannot serve the certified model is a usage error, not a FAIL
        for spec, candidate in ((decoder, user), (relative_to, relative)):
            if candidate is not None:
                check_applies(run, spec, candidate)
    decoder_name = decoder or ("fastdec compiled" if compile else "fastdec")
    dname = dtype_name(dtype)
    what = f" (shard {shard})" if shard else (" (merging shards)" if results is not None else "")
    say(
        f"certifying {decoder_name} on {model_name} (R={run.R}, V={run.oracle.V}), {plan.mode} plan, "
        f"{device}, {dname}, seed {seed}{what}"
    )
    say("settings: " + "; ".join(c.label for c in run.candidates))
    if run.sampler_order != TEMPERATURE_FIRST:
        say(
            f"the decoder declares sampler_order {run.sampler_order!r}: "
            "the sampling cases are judged under it"
        )
    if run.declared[1]:
        say(
            "not sampled under the plan's case(s) whose parameters the decoder does not declare "
            "(sampling_fields): " + "; ".join(run.declared[1])
        )
    if relative is not None:
        say(f"engine-relative check against {relative_to} (the same cases, both decoders)")

    units, assemble = plan_units(run, dname)
    ident = identity(run, decoder_name, time_budget, relative_to)
    if given is not None:
        check_plan(given, ident, [u for u, _ in units])
        say(f"the plan of {given['_path']}: its cases and N, not chosen here")
    if plan_out is not None:
        path = write_plan(plan_out, ident, [u for u, _ in units], run.sampling_record())
        return {"path": str(path), "units": len(units)}
    if results is None:
        todo = [(uid, fn) for k, (uid, fn) in enumerate(units) if shard is None or shard.takes(k)]
        ids = [uid for uid, _ in todo]
        runner = capped(runner, len(todo))
        if runner is not None:
            say(runner.describe(len(todo)))
            results = runner.run_all(
                run, dispatch_order(run, todo), lambda w: pool_sampling(run, ids, workers=w)
            )
            results = {uid: results[uid] for uid in ids}  # plan order
        else:
            pool_sampling(run, ids)
            results = {uid: fn() for uid, fn in todo}
        if shard is not None:
            return {
                "shard": [shard.index, shard.count],
                "identity": ident,
                "units": [u for u, _ in units],
                "sampling": run.sampling_record(),  # the plan merge assembles by
                "results": results,
                "seconds": time.perf_counter() - t_start,
            }
    else:  # merged shards: each tally must bin as its unit's law (proofs/run/shard_schema.py)
        laws = {uid: run.sampling_setup(u.model).law(u.case) for uid, u in units_by_id(run).items()}
        check_tallies(results, laws)
    checks = [fn(results) for fn in assemble]

    failed = tuple(c.name for c in checks if c.failed)
    incomplete = tuple(c.name for c in checks if c.incomplete is not None)
    d1, d2 = default_depths(run.R)
    return Certificate(
        verdict=verdict_of(failed, incomplete),
        failed=failed,
        incomplete=incomplete,
        scope=scope_of(run, checks),
        skipped=skipped_of(checks),
        stamp=Stamp(
            **certificate_stamp(model_name, decoder_name, device, dtype, plan, seed),
            sampler_order=run.sampler_order,
            relative_to=relative_to,
            **sampling_stamp(run),
            R=run.R,
            vocab_size=run.oracle.V,
            settings=tuple(c.label for c in run.candidates),
            default_depths=(d1, d2),
            alpha=plan.alpha,
            target_tv=plan.tv,
            power=plan.power,
            sampling_budget_s=run.pool_budget_s,
            work_units=len(units),
            seconds=time.perf_counter() - t_start,
        ),
        checks=tuple(checks),
    )


def described(spec: str | None, decoder: str) -> str:
    """The stamp's decoder: `decoder` (the spec), for an HTTP decoder the server and dialect it
    spoke, for mlx-lm, llama.cpp and OpenVINO the versions decoded with (after the run: the HTTP
    decoder says what it found)."""
    from proofs.decoders.http_decoder import built
    from proofs.decoders.llamacpp_spec import is_llamacpp_spec
    from proofs.decoders.mlx_spec import is_mlx_spec
    from proofs.decoders.openvino_spec import is_openvino_spec

    if is_llamacpp_spec(spec):
        from proofs.decoders.llamacpp_decoder import llamacpp_versions

        return f"{decoder} ({llamacpp_versions()})"
    if is_mlx_spec(spec):
        from proofs.decoders.mlx_decoder import mlx_versions

        return f"{decoder} ({mlx_versions()})"
    if is_openvino_spec(spec):
        from proofs.decoders.openvino_decoder import openvino_stamp

        return f"{decoder} ({openvino_stamp(spec)})"
    dec = built(spec) if is_http_spec(spec) else None
    return decoder if dec is None else f"{decoder} ({dec.description})"


def plan_of(plan: str | CertifyPlan) -> CertifyPlan:
    """A plan by name ("quick", "full") or the plan itself; a LoopcertError names anything else."""
    if isinstance(plan, CertifyPlan):
        return plan
    if isinstance(plan, str) and plan in PLANS:
        return PLANS[plan]
    raise LoopcertError(f"plan must be one of {sorted(PLANS)} or a CertifyPlan, got {plan!r}")


def check_applies(run: CertifyRun, spec: str, candidate) -> None:
    """Build the candidate on the certified model once, before any check (in a probe child when the
    run forks workers: CertifyRun.declared_of): a factory that declines it (NotApplicable: an
    mlx-lm that cannot load the folder) or a server that serves another model
    (proofs.decoders.server_info.check_identity) is a LoopcertError naming the spec, so the run
    stops with nothing written over the last certificate. A factory that breaks otherwise is left
    to the checks: that is a finding about the decoder, reported as its failure."""
    declared = run.declared_of(candidate)
    if declared.not_applicable is not None:
        raise LoopcertError(
            f"{spec} does not apply to the certified model {run.model_name}: {declared.not_applicable}"
        )


def capped(runner: Executor | None, units: int) -> Executor | None:
    """--jobs N capped by the work units to run: never more forked workers (each a copy of the
    models) than units; one unit or none runs in this process."""
    if isinstance(runner, LocalExecutor) and runner.workers > units:
        return LocalExecutor(units) if units > 1 else None
    return runner


EXECUTORS = ("local", "ray")


def pick_executor(name: str, jobs: int | None, device: str, ray_address: str | None) -> Executor | None:
    """The executor of --executor NAME with --jobs (None: run the units in this process, one by
    one); a LoopcertError naming a bad value."""
    if name not in EXECUTORS:
        raise LoopcertError(f"--executor must be one of {', '.join(EXECUTORS)}, got {name!r}")
    if name == "local":
        if ray_address is not None:
            raise LoopcertError(f"--ray-address {ray_address} needs --executor ray")
        jobs = check_jobs(1 if jobs is None else jobs, device)
        return LocalExecutor(jobs) if jobs > 1 else None
    if jobs is not None:
        check_jobs(jobs, device, "ray")
    from proofs.run.ray_executor import RayExecutor, check_address, import_ray

    import_ray()  # a missing extra, or an address nothing answers at, is a usage error before the first check
    if ray_address is not None:
        check_address(ray_address)
    return RayExecutor(jobs, device, ray_address)


def identity(
    run: CertifyRun, decoder: str | None, time_budget: float | None, relative_to: str | None = None
) -> dict:
    """What every shard of one run must share (proofs/run/shards.py IDENTITY)."""
    return {
        "relative_to": relative_to,
        "commit": git_commit(),
        "plan": run.plan.mode,
        "plan_hash": plan_hash(run.plan),
        "model": run.model_name,
        "model_fingerprint": model_fingerprint(run.model64),
        "seed": run.seed,
        "decoder": decoder or "fastdec",
        "device": run.device,
        "dtype": dtype_name(run.dtype),
        "time_budget": time_budget,
        "sampling_plan": plan_hash(run.sampling_record()),  # cases, N and bins: as planned where it ran
    }


def verdict_of(failed: Sequence[str], incomplete: Sequence[str] = ()) -> str:
    """FAIL when a check failed; NON-REPRODUCIBLE when the only failures are that a seed does not
    reproduce its tokens, alone or beside other requests (the law may be right:
    proofs/checks/reproducibility.py, seed_invariance.py); else INCOMPLETE when a check was cut
    short of its planned power with no evidence against the decoder (CheckResult.incomplete: a
    time budget is a guard against a runaway run, never the verdict); else PASS."""
    if failed:
        return NON_REPRODUCIBLE if set(failed) <= {"reproducibility", "seed_invariance"} else "FAIL"
    return INCOMPLETE if incomplete else "PASS"


def skipped_of(checks: list[CheckResult]) -> dict[str, str]:
    """Check name -> why it did not run (CheckResult.skipped): a skip is never silent; the
    verdict line, the certificate and the CLI's summary all name it."""
    return {c.name: c.skipped for c in checks if c.skipped}


def sampling_stamp(run: CertifyRun) -> dict:
    """The stamp's account of the engines' other sampling parameters: what the decoder declares
    and the plan's cases it was not sampled under (CertifyRun.declared)."""
    s = run.sampling_support
    return {
        "sampling_fields": tuple(f for f in ENGINE_FIELDS if f in s.fields),
        "sampling_conventions": {
            "min_p_order": s.min_p_order,
            "penalty_scope": s.penalty_scope,
            "penalty_window": s.penalty_window,
            "penalty_sign": s.penalty_sign,
        },
        "not_declared": run.declared[1],
    }


def scope_of(run: CertifyRun, checks: Sequence[CheckResult]) -> Scope:
    """What the verdict covers (proofs.certificate.Scope): the engines' other sampling parameters
    the decoder declares and does not, the plan's cases left out for it, and every case its engine
    refused, in check order."""
    declared = sampling_stamp(run)["sampling_fields"]
    refused = [
        Refusal(c.name, case.case, *refusal_parameters(case.params or {}), case.refused)
        for c in checks
        if isinstance(c.details, SamplingDetails)
        for case in c.details.cases
        if case.refused
    ]
    return Scope(
        declared=declared,
        not_declared=tuple(f for f in ENGINE_FIELDS if f not in declared),
        not_sampled=run.declared[1],
        refused=tuple(refused),
    )


def certificate_stamp(
    model_name: str, decoder: str, device: str, dtype: torch.dtype, plan: CertifyPlan, seed: int
) -> dict:
    """refdec.stamp's fields, plus what a certificate adds: decoder, plan, base seed (the rest of
    proofs.certificate.Stamp is known once the run has ended)."""
    seeds = {
        "sampling": f"{seed} + i for sample i of each case",
        "mutants": f"{seed} + i for sample i of each mutant case",
        "theorem1_random": seed,
        "greedy": 0,
    }
    return {**stamp(model_name, device, dtype, seeds), "mode": plan.mode, "decoder": decoder, "seed": seed}


def default_model_name() -> str:
    """ "default" when the trained model is installed, else the tiny preset of its family."""
    try:
        refdec.load_model("default")
    except LoopcertError:
        return FALLBACK_MODEL
    return "default"
