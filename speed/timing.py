"""The timing protocol behind every speed figure: `loopcert bench`, the regression gates and
certify's speed check all time through `time_runs` and compare through `ratio`.

Ratios, never absolute times. All settings decode the same prompts with the same seeds,
interleaved within each round (the order rotates), so a change in the host's load hits them
alike; a setting's speedup is the median over rounds of (baseline time / its time) in that
round. For fastdec decoders the time is decode time (`Stats.decode_seconds`: the prefill, the
same for every strategy, and the first token, which comes out of it, are excluded); for other
decoders (proofs.decoders.naive_kv, a user's `--decoder`) it is the whole generate() call. Two clocks
are kept: wall time (what a user sees) and process CPU time (what this process did; steadier
when other jobs share the host). `default_clock` says which one the figures use.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from fastdec import Decoder, Stats
from fastdec.telemetry import DERIVED
from refdec.decode import tokens_of
from refdec.errors import LoopcertError
from refdec.progress import Progress
from refdec.sampling import SamplingParams
from refdec.validate import check_int

GREEDY = SamplingParams()
SAMPLING = SamplingParams(temperature=1.0)
MODES = {"greedy": GREEDY, "sampling": SAMPLING}  # the modes the gates and benchmarks time
# The counts of a Stats (the one list of them): int fields summed over runs. depth is a
# setting, and peak_lanes is a maximum, not a sum.
COUNTS = tuple(
    f.name for f in dataclasses.fields(Stats) if f.type == "int" and f.name not in ("depth", "peak_lanes")
)
# The timings of a Stats (fields and derived figures, by suffix): they live in the round lists,
# not in the counts.
TIMINGS = tuple(
    name
    for name in (*(f.name for f in dataclasses.fields(Stats)), *DERIVED)
    if name.endswith(("seconds", "_per_s"))
)


@dataclass(frozen=True)
class Workload:
    """What a timing run decodes: the first `prompts` prompts, each cut to its last
    `prompt_len` tokens, `tokens` new tokens each, `repeats` interleaved rounds; prompt i
    samples with seed + i."""

    prompts: int = 2
    prompt_len: int = 48
    tokens: int = 32
    repeats: int = 5
    seed: int = 0

    def __post_init__(self):
        for name in ("prompts", "prompt_len", "tokens", "repeats"):
            check_int(name, getattr(self, name), 1)
        check_int("seed", self.seed, 0)

    def select(self, prompts: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
        if len(prompts) < self.prompts:
            raise LoopcertError(f"the workload needs {self.prompts} prompts, got {len(prompts)}")
        return [tuple(p)[-self.prompt_len :] for p in prompts[: self.prompts]]


def default_clock(device) -> str:
    """ "cpu" (process time) for a one-thread CPU run, where it is the work done whatever else the
    host runs, and equals wall time on an idle host; "wall" on CUDA (asynchronous work) or with
    several threads (process time sums them)."""
    return "cpu" if torch.device(device).type == "cpu" and torch.get_num_threads() == 1 else "wall"


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def tokens_sha(tokens: Sequence[Sequence[int]]) -> str:
    """A short hash of decoded tokens: the gates' exact figure, and the paired rounds' check."""
    return hashlib.sha256(json.dumps([list(t) for t in tokens]).encode()).hexdigest()[:16]


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def aggregate(stats: Sequence[Stats]) -> dict:
    """Sum the counts of several runs of one setting; derived rates from the sums."""
    s0 = stats[0]
    tot = Stats(s0.strategy, s0.depth, s0.draft_depth, s0.second_depth)
    for s in stats:
        for name in COUNTS:
            setattr(tot, name, getattr(tot, name) + getattr(s, name))
        tot.peak_lanes = max(tot.peak_lanes, s.peak_lanes)
        for w, n in s.steps_per_width.items():
            tot.steps_per_width[w] = tot.steps_per_width.get(w, 0) + n
        for phase, per in s.calls.items():
            dst = tot.calls.setdefault(phase, {})
            for w, n in per.items():
                dst[w] = dst.get(w, 0) + n
        for d, (c, h) in s.rewind_at.items():
            acc = tot.rewind_at.setdefault(d, [0, 0])
            acc[0] += c
            acc[1] += h
    d = tot.as_dict()
    for name in TIMINGS:
        d.pop(name)
    d["steps_per_token"] = tot.steps / d["decode_tokens"] if d["decode_tokens"] else 0.0
    return d


def counts(agg: dict) -> dict:
    """The deterministic part of an aggregate: what must repeat exactly from round to round."""
    return {k: agg[k] for k in (*COUNTS, "peak_lanes", "calls", "rewind_at")}


def time_runs(
    decoders: dict,
    prompts: Sequence[Sequence[int]],
    n_tokens: int,
    repeats: int,
    sampling: SamplingParams = GREEDY,
    seed: int = 0,
    progress: Progress | None = None,
    devices: Mapping | None = None,
) -> dict:
    """Time every decoder on every prompt, `repeats` rounds, interleaved per prompt: within a
    round, each prompt is decoded by every decoder in turn (the order rotates), so a burst of
    load on the host lands on all of them alike.

    decoders: label -> object with generate(prompt, n, sampling, seed); fastdec decoders report
    decode-only times through their Stats (and eager ones time their engine calls: `time_calls`
    is set), others only whole-call times. Prompt i uses seed + i. devices: label -> where that decoder
    computes, to synchronise the clocks (certify's speed check reads a user decoder's through
    proofs.decoder_attributes.declared_device); a label not there: its `device`, else the CPU.
    Warm-up: each decoder decodes the first prompt's first tokens, untimed; a compiled fastdec
    decoder (--compile) decodes the whole workload once instead, so every graph a round calls is
    compiled before the rounds (a round repeats the warm-up's calls: the same prompts, tokens and
    seeds), and no compile is timed as decoding.
    Returns label -> {"wall", "cpu": decode seconds per round (whole calls for decoders without
    Stats); "wall_total", "cpu_total": whole generate() seconds per round; "decode_tokens";
    "tokens" (per prompt); "stats" (aggregate, or None); "call_seconds": (phase, w) -> [wall,
    cpu, calls] summed over rounds; "deterministic": every round gave the same tokens and counts;
    "compile_seconds": what its warm-up spent compiling (0.0 for an eager decoder)}.
    """
    labels = list(decoders)
    where = {lb: (devices or {}).get(lb, getattr(decoders[lb], "device", "cpu")) for lb in labels}
    compiled = {lb: 0.0 for lb in labels}
    for lb, dec in decoders.items():  # warm-up: allocation, first-call dispatch, CUDA graph capture
        if isinstance(dec, Decoder):
            # a compiled decoder is timed whole: timed calls would run its unfused per-phase graphs
            # (a fused step or a greedy chain is one call, which per-call timing takes apart)
            dec.time_calls = not dec.compile
        if isinstance(dec, Decoder) and dec.compile:  # every call of a round, compiled first
            before = dec.compile_seconds
            for i, p in enumerate(prompts):
                dec.generate(list(p), n_tokens, sampling, seed + i)
            compiled[lb] = dec.compile_seconds - before
        else:
            dec.generate(list(prompts[0]), min(4, n_tokens), sampling, seed)
    out = {
        lb: {
            "wall": [],
            "cpu": [],
            "wall_total": [],
            "cpu_total": [],
            "tokens": None,
            "stats": None,
            "decode_tokens": 0,
            "deterministic": True,
            "call_seconds": {},
            "compile_seconds": compiled[lb],
        }
        for lb in labels
    }
    for r in range(repeats):
        cur = {lb: {"clock": [0.0, 0.0, 0.0, 0.0], "tokens": [], "stats": []} for lb in labels}
        for i, p in enumerate(prompts):
            k = (r + i) % len(labels)
            for label in labels[k:] + labels[:k]:
                dec, rec, acc = decoders[label], out[label], cur[label]
                sync(where[label])
                t0, c0 = time.perf_counter(), time.process_time()
                res = dec.generate(list(p), n_tokens, sampling, seed + i)
                sync(where[label])
                wall_t, cpu_t = time.perf_counter() - t0, time.process_time() - c0
                acc["tokens"].append(tokens_of(res))
                s = getattr(res, "stats", None)
                if not isinstance(s, Stats):
                    acc["clock"] = [a + b for a, b in zip(acc["clock"], (wall_t, cpu_t, wall_t, cpu_t))]
                    continue
                acc["stats"].append(s)
                dec_t = (s.decode_seconds, s.cpu_seconds - s.prefill_cpu_seconds, wall_t, cpu_t)
                acc["clock"] = [a + b for a, b in zip(acc["clock"], dec_t)]
                for phase, per in s.call_seconds.items():
                    for w, (a, b) in per.items():
                        cs = rec["call_seconds"].setdefault((phase, w), [0.0, 0.0, 0])
                        cs[0] += a
                        cs[1] += b
                        cs[2] += s.calls[phase][w]
        for label in labels:
            rec, acc = out[label], cur[label]
            agg = aggregate(acc["stats"]) if acc["stats"] else None
            if rec["tokens"] is None:
                rec["tokens"], rec["stats"] = acc["tokens"], agg
                rec["decode_tokens"] = sum(max(len(t) - 1, 0) for t in acc["tokens"])
            elif acc["tokens"] != rec["tokens"] or (agg is not None and counts(agg) != counts(rec["stats"])):
                rec["deterministic"] = False
            for key, v in zip(("wall", "cpu", "wall_total", "cpu_total"), acc["clock"]):
                rec[key].append(v)
        if progress:
            progress(f"  round {r + 1}/{repeats} done")
    return out


def ratio(base: Sequence[float], other: Sequence[float]) -> float:
    """Median over rounds of base/other (paired by round: load drift cancels)."""
    rs = [b / o for b, o in zip(base, other) if o > 0]
    return statistics.median(rs) if rs else float("nan")


TRIM = 0.2  # trimmed_ratio drops this fraction of the rounds at each end


def trimmed_ratio(base: Sequence[float], other: Sequence[float], trim: float = TRIM) -> float:
    """The geometric mean of base/other over rounds (paired by round), the lowest and highest
    floor(trim x rounds) dropped. The regression gates' estimator: on the 2-core dev machine it
    spread 0.015-0.021 in log over 15 rounds where the median of 15 spread 0.015-0.023 and the
    median of 5 0.030-0.040 (bootstrap of 20 rounds, docs/measurements.md "Gate false alarms"),
    and a burst of load in one round is dropped, as by a median."""
    logs = sorted(math.log(b / o) for b, o in zip(base, other) if o > 0 and b > 0)
    if not logs:
        return float("nan")
    cut = int(trim * len(logs))
    kept = logs[cut : len(logs) - cut]
    return math.exp(statistics.fmean(kept))
