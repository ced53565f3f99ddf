"""certify's speed check (docs/design.md section 6, check 6): each candidate setting against the
autoregressive baseline, timed and compared exactly as `loopcert bench` does (speed.timing,
speed.rows.measured_speed), so the certificate and speedup.md give one speedup for one
setting and workload. Ratios only: absolute tokens/s depend on the machine.

The check fails only if a setting cannot run; how fast it is is reported, never asserted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from fastdec import Decoder
from fastdec.config import DecodeConfig
from proofs.decoder_attributes import declared_device, prepare_decoder
from proofs.decoders.candidates import Candidate, fastdec_candidate
from proofs.details import SpeedDetails, SpeedError, SpeedRow
from proofs.prompts import model_prompts
from proofs.result import CheckResult
from refdec.progress import Progress, quiet
from refdec.values import dtype_name
from speed.rows import measured_speed
from speed.timing import GREEDY, Workload, default_clock, time_runs

TELEMETRY = ("acceptance_rate", "gamma", "mean_live_lanes")  # fastdec Stats a speed row carries


def check_speed(
    name: str,
    candidates: Sequence[Candidate],
    baseline: Candidate,
    model,
    prompts: Sequence[Sequence[int]],
    work: Workload,
    progress: Progress | None = None,
) -> CheckResult:
    """measured = the best speedup over the baseline of the settings timed, the baseline not
    among them (reported, not bounded; nan when none ran); passes iff all ran.
    `prompts` are cut by `work` (speed.timing.Workload.select)."""
    say = progress or quiet
    prompts = work.select(prompts)
    base_label = baseline.label + " (baseline)"
    # a user decoder's one-time work (its prepare) is done before it is timed, for the longest
    # sequence; speed.timing.time_runs warms a compiled fastdec decoder up with the whole workload
    longest = max(len(p) for p in prompts) + work.tokens

    def prepare(dec) -> None:
        if not isinstance(dec, Decoder):
            prepare_decoder(dec, longest)

    decoders, errors = {base_label: baseline.build(model)}, []
    prepare(decoders[base_label])
    for c in candidates:
        if c.label == baseline.label and c.settings == baseline.settings:
            continue
        try:  # a setting that cannot be built or cannot decode is the finding, not a crash
            dec = c.build(model)
            prepare(dec)
            dec.generate(list(prompts[0]), 1, GREEDY, work.seed)
        except Exception as e:  # noqa: BLE001
            errors.append(SpeedError(c.label, f"{type(e).__name__}: {e}"))
            continue
        decoders[c.label] = dec
    dev = next(model.parameters())
    clock = default_clock(dev.device)
    devices = {label: declared_device(dec) for label, dec in decoders.items()}
    times = time_runs(decoders, prompts, work.tokens, work.repeats, GREEDY, work.seed, say, devices=devices)
    rows = []
    for label in decoders:
        sp = measured_speed(times, label, base_label, clock)
        stats = times[label]["stats"]
        telemetry = {} if stats is None else {k: stats[k] for k in TELEMETRY}  # fastdec's only
        rows.append(SpeedRow(label, **sp.as_dict(), **telemetry))
        if label != base_label:
            say(f"  {name} {label}: {sp.tokens_per_s:.1f} tok/s, x{sp.speedup:.2f}")
    # the best setting's own ratio: never the baseline's 1 (a decoder at x0.5 reads 0.5)
    best = max((r.speedup for r in rows if r.setting != base_label), default=float("nan"))
    details = SpeedDetails(
        rows=tuple(rows),
        errors=tuple(errors),
        prompts=len(prompts),
        tokens_per_prompt=work.tokens,
        repeats=work.repeats,
        workload=dataclasses.asdict(work),
        clock=clock,
        device=str(dev.device),
        dtype=dtype_name(dev.dtype),
        baseline=baseline.label,
    )
    return CheckResult(name, best, 1.0, not errors, details)


def check_certified_speed(
    name: str,
    candidates: Sequence[Candidate],
    model,
    model_name: str,
    work: Workload,
    progress: Progress | None = None,
) -> CheckResult:
    """check_speed on the certified model against fastdec's autoregressive setting, on the prompts
    and workload `loopcert bench` times (the plan's `speed`): the same speedups as speedup.md."""
    baseline = fastdec_candidate(DecodeConfig("autoregressive"))
    prompts = model_prompts(model, model_name, work.prompts, max_len=work.prompt_len)
    return check_speed(name, candidates, baseline, model, prompts, work, progress)
