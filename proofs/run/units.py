"""A certify run as a list of work units in plan order (docs/design.md section 8).

Each unit has a stable id and runs on its own, deterministic given the plan and the seed: one
per sampling case of each (model, setting) (`sampling/<model>/<setting>/<case>`,
proofs/run/sampling_units.py), with --relative-to one more per case drawing it from both decoders
(`relative/<model>/<setting>/<case>`, proofs/run/relative_units.py), one per mutant
(`mutant/<id>`), one per other check (`check/<name>`, its raw result the CheckResult as a dict;
`check/sampler_convention` when the decoder declares a convention other than
temperature-first). One assembly step per check turns the raw results,
from this process, its workers (proofs/run/jobs.py) or merged shards (proofs/run/shards.py),
into the certificate's checks, in certificate order.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

from proofs.boundaries import Boundary
from proofs.checks.depth import check_coverage, coverage
from proofs.checks.theorem2 import check_theorem2_published
from proofs.details import PositionsDetails
from proofs.result import CheckResult
from proofs.run.relative_units import relative_result, relative_unit_result
from proofs.run.run import CertifyRun
from proofs.run.sampling_units import (
    relative_checks,
    sampling_checks,
    sampling_result,
    sampling_unit_result,
    units_by_id,
)
from refdec.progress import Progress
from refdec.sampling import TEMPERATURE_FIRST

Unit = tuple[str, Callable[..., dict]]  # (stable id, run it(share=None) -> raw JSON-able result)
Assemble = Callable[[dict], CheckResult]  # {unit id: raw result} -> one check


def guarded(
    name: str, kind: str, fn: Callable[[], CheckResult], progress: Progress, seconds: float = 0.0
) -> CheckResult:
    """Run one check; any exception becomes a failed result naming it (never a crash that would
    leave no report: a check that cannot run has failed). Usage errors are all raised by
    `certify` before the first check starts, so none is swallowed here. `kind`: the check's
    (proofs/details.py), which a failed result carries. `seconds`: time its units already took."""
    t0 = time.perf_counter()
    progress(f"[{name}] ...")
    try:
        result = fn()
    except Exception as e:  # noqa: BLE001 - reported as a failed check (usage errors were raised before)
        result = CheckResult.errored(name, kind, e)
    seconds += time.perf_counter() - t0
    result = result.timed(seconds)
    outcome = "not applicable" if result.not_applicable else "pass"
    outcome = outcome if result.passed else "FAIL" if result.failed else "INCOMPLETE"
    progress(f"[{name}] {outcome} ({seconds:.1f}s)")
    return result


def failed_unit(uid: str, why: str) -> dict:
    """The raw result of a unit that never returned one (its worker died, or its task raised, past
    the executor's retries): the unit's check assembles it as a failure naming the unit and why,
    never as a pass. Every kind of unit reads "unit_error" (sampling_result, CertifyRun.mutation,
    the whole checks' assembly below)."""
    return {"unit": uid, "id": uid.split("/", 1)[-1], "unit_error": f"work unit {uid} failed: {why}"}


def whole_result(name: str, kind: str, raw: dict) -> CheckResult:
    """A whole check's result from its unit's raw result (a failed_unit's: the check failed)."""
    if "unit_error" in raw:
        return CheckResult(name, math.nan, math.nan, False, kind=kind, error=raw["unit_error"])
    return CheckResult.from_dict(raw)


def unit_seconds(raws: list[dict]) -> float:
    return sum(r.get("seconds", 0.0) for r in raws)


def plan_units(run: CertifyRun, dname: str) -> tuple[list[Unit], list[Assemble]]:
    """The run's work units in plan order, and one assembly step per check (certificate order).
    `dname`: the run's dtype by name (the low-precision greedy check is named after it)."""
    units: list[Unit] = []
    assemble: list[Assemble] = []

    def whole(name: str, kind: str, fn: Callable[[], CheckResult]) -> None:
        uid = f"check/{name}"
        units.append((uid, lambda share=None: guarded(name, kind, fn, run.say).to_dict()))
        assemble.append(lambda res: whole_result(name, kind, res[uid]))

    whole("greedy_float64", "greedy", run.greedy_float64)
    if run.model_dt is not None:
        whole(f"greedy_{dname}", "greedy", lambda: run.greedy_low(f"greedy_{dname}"))
    # -- greedy at depth (proofs/checks/depth.py); its coverage is assembled below --
    whole("greedy_depth", "greedy_depth", run.greedy_depth)
    whole("bitwise_fixed_width", "bitwise", run.bitwise)

    def per_case(checks, kind: str, unit_result, result) -> None:
        """A sampling kind of check: one unit per case (unit_result), one assembly per check (result)."""
        for chk in checks:
            for u in chk.units:
                units.append((u.id, lambda share=None, chk=chk, u=u: unit_result(run, chk, u, share)))

            def assembled(res, chk=chk) -> CheckResult:
                raws = [res[u.id] for u in chk.units]
                return guarded(chk.label, kind, lambda: result(run, chk, raws), run.say, unit_seconds(raws))

            assemble.append(assembled)

    per_case(sampling_checks(run), "sampling", sampling_unit_result, sampling_result)
    per_case(relative_checks(run), "relative_sampling", relative_unit_result, relative_result)

    # -- boundary coverage, from the greedy-at-depth runs, the sampling units and the
    # per-position test's long samples --
    sampled = [u for chk in sampling_checks(run) if chk.model == run.model_name for u in chk.units]
    long_ids = [
        f"check/{run.positions_name(run.model_name, c.label, case[0])}"
        for c in run.positions_candidates()
        for case in run.positions_cases()
    ]
    assemble.append(
        lambda res: guarded(
            "coverage",
            "coverage",
            lambda: coverage_result(run, res["check/greedy_depth"], sampled, res, long_ids),
            run.say,
        )
    )
    # -- the per-position test on long samples (proofs/checks/positions.py): one whole check per setting --
    for c in run.positions_candidates():
        for case in run.positions_cases():
            name = run.positions_name(run.model_name, c.label, case[0])
            whole(name, "positions", lambda c=c, case=case: run.positions(c, case))
    if run.sampler_order != TEMPERATURE_FIRST:
        whole("sampler_convention", "sampler_convention", run.sampler_convention)
    whole("reproducibility", "reproducibility", run.reproducible)
    whole("seed_invariance", "seed_invariance", run.seed_invariance)
    library = run.mutant_library()
    for mt in library:
        units.append((f"mutant/{mt.id}", lambda share=None, mt=mt: run.mutant_unit(mt)))

    def mutated(res) -> CheckResult:
        rows = [res[f"mutant/{mt.id}"] for mt in library]
        return guarded("mutation", "mutation", lambda: run.mutation(rows), run.say, unit_seconds(rows))

    assemble.append(mutated)
    if run.plan.false_alarm:
        whole("false_alarm", "false_alarm", run.false_alarm)
    for name, kind, fn in (
        ("theorem1_random", "theorem1", run.theorem1_random),
        ("theorem1_search", "theorem1", run.theorem1_search),
        ("theorem1_traces", "theorem1", run.theorem1_traces),
        ("theorem2_traces", "theorem2_traces", run.theorem2_traces),
        ("theorem2_published", "theorem2_published", check_theorem2_published),
        ("speed", "speed", run.speed),
    ):
        whole(name, kind, fn)
    return units, assemble


def coverage_result(
    run: CertifyRun, depth_raw: dict, sampled: list, res: dict, long_ids: Sequence[str] = ()
) -> CheckResult:
    """The coverage check (proofs/checks/depth.py check_coverage): every boundary the greedy-at-depth
    check recorded, the runs of it that crossed each (each placement once per setting decoded) and
    the samples that did: the certified model's sampling units', and the long samples of its
    per-position checks (`long_ids`: their whole units)."""
    depth = whole_result("greedy_depth", "greedy_depth", depth_raw)
    d = depth.details
    if d is None:
        return check_coverage("coverage", run.model_name, 0, [], f"greedy_depth has no runs: {depth.error}")
    n_runs = sum(r.error is None for r in d.runs)
    greedy = [(p, n, n_runs) for p, n in d.crossings]
    drawn = []
    for u in sampled:
        law = run.sampling_setup(u.model).law(u.case)
        drawn.append((len(law.case.prompt), law.case.n, int(res.get(u.id, {}).get("samples", 0))))
    for uid in long_ids:
        pos = whole_result(
            uid.removeprefix("check/"), "positions", res.get(uid, {"unit_error": "absent"})
        ).details
        if isinstance(pos, PositionsDetails) and pos.samples:
            drawn.append((len(pos.prompt), pos.tokens, pos.samples))
    bounds = [Boundary(p, source, what) for p, source, what in d.boundaries]
    return check_coverage("coverage", run.model_name, d.horizon, coverage(bounds, d.horizon, greedy, drawn))


def dispatch_order(run: CertifyRun, units: list[Unit]) -> list[Unit]:
    """The order a parallel run hands units out (results do not depend on it; the wall time
    does): the whole checks first (plan order; the speed check alone takes minutes and cannot be
    split), then the sampling units by decreasing planned N, then the mutants, so that no dear
    unit starts last while the other workers idle."""
    n = {uid: u.samples for uid, u in units_by_id(run).items()}

    def key(k: int) -> tuple:
        uid = units[k][0]
        kind = 0 if uid.startswith("check/") else (1 if uid in n else 2)
        return (kind, -n.get(uid, 0), k)

    return [units[k] for k in sorted(range(len(units)), key=key)]
