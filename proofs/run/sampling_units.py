"""The sampling checks as work units (docs/design.md sections 7 and 8).

One sampling check per (model, setting) (CertifyRun.sampling_plan says which models), each a list
of work units, one per case: deterministic given the plan and the seed, runnable on its own (a
shard's, a worker's), its raw result a sample tally. The check is assembled from its units' raw
results, whichever process produced them: Holm across every view of its cases
(proofs/checks/distribution.py evaluate). A unit samples for the time the run's SamplingPool
hands it (proofs/run/budget.py).

With --relative-to, each sampling check has an engine-relative twin (`relative_checks`): one unit
per case (`relative/<model>/<setting>/<case>`) drawing the case from both decoders
(proofs/run/relative_units.py runs and assembles them); its units share the pool, weighed by the
draws of both decoders.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass

from proofs.checks.distribution import evaluate, sample_tally
from proofs.decoder_attributes import prepare_decoder
from proofs.decoders.candidates import Candidate
from proofs.decoders.protocol import Decoder, NotApplicable
from proofs.details import SamplingDetails
from proofs.result import CheckResult
from proofs.run.budget import RUNAWAY, RateDeadline, SamplingPool
from proofs.run.run import CertifyRun
from refdec.tokenizer import byte_decode


@dataclass(frozen=True)
class WorkUnit:
    """One case of one setting on one model: deterministic given the plan and the seed, runnable on
    its own (shards), `id` stable across runs and machines."""

    id: str  # "sampling/<model>/<setting>/<case>" (or "relative/...")
    check: str  # the check whose evaluation combines it
    model: str
    setting: str
    case: str
    samples: int  # N, planned from the target TV (a relative unit: the draws of both decoders, 2N)
    base_seed: int  # sample i uses seed base_seed + i
    budget_s: float  # its proportional share of the sampling time budget


@dataclass(frozen=True)
class SamplingCheck:
    label: str  # "sampling[<model>: <setting>]"
    model: str
    candidate: Candidate
    why: str  # why this model is sampled (CertifyRun.sampling_plan)
    budget_s: float
    units: tuple[WorkUnit, ...]  # one per case; none when not applicable
    not_applicable: str | None = None


def sampling_checks(run: CertifyRun) -> list[SamplingCheck]:
    """One check per (model, setting), the sampling budget split evenly between them and, within
    a check, between its cases in proportion to N."""
    plan = run.sampling_plan()
    per_check = run.sampling_budget_s / max(1, sum(len(grid) for _, grid, _ in plan))
    out = []
    for name, grid, why in plan:
        for c in grid:
            na = f"{c.label} serves only its own model" if c.own_model and name != run.model_name else None
            units = () if na else _units(run, name, c.label, per_check)
            out.append(SamplingCheck(f"sampling[{name}: {c.label}]", name, c, why, per_check, units, na))
    return out


def _units(run: CertifyRun, name: str, setting: str, budget_s: float) -> tuple[WorkUnit, ...]:
    s = run.sampling_setup(name)
    total = max(1, sum(s.samples))
    return tuple(
        WorkUnit(
            f"sampling/{name}/{setting}/{law.case.name}",
            f"sampling[{name}: {setting}]",
            name,
            setting,
            law.case.name,
            n,
            run.seed,
            budget_s * n / total,
        )
        for law, n in zip(s.laws, s.samples, strict=True)
    )


@dataclass(frozen=True)
class RelativeCheck:
    """The engine-relative twin of one sampling check: the same cases, drawn from the candidate
    and from the reference decoder (--relative-to)."""

    label: str  # "relative_sampling[<model>: <setting>]"
    model: str
    candidate: Candidate
    reference: Candidate
    sampling_label: str  # its twin's label: the candidate's decoder is built (once) under it
    why: str
    budget_s: float
    units: tuple[WorkUnit, ...]
    not_applicable: str | None = None


def relative_checks(run: CertifyRun) -> list[RelativeCheck]:
    """One per sampling check when the run has a reference decoder (run.relative), else none."""
    if run.relative is None:
        return []
    out = []
    for chk in sampling_checks(run):
        label = f"relative_sampling[{chk.model}: {chk.candidate.label}]"
        na = chk.not_applicable
        if not na and run.relative.own_model and chk.model != run.model_name:
            na = f"{run.relative.label} serves only its own model"
        units = ()
        if not na:
            s = run.sampling_setup(chk.model)
            total = max(1, sum(s.relative))
            units = tuple(
                WorkUnit(
                    f"relative/{chk.model}/{chk.candidate.label}/{law.case.name}",
                    label,
                    chk.model,
                    chk.candidate.label,
                    law.case.name,
                    2 * n,
                    run.seed,
                    chk.budget_s * n / total,
                )
                for law, n in zip(s.laws, s.relative, strict=True)
            )
        out.append(
            RelativeCheck(
                label, chk.model, chk.candidate, run.relative, chk.label, chk.why, chk.budget_s, units, na
            )
        )
    return out


def units_by_id(run: CertifyRun) -> dict[str, WorkUnit]:
    """Every sampling unit of the run (the engine-relative ones included) by id."""
    checks = [*sampling_checks(run), *relative_checks(run)]
    return {u.id: u for chk in checks for u in chk.units}


def pool_sampling(run: CertifyRun, unit_ids: Iterable[str] | None = None, workers: int = 1) -> SamplingPool:
    """The run's sampling pool over the sampling units among `unit_ids` that this process runs or
    hands out (None: every one), for `workers` processes sampling at once; it becomes run.pool."""
    planned = {uid: u.samples for uid, u in units_by_id(run).items()}
    run.pool = SamplingPool.over(
        planned, planned if unit_ids is None else unit_ids, run.pool_budget_s, workers
    )
    return run.pool


def own_pool(run: CertifyRun) -> SamplingPool:
    """run.pool; made over every sampling unit when certify made none (units run one by one)."""
    return run.pool if run.pool is not None else pool_sampling(run)


def decoder_of(run: CertifyRun, check: SamplingCheck) -> Decoder | NotApplicable:
    return run.sampling_decoder(check.label, check.candidate, check.model)


def run_unit(run: CertifyRun, unit: WorkUnit, decoder: Decoder, budget_s: float | None = None) -> dict:
    """Sample one unit for `budget_s` (default: its planned share, unit.budget_s): at most that under
    a given --time-budget; under the plan's budget as long as its N takes at its measured rate, up
    to RUNAWAY x its part of the budget (proofs.run.budget.RateDeadline)."""
    law = run.sampling_setup(unit.model).law(unit.case)
    share = unit.budget_s if budget_s is None else budget_s
    start = time.perf_counter()
    deadline = (
        start + share
        if run.budget_given
        else RateDeadline(start, share, unit.samples, RUNAWAY * unit.budget_s)
    )
    tally = sample_tally(
        decoder, law, unit.samples, unit.base_seed, deadline, run.models.sampling_rows, stop_early=True
    )
    how = "generate_batch" if tally["batched"] else "one call per seed"
    run.say(
        f"  {unit.id}: {tally['samples']}/{unit.samples} samples in {tally['seconds']:.1f}s "
        f"({tally['samples_per_s']:.1f}/s, {how})"
    )
    return {**tally, "unit": unit.id}


def sampling_unit_result(
    run: CertifyRun, check: SamplingCheck, unit: WorkUnit, share: float | None = None
) -> dict:
    """A unit's raw result: its tally, or why it has none (declined, or an error). `share`: its
    sampling time, handed out by a parallel run's parent (proofs/run/jobs.py); None: from this
    process's pool (run.pool; every sampling unit's when none was made)."""
    try:
        decoder = decoder_of(run, check)
        pool = own_pool(run) if share is None else None
        if isinstance(decoder, NotApplicable):
            if pool is not None:
                pool.share(unit.id)  # counted off: its share stays in the pool for the units after it
            return {"unit": unit.id, "not_applicable": str(decoder)}
        case = run.sampling_setup(unit.model).law(unit.case).case
        prepared = prepare_decoder(decoder, len(case.prompt) + case.n)  # compiles: not the budget's
        if prepared >= 1.0:
            run.say(f"  {unit.id}: the decoder prepared (compiled) in {prepared:.1f}s, outside the budget")
        if pool is not None:
            share = pool.share(unit.id)
        t0 = time.perf_counter()
        try:
            tally = run_unit(run, unit, decoder, share)
        finally:
            if pool is not None:
                pool.spend(time.perf_counter() - t0)
        if pool is not None:
            outlook = pool.outlook(tally["samples_per_s"] if tally["samples"] else 0.0)
            if outlook:
                run.say(outlook)
        return {**tally, "budget_seconds": share}
    except Exception as e:  # noqa: BLE001 - the check fails naming it (usage errors were raised before)
        return {"unit": unit.id, "unit_error": f"{type(e).__name__}: {e}"}


def sampling_result(run: CertifyRun, check: SamplingCheck, raws: list[dict]) -> CheckResult:
    """Assemble one sampling check from its units' raw results (any shard's)."""
    extra = {"model": check.model, "why_this_model": check.why, "budget_s": check.budget_s}
    na = check.not_applicable or next((r["not_applicable"] for r in raws if "not_applicable" in r), None)
    unsampled = SamplingDetails.unsampled(**extra)
    if na:
        return CheckResult(check.label, math.nan, math.nan, True, unsampled, not_applicable=na)
    err = next((r["unit_error"] for r in raws if "unit_error" in r), None)
    if err:
        return CheckResult(check.label, math.nan, math.nan, False, unsampled, error=err)
    s = run.sampling_setup(check.model)
    r = evaluate(check.label, s.laws, raws, run.plan.target)
    extra["units"] = [t["unit"] for t in raws]
    if s.model.cfg.vocab_size >= 256:  # byte-level: show the prompt as text too
        extra["prompt_text"] = byte_decode(s.laws[0].case.prompt)
    return r.with_details(**extra)
