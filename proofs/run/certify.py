"""Certify a decoder: run every check of a plan and assemble the certificate (docs/design.md
sections 6 and 8).

`certify(...)` returns the certificate (proofs/certificate.py): a verdict, a stamp (commit,
versions, device, dtype, seeds, date) and one CheckResult per check. It computes; reports/
renders; loopcert/commands/certify.py writes. The plans are proofs/run/plan.py's, the checks'
bodies proofs/run/run.py's, the run as work units proofs/run/units.py's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

import refdec
from proofs.certificate import Certificate, Stamp
from proofs.decoders.candidates import default_depths, user_candidate
from proofs.progress import Progress
from proofs.result import CheckResult
from proofs.run.jobs import check_jobs, run_units
from proofs.run.plan import PLANS, CertifyPlan
from proofs.run.run import CertifyRun
from proofs.run.sampling_units import pool_sampling
from proofs.run.shards import Shard, plan_hash
from proofs.run.units import dispatch_order, plan_units
from proofs.stamp import git_commit, stamp
from refdec.errors import LoopcertError
from refdec.files import parse_dtype
from refdec.load import model_fingerprint
from refdec.validate import check_int, check_number
from refdec.values import check_device, dtype_name

FALLBACK_MODEL = "tiny-raven"
NON_REPRODUCIBLE = "NON-REPRODUCIBLE"


def certify(
    model_name: str | None = None,
    decoder: str | None = None,
    device: str = "cpu",
    dtype="float32",
    mode: str = "quick",
    seed: int = 0,
    progress: Progress | None = None,
    time_budget: float | None = None,
    shard: Shard | None = None,
    results: dict | None = None,
    jobs: int = 1,
) -> Certificate | dict:
    """Run every check of `mode` on the candidate; returns the certificate (proofs/certificate.py).

    The run is a list of work units in plan order (proofs/run/units.py). With `shard` it runs only the
    shard's units and returns their raw results with the run's identity (proofs/run/shards.py);
    with `results` (merged shards) it runs nothing and assembles the certificate from them,
    through the same code as a single run. `jobs` > 1 runs the units (of the shard, if any) in
    that many forked worker processes (proofs/run/jobs.py): the same results, apart from timings.

    Usage errors (bad mode, dtype, seed, device, --decoder spec, model) raise LoopcertError
    before any check runs."""
    say = progress or (lambda _msg: None)
    if mode not in PLANS:
        raise LoopcertError(f"mode must be one of {sorted(PLANS)}, got {mode!r}")
    plan = PLANS[mode]
    dtype = parse_dtype(dtype)
    # every sampled check seeds a torch.Generator with seed + i: keep the last one below 2**64
    if check_int("seed", seed, 0) >= 2**63:
        raise LoopcertError(
            f"seed must be < 2**63 (sampled checks seed generators with seed + i), got {seed!r}"
        )
    if time_budget is not None:
        check_number("--time-budget (seconds)", time_budget, 0, low_open=True)
    check_jobs(jobs, device)
    check_device(device)
    model_name = model_name or default_model_name()
    user = user_candidate(decoder, connect=results is None) if decoder else None
    t_start = time.perf_counter()
    run = CertifyRun(plan, model_name, user, device, dtype, seed, say, time_budget)
    dname = dtype_name(dtype)
    what = f" (shard {shard})" if shard else (" (merging shards)" if results is not None else "")
    say(
        f"certifying {decoder or 'fastdec'} on {model_name} (R={run.R}, V={run.oracle.V}), {plan.mode} plan, "
        f"{device}, {dname}, seed {seed}{what}"
    )
    say("settings: " + "; ".join(c.label for c in run.candidates))

    units, assemble = plan_units(run, dname)
    ident = identity(run, decoder, time_budget)
    if results is None:
        todo = [(uid, fn) for k, (uid, fn) in enumerate(units) if shard is None or shard.takes(k)]
        pool = pool_sampling(run, [uid for uid, _ in todo], workers=jobs)
        if jobs > 1:
            say(f"running {len(todo)} work units in {jobs} worker processes")
            results = run_units(dispatch_order(run, todo), jobs, pool)
            results = {uid: results[uid] for uid, _ in todo}  # plan order
        else:
            results = {uid: fn() for uid, fn in todo}
        if shard is not None:
            return {
                "shard": [shard.index, shard.count],
                "identity": ident,
                "units": [u for u, _ in units],
                "results": results,
                "seconds": time.perf_counter() - t_start,
            }
    checks = [fn(results) for fn in assemble]

    failed = tuple(c.name for c in checks if not c.passed)
    d1, d2 = default_depths(run.R)
    return Certificate(
        verdict=verdict_of(failed),
        failed=failed,
        skipped=skipped_of(checks),
        stamp=Stamp(
            **certificate_stamp(model_name, decoder or "fastdec", device, dtype, plan, seed),
            R=run.R,
            vocab_size=run.oracle.V,
            settings=tuple(c.label for c in run.candidates),
            default_depths=(d1, d2),
            alpha=plan.alpha,
            target_tv=plan.tv,
            power=plan.power,
            sampling_budget_s=run.sampling_budget_s,
            work_units=len(units),
            seconds=time.perf_counter() - t_start,
        ),
        checks=tuple(checks),
    )


def identity(run: CertifyRun, decoder: str | None, time_budget: float | None) -> dict:
    """What every shard of one run must share (proofs/run/shards.py IDENTITY)."""
    return {
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
    }


def verdict_of(failed: Sequence[str]) -> str:
    """PASS; NON-REPRODUCIBLE when the only failure is that a seed does not reproduce its tokens
    (the law may be right: proofs/checks/reproducibility.py); else FAIL."""
    if not failed:
        return "PASS"
    return NON_REPRODUCIBLE if list(failed) == ["reproducibility"] else "FAIL"


def skipped_of(checks: list[CheckResult]) -> dict[str, str]:
    """Check name -> why it did not run (CheckResult.skipped): a skip is never silent; the
    verdict line, the certificate and the CLI's summary all name it."""
    return {c.name: c.skipped for c in checks if c.skipped}


def certificate_stamp(
    model_name: str, decoder: str, device: str, dtype: torch.dtype, plan: CertifyPlan, seed: int
) -> dict:
    """proofs.stamp's fields, plus what a certificate adds: decoder, plan, base seed (the rest of
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
