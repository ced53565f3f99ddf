"""The whole plan's time, predicted per check before running it (`loopcert certify --predict
SECONDS`, docs/design.md section 8); nothing is certified.

First, before the model is loaded, the layer-cut estimate (proofs/cost/estimate.py, cut_first):
where it says this measured prediction would take past PREDICT_LIMIT or the run past an hour,
the prediction stops there, naming the largest part and the flags that help, unless asked for
the rest (`measured`, --predict-measured). Then the measured prediction:

Sampling: N per case from the plan's target TV, at the samples/s measured on a slice of each
(setting, case): the time to reach the target without a budget cutting it. Every other check: run
by a probe run of the plan cut to about 1/PROBE_DIVISOR of its size (probe_plan), its time scaled
back. The probe run shares the full run's models and sampling setups (CertifyRun.with_plan: the
probe plan samples the same cases at the same target), never what the cut fields change (the
mutants' run, the traces).
"""

from __future__ import annotations

import math
import pickle
import time
from collections.abc import Sequence
from dataclasses import replace

from proofs.checks.distribution import sample_tally
from proofs.checks.mutation import LIBRARY, Mutant
from proofs.checks.positions import PositionsPlan, estimated_samples, ladder_samples
from proofs.cost import estimate as cut_estimate
from proofs.cost.estimate import HOUR, model_config  # HOUR: past it a prediction names what to do
from proofs.cost.need import FIT_HINT, run_need, sampling_rows
from proofs.cost.parts import PROBE_FIELDS, part_of, row_of
from proofs.cost.prediction import CheckCost, Estimate, Prediction, SampledUnit
from proofs.decoders.candidates import fastdec_grid, user_candidate
from proofs.decoders.draw import FIRST_CHUNK, draw
from proofs.decoders.http_decoder import HTTPOptions
from proofs.decoders.protocol import Decoder, Factory, NotApplicable
from proofs.prompts import PROMPT_LEN
from proofs.run.budget import SamplingPool
from proofs.run.certify import decoder_argument, default_model_name, plan_of
from proofs.run.jobs import check_jobs, makespan
from proofs.run.plan import CertifyPlan
from proofs.run.remote import RunSpec
from proofs.run.run import CertifyRun
from proofs.run.sampling_units import decoder_of, sampling_checks
from proofs.run.units import dispatch_order, plan_units
from refdec.files import parse_dtype
from refdec.memory import check_fits
from refdec.progress import Progress
from refdec.validate import check_number
from refdec.values import dtype_name

# slice_rate: a first chunk predicted dearer than this at batch 1 is not drawn. Generous: batching
# runs many times faster than one sample at a time (docs/scale.md has the sweep's ratios), so a
# batch-1 rate is only for models no plan can sample here anyway (Ouro-1.4B's shape on a CPU)
GAUGE_SECONDS = 3600.0
PREDICT_SECONDS = 5.0  # sampling time of each (setting, case) slice a prediction measures
PROBE_DIVISOR = 8  # a prediction runs each other check at about 1/8 of its size ...
MUTANT_PROBE_STRIDE = 4  # ... and every 4th mutant of the library


def probe_plan(
    plan: CertifyPlan, library: Sequence[Mutant]
) -> tuple[CertifyPlan, dict[str, tuple[str, float]]]:
    """The plan cut down for a prediction, and per check (the table's names of PROBE_FIELDS,
    "speed", "positions", "mutation") what was cut and the factor that scales the probe's time
    back to the plan's. The fixed costs (loading presets, warm-up) are scaled too: the prediction
    errs high."""
    cut, scale = {}, {}
    for check, f in PROBE_FIELDS.items():
        v = getattr(plan, f)
        if v:
            cut[f] = max(1, math.ceil(v / PROBE_DIVISOR))
            scale[check] = (f"{f} {cut[f]} of {v}", v / cut[f])
    r = plan.speed.repeats
    probe_r = max(1, math.ceil(r / PROBE_DIVISOR))
    cut["speed"] = replace(plan.speed, repeats=probe_r)
    scale["speed"] = (f"repeats {probe_r} of {r}", r / probe_r)
    if plan.positions is not None:  # the per-position test: shorter samples, N of the binned test
        pos = plan.positions  # (its drift's N is scaled in from the probe's varentropy: positions_factor)
        short = replace(
            pos, tokens=max(pos.min_band, math.ceil(pos.tokens / PROBE_DIVISOR)), drift=None, case_drift=None
        )
        work = ladder_samples(pos, PROMPT_LEN) * pos.tokens
        cut["positions"] = short
        scale["positions"] = (
            f"tokens {short.tokens} of {pos.tokens}",
            work / (ladder_samples(short, PROMPT_LEN) * short.tokens),
        )
    names = tuple(mt.id for mt in library[::MUTANT_PROBE_STRIDE])
    cut["mutant_ids"] = names
    scale["mutation"] = (f"{len(names)} of {len(library)} mutants", len(library) / max(1, len(names)))
    return replace(plan, **cut), scale


def predict(
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
    slice_seconds: float = PREDICT_SECONDS,
    jobs: int = 1,
    executor: str = "local",
    time_budget: float | None = None,
    measured: bool = False,
) -> Prediction:
    """What `certify` with the same arguments would cost, certifying nothing (`loopcert certify
    --predict SLICE_SECONDS`; docs/decoders.md "Certify from Python and from your tests"): the
    prediction of the module docstring, typed (proofs/cost/prediction.py), after the layer-cut
    estimate (its `estimate`): where that says the measured prediction would take past
    PREDICT_LIMIT or the run past an hour, it stops there (`stopped`, its `warnings` naming the
    largest part and the flags that help) unless `measured` asks for the rest. `model`,
    `decoder` (a spec, a decoder object or a factory), `plan`, `label` and `http` are certify()'s.

    The run's time counts what each sampling unit will sample within the budget (`time_budget`,
    default the plan's: budgeted); the sampling time to reach the plan's TV is reported beside it.
    Setup (models, exact laws) is as measured; the wall time with `jobs` workers hands the units
    out in certify --jobs' order (dispatch_order, makespan), each worker at the rate measured here
    alone. With `executor` "ray" the `jobs` workers also each unpack the run once
    (proofs/run/remote.py RunSpec), timed here as one pickle round trip of it; Ray's own start (a
    local cluster's) is not counted."""
    say = progress or (lambda _msg: None)
    plan, dtype = plan_of(plan), parse_dtype(dtype)
    check_number("--predict (seconds)", slice_seconds, 0, 1e6, low_open=True)
    check_jobs(jobs, device, executor)
    user, http = decoder_argument(decoder, label, executor, model, http, progress)
    model_name = model or default_model_name()
    budget_s = plan.sampling_budget_s if time_budget is None else float(time_budget)
    check_fits(run_need(model_name, dtype, device), f"certifying {model_name}", FIT_HINT)  # before the cuts
    if isinstance(user, str):  # a spec; a Python decoder is its Candidate already
        user = user_candidate(user, http=http)
    est = cut_first(model_name, plan, dtype, device, user, budget_s, jobs, slice_seconds, say)
    if est.warnings and not measured:
        return Prediction(plan.mode, model_name, dtype_name(dtype), plan.tv, est, True, est.warnings)
    t0 = time.perf_counter()
    run = CertifyRun(plan, model_name, user, device, dtype, seed, say, time_budget)
    dname = dtype_name(dtype)
    units, _ = plan_units(run, dname)  # builds the sampling setups: exact laws, N per case
    setup = time.perf_counter() - t0
    say(f"setup (models, exact laws, N per case): {setup:.1f}s")
    rows, unit_seconds, checks = sampled_rows(run, seed, slice_seconds)
    sampling_s = sum(c["predicted_seconds"] for c in checks)  # to reach the plan's TV, no budget
    used = budgeted(rows, budget_s, jobs)  # what the run will sample within its budget
    for r in rows:
        r["budgeted_seconds"] = used[r["unit"]]
    for c in checks:
        c["budgeted_seconds"] = sum(used[r["unit"]] for r in rows if r["check"] == c["check"])
    unit_seconds.update(used)

    probe, scale = probe_plan(plan, run.mutant_library())
    probed, probe_seconds, mutant_s = probe_checks(run.with_plan(probe), scale, dname, plan.positions)
    checks += probed
    unit_seconds.update(probe_seconds)
    per_mutant = mutant_s / max(1, len(run.mutant_library()))
    ordered = [unit_seconds.get(uid, per_mutant) for uid, _ in dispatch_order(run, units)]  # as certify
    serial = setup + sum(ordered)
    ship = 0.0
    if executor == "ray":
        t = time.perf_counter()
        pickle.loads(pickle.dumps(RunSpec.of(run, units)))
        ship = time.perf_counter() - t
    wall = setup + ship + makespan(ordered, jobs)
    label = f"--executor ray and {jobs} workers" if executor == "ray" else f"--jobs {jobs}"
    no_power = sorted({r["case"] for r in rows if r["no_power"]})
    say(
        f"{plan.mode} plan: {sum(r['planned'] for r in rows)} samples in {len(rows)} (setting, case) pairs, "
        f"{sampling_s / 60:.1f} min of sampling (budget {plan.sampling_budget_s / 60:.1f} min per worker); "
        f"whole plan {serial / 60:.1f} min in one process, {wall / 60:.1f} min with {label}"
        + (f"; no power whatever the time: {', '.join(no_power)}" if no_power else "")
    )
    got = {
        "rows": rows,
        "checks": checks,
        "setup_seconds": setup,
        "target_tv": plan.tv,
        "sampling_budget_s": budget_s,
        "wall_seconds": wall,
    }
    warnings = tuple(verdict(got))
    for w in warnings:
        say(f"warning: {w}")
    return Prediction(
        mode=plan.mode,
        model=model_name,
        dtype=dname,
        target_tv=plan.tv,
        estimate=est,
        stopped=False,
        warnings=warnings,
        units=tuple(SampledUnit(**r) for r in rows),
        checks=tuple(CheckCost(**c) for c in checks),
        setup_seconds=setup,
        no_power=tuple(no_power),
        sampling_seconds=sampling_s,
        serial_seconds=serial,
        jobs=jobs,
        executor=executor,
        workers_label=label,
        ship_seconds=ship,
        wall_seconds=wall,
        sampling_budget_s=budget_s,
    )


def cut_first(
    model_name: str,
    plan: CertifyPlan,
    dtype,
    device: str,
    user,
    budget_s: float,
    jobs: int,
    slice_seconds: float,
    say: Progress,
) -> Estimate:
    """The layer-cut estimate (proofs/cost/estimate.py) of the run, what the measured
    prediction would spend (its probes at probe_plan's fractions), and what decide() says of both.
    The settings are fastdec's grid; fastdec's autoregressive decoder stands in for a `user` one
    (it decodes the cuts: a server serves its own model)."""
    cfg = model_config(model_name)
    settings = fastdec_grid(cfg.recurrence, plan.mode == "full")
    if user is not None:
        settings = [cut_estimate.BASELINE]
    say(
        f"layer-cut estimate: {cut_estimate.LAYER_FIELD} cut to {cut_estimate.CUT_LAYERS}, of {cfg.name}'s "
        f"{getattr(cfg, cut_estimate.LAYER_FIELD)}"
    )
    rows = sampling_rows(model_name, dtype, device, plan, user is None)  # the run's, from the headers
    est = cut_estimate.estimate(model_name, plan, dtype, device, settings, budget_s, jobs, say, rows=rows)
    _, scale = probe_plan(plan, [mt for mt in LIBRARY if plan.mutant_ids is None or mt.id in plan.mutant_ids])
    dname = dtype_name(dtype)
    probe = {part_of(check, dname): 1.0 / factor for check, (_, factor) in scale.items()}
    probe.pop(None, None)  # checks the estimate does not count
    at = est["at_layers"]
    est["prediction_seconds"] = cut_estimate.prediction_seconds(
        est["parts"], at, plan, len(settings), slice_seconds, probe, GAUGE_SECONDS, est["first_chunk"]
    )
    _, est["warnings"] = cut_estimate.decide(est, est["prediction_seconds"])
    say(
        f"layer-cut estimate ({est['estimate_seconds']:.0f}s): the run {est['serial_seconds'] / 60:.1f} min "
        f"in one process, the measured prediction {est['prediction_seconds'] / 60:.1f} min"
    )
    return Estimate.of(est)


def sampled_rows(
    run: CertifyRun, seed: int, slice_seconds: float
) -> tuple[list[dict], dict[str, float], list[dict]]:
    """(one row per sampling unit, {unit id: predicted seconds}, one prediction per sampling check):
    each unit sampled for `slice_seconds`, in the chunks a real run draws."""
    rows, unit_seconds = [], {}
    checks = sampling_checks(run)
    for chk in checks:
        dec = None if chk.not_applicable else decoder_of(run, chk)
        laws = run.sampling_setup(chk.model).laws
        for u, law in zip(chk.units, laws, strict=True):
            row = {
                "unit": u.id,
                "check": chk.label,
                "model": chk.model,
                "setting": chk.candidate.label,
                "case": u.case,
                "planned": u.samples,
                "slice": 0,
                "samples_per_s": None,
                "predicted_seconds": 0.0,
                "no_power": u.samples == 0,
            }
            if u.samples and not isinstance(dec, NotApplicable):
                got, rate = slice_rate(dec, law, u.samples, seed, slice_seconds, run.models.sampling_rows)
                row.update(
                    slice=got,
                    samples_per_s=rate,
                    predicted_seconds=u.samples / rate if rate > 0 else math.inf,
                    first_chunk_seconds=min(u.samples, FIRST_CHUNK) / rate if rate > 0 else math.inf,
                )
            rows.append(row)
            unit_seconds[u.id] = row["predicted_seconds"]
            if not u.samples:
                got = "no power (no view has 2 bins)"
            elif isinstance(dec, NotApplicable):
                got = "not applicable"
            else:
                got = (
                    f"N = {u.samples}, {row['samples_per_s']:.1f} samples/s -> "
                    f"{row['predicted_seconds'] / 60:.1f} min"
                )
            run.say(f"  {u.id}: {got}")
    predicted = [
        {
            "check": chk.label,
            "samples": sum(u.samples for u in chk.units),
            "predicted_seconds": sum(unit_seconds[u.id] for u in chk.units),
            "how": "N / samples/s measured per case",
        }
        for chk in checks
    ]
    return rows, unit_seconds, predicted


def slice_rate(
    dec, law, n: int, seed: int, slice_seconds: float, max_rows: int | None = None
) -> tuple[int, float]:
    """(samples drawn, samples/s) of one (setting, case): one sample first, timed; when a real
    run's first chunk (FIRST_CHUNK samples, drawn whatever the deadline) would take over
    GAUGE_SECONDS at that one sample's rate, that rate (a model too large to sample here: batching
    only speeds it up, so the prediction errs high); else a slice drawn as a real run draws it
    (a batch of FIRST_CHUNK samples runs many times faster than one at a time)."""
    c = law.case
    one = draw(dec, c.prompt, c.n, c.sampling, seed, 1)
    if one.error or not one.samples:
        return 0, 0.0
    if FIRST_CHUNK * one.seconds > GAUGE_SECONDS:
        return 1, 1.0 / one.seconds
    t = sample_tally(dec, law, n, seed, time.perf_counter() + slice_seconds, max_rows)
    return t["samples"], (t["samples_per_s"] if t["samples"] else 0.0)


def budgeted(rows: Sequence[dict], budget_s: float, workers: int = 1) -> dict[str, float]:
    """{unit id: seconds it will sample} under the run's sampling pool (proofs/run/budget.py), the
    units served in plan order as a serial run serves them: each samples until it reaches N
    (its predicted_seconds) or its share runs out, and always its first chunk (draw's first
    generate_batch call does not look at the deadline)."""
    planned = {r["unit"]: r["planned"] for r in rows if r["planned"]}
    pool = SamplingPool.over(planned, planned, budget_s, workers)
    used = {}
    for r in rows:
        uid = r["unit"]
        if uid not in planned or not math.isfinite(r["predicted_seconds"]):
            used[uid] = 0.0 if uid not in planned else pool.share(uid)
            continue
        share = pool.share(uid)
        used[uid] = min(r["predicted_seconds"], max(share, r.get("first_chunk_seconds", 0.0)))
        pool.spend(used[uid])
    return used


def verdict(got: dict, hour: float = HOUR) -> list[str]:
    """What the prediction warns of, each naming the part and the flag that helps: sampling cut
    short of the plan's TV by the budget (those cases fail as no power), and a run past an hour."""
    out = []
    short = [r for r in got["rows"] if r["planned"] and r["budgeted_seconds"] < r["predicted_seconds"]]
    if short:
        need = sum(r["predicted_seconds"] for r in got["rows"] if r["planned"])
        out.append(
            f"sampling: {len(short)} of {len(got['rows'])} (setting, case) units cannot reach TV "
            f"{got['target_tv']:g} within the {got['sampling_budget_s'] / 60:.1f} min budget (cut there, "
            f"they are INCOMPLETE); reaching it takes {need / 60:.0f} min of sampling: --time-budget "
            f"{math.ceil(need)}, spread over --jobs N, --shard I/N (loopcert merge) or --executor ray, "
            "or a GPU (--device cuda)"
        )
    if got["wall_seconds"] > hour:
        part = max(
            got["checks"] + [{"check": "setup", "predicted_seconds": got["setup_seconds"]}],
            key=lambda c: c["predicted_seconds"],
        )
        out.append(
            f"the run cannot finish within {hour / 3600:g} h ({got['wall_seconds'] / 3600:.1f} h predicted); "
            f"its largest part is {part['check']} ({part['predicted_seconds'] / 60:.0f} min): "
            "--shard I/N or --executor ray to spread it, --dtype float64 to hold one copy of the weights, "
            "or a GPU (--device cuda)"
        )
    return out


def positions_factor(
    full: PositionsPlan, short: PositionsPlan, raw: dict, how: str, factor: float, max_seq_len: int
) -> tuple[str, float]:
    """A per-position probe's time factor: the probe drew the binned test's N of `short` samples;
    the run draws what `full`'s drift needs on this law (estimated_samples, from the varentropy of
    the probe's laws), of full length."""
    d = raw.get("details") or {}
    ve, drawn = d.get("pilot_varentropy"), d.get("samples") or 0
    if not drawn:
        return how, factor
    drift = full.case_drift if d.get("case") else full.drift
    prompt_len = len(d.get("prompt") or ())
    planned = estimated_samples(replace(full, drift=drift), prompt_len, ve, max_seq_len)
    tokens, probed = (min(p.tokens, max_seq_len - prompt_len) for p in (full, short))
    return f"{how}, {planned} samples (drift {drift})", planned * tokens / (drawn * probed)


def probe_checks(
    probe_run: CertifyRun,
    scale: dict[str, tuple[str, float]],
    dname: str,
    full_positions: PositionsPlan | None = None,
) -> tuple[list[dict], dict[str, float], float]:
    """(one prediction per check but sampling, {unit id: predicted seconds}, the mutation check's
    predicted seconds): every unit of the probe run but the sampling ones, run and timed, its time
    times its check's factor in `scale`."""
    checks, unit_seconds, mutant_t = [], {}, 0.0
    probe_units, _ = plan_units(probe_run, dname)
    for uid, fn in probe_units:
        if uid.startswith("sampling/"):
            continue
        t = time.perf_counter()
        raw = fn()
        took = time.perf_counter() - t
        if uid.startswith("mutant/"):
            mutant_t += took
            continue
        name = uid.removeprefix("check/")
        row = row_of(name)
        how, factor = scale.get(name if row is None else row.check.removesuffix("["), ("whole", 1.0))
        if name.startswith("positions[") and full_positions is not None and isinstance(raw, dict):
            how, factor = positions_factor(
                full_positions, probe_run.plan.positions, raw, how, factor, probe_run.model64.cfg.max_seq_len
            )
        checks.append(
            {"check": name, "predicted_seconds": took * factor, "how": f"probe {how} in {took:.1f}s"}
        )
        unit_seconds[uid] = took * factor
        probe_run.say(f"  {uid}: probe ({how}) {took:.1f}s -> {took * factor / 60:.1f} min")
    how, factor = scale["mutation"]
    checks.append(
        {
            "check": "mutation",
            "predicted_seconds": mutant_t * factor,
            "how": f"probe {how} in {mutant_t:.1f}s",
        }
    )
    probe_run.say(f"  mutation: probe ({how}) {mutant_t:.1f}s -> {mutant_t * factor / 60:.1f} min")
    # boundary coverage is assembled from greedy_depth's runs and the sampling units: no work of its own
    checks.append({"check": "coverage", "predicted_seconds": 0.0, "how": "assembled from greedy_depth"})
    return checks, unit_seconds, mutant_t * factor
