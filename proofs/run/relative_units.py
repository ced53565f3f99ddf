"""The engine-relative check as work units (docs/certify.md#the-engine-relative-check).

`loopcert certify MODEL --decoder SPEC --relative-to SPEC2`: each sampling check's cases are
drawn from both decoders, one unit per case (proofs/run/sampling_units.py relative_checks
plans them), and assembled by proofs/checks/relative.py. A unit is deterministic given the plan
and the seed like a sampling unit, so it runs in any process: --jobs workers, Ray tasks, shards.
Its time comes from the run's sampling pool: half of its share for the candidate, what is left
for the reference.
"""

from __future__ import annotations

import math
import time

from proofs.checks.relative import evaluate_relative, relative_tally
from proofs.decoders.protocol import NotApplicable
from proofs.details import RelativeDetails, nothing_sampled
from proofs.result import CheckResult
from proofs.run.run import CertifyRun
from proofs.run.sampling_units import RelativeCheck, WorkUnit, own_pool

REFERENCE = " (reference)"  # the reference decoder is built under its check's label + this


def unsampled(check: RelativeCheck) -> RelativeDetails:
    """A check that sampled nothing (not applicable, or a work unit failed)."""
    return RelativeDetails(
        candidate=check.candidate.label,
        reference=check.reference.label,
        **nothing_sampled(check.model, check.why, check.budget_s),
    )


def relative_unit_result(
    run: CertifyRun, check: RelativeCheck, unit: WorkUnit, share: float | None = None
) -> dict:
    """A unit's raw result: both decoders' tallies, or why it has none (declined, an error).
    `share`: its sampling time from a parallel run's parent; None: from this process's pool."""
    try:
        candidate = run.sampling_decoder(check.sampling_label, check.candidate, check.model)
        reference = run.sampling_decoder(check.label + REFERENCE, check.reference, check.model)
        pool = own_pool(run) if share is None else None
        declined = next((d for d in (candidate, reference) if isinstance(d, NotApplicable)), None)
        if declined is not None:
            if pool is not None:
                pool.share(unit.id)
            return {"unit": unit.id, "not_applicable": str(declined)}
        if pool is not None:
            share = pool.share(unit.id)
        t0 = time.perf_counter()
        try:
            law = run.sampling_setup(unit.model).law(unit.case)
            n = unit.samples // 2
            tally = relative_tally(candidate, reference, law, n, unit.base_seed, (t0 + share / 2, t0 + share))
        finally:
            if pool is not None:
                pool.spend(time.perf_counter() - t0)
        a, b = tally["candidate"], tally["reference"]
        run.say(
            f"  {unit.id}: {a['samples']}/{n} + {b['samples']}/{n} samples (candidate + reference) in "
            f"{a['seconds'] + b['seconds']:.1f}s"
        )
        return {**tally, "unit": unit.id, "seconds": a["seconds"] + b["seconds"], "budget_seconds": share}
    except Exception as e:  # noqa: BLE001 - the check fails naming it (usage errors were raised before)
        return {"unit": unit.id, "unit_error": f"{type(e).__name__}: {e}"}


def relative_result(run: CertifyRun, check: RelativeCheck, raws: list[dict]) -> CheckResult:
    """Assemble one engine-relative check from its units' raw results (any shard's)."""
    na = check.not_applicable or next((r["not_applicable"] for r in raws if "not_applicable" in r), None)
    if na:
        return CheckResult(check.label, math.nan, math.nan, True, unsampled(check), not_applicable=na)
    err = next((r["unit_error"] for r in raws if "unit_error" in r), None)
    if err:
        return CheckResult(check.label, math.nan, math.nan, False, unsampled(check), error=err)
    s = run.sampling_setup(check.model)
    r = evaluate_relative(
        check.label, s.laws, raws, run.plan.target, check.candidate.label, check.reference.label
    )
    return r.with_details(
        model=check.model, why_this_model=check.why, budget_s=check.budget_s, units=[t["unit"] for t in raws]
    )
