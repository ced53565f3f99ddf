"""The batch table: many sequences through one engine (Decoder.generate_batch).

1. Aggregate decode tokens/s of each setting at B = 1, 4, 16 sequences, against the
   autoregressive baseline at the same B, in one run: the timing protocol of this package
   (interleaved rounds, the order rotating; decode time, the prefill excluded; a setting's
   speedup is the median over rounds of baseline time / its time at that B).
2. Certification throughput: n-token samples per second (temperature 1) on a small model
   through generate_batch, against the same decoder's generate() one sample at a time, in the
   same run (whole calls: certification pays the prefill too; sequences sharing the prompt
   share one prefill). One call of sample_calls * sample_batch sequences through sample_batch
   rows (the queue: a finished sequence's row takes the next), as certify's sampler calls it.
   Each of certify's lossless settings.
3. Step cost against width at the largest B: the engine's time per step and per lane-step
   when each of the B sequences holds 1, 2, 4, ... lanes. Every token of every strategy is
   one lane deepened to R, so a setting's decode time at B is about its lane-steps per token
   times the per-lane-step cost at its width: once the baseline's own width (B lanes) costs
   about what wider calls cost per lane, no strategy can be much faster than it at that B
   (`ceiling`: the best per-lane-step cost of any width against the baseline's, over the
   setting's lane-steps per token against the baseline's).

Targets (CPU): samples/s >= 20x the one-at-a-time rate, and the best pipelined
setting at B = 16 >= 1.5x the autoregressive baseline at B = 16 (EAGLE-3 reports 1.38x at
batch 64 on GPUs). Measured here, never asserted by a timed test.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import torch

from fastdec import DecodeConfig, Decoder
from fastdec.engine import Lane
from refdec.errors import LoopcertError
from refdec.progress import Progress, quiet
from refdec.validate import check_int
from refdec.values import jsonable
from speed.targets import Target
from speed.timing import GREEDY, SAMPLING, sync

BATCHES = (1, 4, 16)
SAMPLE_MODEL = "tiny-raven"  # the certification-throughput figure's model (a preset, random weights)
SAMPLE_TOKENS = 3  # certification's sampled cases are laws of the first three tokens
SAMPLE_PROMPT = (1, 2, 3, 4, 5)


@dataclass(frozen=True)
class BatchPlan:
    batches: tuple[int, ...] = BATCHES
    prompt_len: int = 48  # each sequence's prompt: the last tokens of a held-out prompt
    tokens: int = 24  # new tokens per sequence
    repeats: int = 3  # interleaved rounds
    sample_batch: int = 64  # sequences per generate_batch call for the samples/s figure
    sample_calls: int = 4  # generate_batch calls timed per setting
    sample_alone: int = 48  # generate() calls timed per setting

    def __post_init__(self):
        if not self.batches or any(check_int("batches", b, 1) != b for b in self.batches):
            raise LoopcertError(f"batches must be a non-empty tuple of integers >= 1, got {self.batches!r}")
        for name in ("prompt_len", "tokens", "repeats", "sample_batch", "sample_calls", "sample_alone"):
            check_int(name, getattr(self, name), 1)


@dataclass(frozen=True)
class BatchRow:
    label: str
    strategy: str
    batch: int  # B, sequences decoded together
    tokens_per_s: float  # aggregate decode tokens/s over the B sequences (median over rounds)
    speedup: float  # over the autoregressive baseline at the same B (median of per-round ratios)
    over_b1: float  # this setting's aggregate tokens/s over its own B = 1 figure
    acceptance: float  # first proposals accepted / verified, over every round
    lane_steps_per_token: float = 0.0  # lanes advanced by one recurrence per decoded token


@dataclass(frozen=True)
class SampleRate:
    label: str
    batch: int
    samples_per_s: float  # SAMPLE_TOKENS-token samples per second through generate_batch
    alone_per_s: float  # the same decoder's generate(), one sample at a time
    ratio: float  # samples_per_s / alone_per_s
    lane_steps_per_sample: float = 0.0  # lanes advanced by one recurrence per sample, prefill excluded


@dataclass(frozen=True)
class WidthCost:
    batch: int  # B sequences
    lanes_per_sequence: int
    width: int  # the call's width (B * lanes per sequence)
    ms_per_step: float  # one engine step (every lane one recurrence, readouts included)
    us_per_lane_step: float


@dataclass(frozen=True)
class BatchTable:
    plan: BatchPlan
    clock: str
    sample_model: str
    rows: list[BatchRow]
    samples: list[SampleRate]
    width_costs: list[WidthCost] = field(default_factory=list)
    compiled: bool = False  # rows and samples/s of compiled decoders (width_costs: eager engine calls)
    compile_seconds: float = 0.0  # what compiling them took, in untimed warm-ups

    def ceiling(self, label: str, batch: int) -> float | None:
        """Upper estimate of a setting's speedup over the baseline at B from step costs: the
        baseline's per-lane-step cost at width B over the cheapest of any width, times the
        baseline's lane-steps per token over the setting's (None without the data)."""
        costs = [c for c in self.width_costs if c.batch == batch]
        base, row = self.rows[0] if self.rows else None, self.row(label, batch)
        base = self.row(base.label, batch) if base else None
        own = next((c for c in costs if c.width == batch), None)
        if not costs or own is None or row is None or base is None or not row.lane_steps_per_token:
            return None
        best = min(c.us_per_lane_step for c in costs)
        return own.us_per_lane_step / best * base.lane_steps_per_token / row.lane_steps_per_token

    def row(self, label: str, batch: int) -> BatchRow | None:
        return next((r for r in self.rows if r.label == label and r.batch == batch), None)

    def to_json(self) -> dict:
        return jsonable(asdict(self))


def _seconds(results, clock: str, decode_only: bool) -> float:
    """One generate_batch call's time: every sequence started together, so the call's time is
    the longest sequence's (minus the prefill, which all sequences run in the same steps)."""
    if clock == "cpu":
        total = max(r.stats.cpu_seconds for r in results)
        pre = max(r.stats.prefill_cpu_seconds for r in results)
    else:
        total = max(r.stats.seconds for r in results)
        pre = max(r.stats.prefill_seconds for r in results)
    return total - pre if decode_only else total


def batch_rows(
    model,
    settings: Sequence[DecodeConfig],
    prompts: Sequence[Sequence[int]],
    plan: BatchPlan,
    clock: str,
    device,
    say: Progress,
    compile: bool = False,
) -> tuple[list[BatchRow], float]:
    """settings[0] is the baseline. Sequence i of a batch decodes prompt i (mod len(prompts)).
    -> (rows, seconds the decoders spent compiling: `compile`, all in their warm-ups)."""
    decs = {
        st.label: Decoder(model, st, device=device, max_batch=max(plan.batches), compile=compile)
        for st in settings
    }
    labels = list(decs)
    base = labels[0]
    runs = {}
    # a compiled decoder's warm-up is the timed call itself (the same batch, tokens and seeds: the
    # same engine calls), so every graph a round calls is compiled before it
    warm_tokens = plan.tokens if compile else 2
    for b in plan.batches:
        batch = [list(prompts[i % len(prompts)])[-plan.prompt_len :] for i in range(b)]
        seeds = list(range(b))
        for dec in decs.values():  # warm-up: allocation of this B's engine, first-call dispatch
            dec.generate_batch(batch, warm_tokens, GREEDY, seeds)
        secs = {lb: [] for lb in labels}
        tokens = dict.fromkeys(labels, 0)
        accepted = dict.fromkeys(labels, 0)
        lane_steps = dict.fromkeys(labels, 0)
        proposals = dict.fromkeys(labels, 0)
        for r in range(plan.repeats):
            k = r % len(labels)
            for lb in labels[k:] + labels[:k]:
                sync(device)
                res = decs[lb].generate_batch(batch, plan.tokens, GREEDY, seeds)
                secs[lb].append(_seconds(res, clock, decode_only=True))
                tokens[lb] = sum(x.stats.decode_tokens for x in res)
                lane_steps[lb] = sum(x.stats.lane_steps for x in res)
                accepted[lb] += sum(x.stats.accepted for x in res)
                proposals[lb] += sum(x.stats.proposals for x in res)
        for lb in labels:
            runs[(lb, b)] = (
                secs[lb],
                tokens[lb],
                accepted[lb] / proposals[lb] if proposals[lb] else 0.0,
                lane_steps[lb] / tokens[lb] if tokens[lb] else 0.0,
            )
        say(
            f"  B={b}: "
            + ", ".join(f"{lb} {tokens[lb] / statistics.median(secs[lb]):.4g} tok/s" for lb in labels)
        )
    rows = []
    for st in settings:
        for b in plan.batches:
            secs, toks, acc, per_token = runs[(st.label, b)]
            base_secs = runs[(base, b)][0]
            b1 = runs[(st.label, plan.batches[0])]
            rows.append(
                BatchRow(
                    st.label,
                    st.strategy,
                    b,
                    toks / statistics.median(secs),
                    statistics.median(x / y for x, y in zip(base_secs, secs)),
                    (toks / statistics.median(secs)) / (b1[1] / statistics.median(b1[0])),
                    acc,
                    per_token,
                )
            )
    return rows, sum(d.compile_seconds for d in decs.values())


def sample_rates(
    model,
    settings: Sequence[DecodeConfig],
    plan: BatchPlan,
    clock: str,
    device,
    say: Progress,
    compile: bool = False,
) -> tuple[list[SampleRate], float]:
    """Certification throughput: SAMPLE_TOKENS-token samples at temperature 1 of one prompt.
    -> (rates, seconds compiling: a compiled decoder's warm-up makes every call it will time, with
    the same seeds, so each graph they call is compiled before it is timed)."""
    prompt = list(SAMPLE_PROMPT)
    out, compiled = [], 0.0
    for st in settings:
        dec = Decoder(model, st, device=device, max_batch=plan.sample_batch, compile=compile)
        n = plan.sample_batch
        total = plan.sample_calls * n
        warm = (total, plan.sample_alone) if compile else (n, 1)
        dec.generate_batch([prompt] * warm[0], SAMPLE_TOKENS, SAMPLING, list(range(warm[0])))  # warm-up
        for s in range(warm[1]):
            dec.generate(prompt, SAMPLE_TOKENS, SAMPLING, s)
        compiled += dec.compile_seconds
        sync(device)
        t = _clock(clock)
        res = dec.generate_batch([prompt] * total, SAMPLE_TOKENS, SAMPLING, list(range(total)))
        sync(device)
        batched = total / (_clock(clock) - t)
        lane_steps = sum(r.stats.lane_steps for r in res) / total  # the prompt's prefill: once per row
        t = _clock(clock)
        for s in range(plan.sample_alone):
            dec.generate(prompt, SAMPLE_TOKENS, SAMPLING, s)
        sync(device)
        alone = plan.sample_alone / (_clock(clock) - t)
        out.append(SampleRate(st.label, n, batched, alone, batched / alone, lane_steps))
        say(f"  samples/s {st.label}: {batched:.4g} batched (B={n}) vs {alone:.4g} alone")
    return out, compiled


def width_costs(
    model, setting: DecodeConfig, batch: int, prompt_len: int, clock: str, device="cpu", steps: int = 8
) -> list[WidthCost]:
    """Engine step cost at `batch` sequences of 1, 2, 4, ... lanes each (up to the widest call):
    lane j of a sequence at position prompt_len + j, all lanes at one depth, as deep as the
    readouts of `setting` go, each step timed after a warm-up; greedy decodes set nothing up."""
    dec = Decoder(model, setting, device=device, max_batch=batch)
    engine = dec.engine(prompt_len + 64, batch)
    out, per = [], 1
    with torch.inference_mode():
        while batch * per <= engine.widths[-1]:

            def fresh(k=per):
                return [Lane(prompt_len + j, 1, row=r) for r in range(batch) for j in range(k)]

            lanes = fresh()
            engine.advance(lanes)  # warm-up: this width's first call
            sync(device)
            took = 0.0
            for _ in range(steps):
                if lanes[0].depth >= engine.depth:
                    lanes = fresh()
                t = _clock(clock)
                engine.advance(lanes)
                sync(device)
                took += _clock(clock) - t
            w = batch * per
            out.append(WidthCost(batch, per, w, took / steps * 1e3, took / steps / w * 1e6))
            per *= 2
    dec.forget_prefills()
    return out


def _clock(clock: str) -> float:
    return time.process_time() if clock == "cpu" else time.perf_counter()


def batch_table(
    model,
    settings: Sequence[DecodeConfig],
    prompts: Sequence[Sequence[int]],
    sample_model,
    sample_name: str,
    sample_settings: Sequence[DecodeConfig],
    plan: BatchPlan,
    clock: str,
    device="cpu",
    progress: Progress | None = None,
    compile: bool = False,
) -> BatchTable:
    """`compile`: the rows and samples/s of decoders with compiled steps (each warmed up by the calls
    it will time, so no compile is timed); the step costs against width stay an eager engine's calls
    (a compiled engine splits a wide unfused step into the calls that cost least, so it has no one
    cost per width to read)."""
    say = progress or quiet
    rows, rows_prep = batch_rows(model, settings, prompts, plan, clock, device, say, compile)
    samples, samples_prep = sample_rates(sample_model, sample_settings, plan, clock, device, say, compile)
    b = max(plan.batches)
    costs = width_costs(model, settings[0], b, plan.prompt_len, clock, device)
    say(
        f"  step cost at B={b}: "
        + ", ".join(f"W={c.width} {c.us_per_lane_step:.3g} us/lane-step" for c in costs)
    )
    return BatchTable(plan, clock, sample_name, rows, samples, costs, compile, rows_prep + samples_prep)


BATCH_TARGETS = {"pipelined_b16": 1.5, "samples": 20.0}  # CPU, default model


def judge_batch(table: BatchTable) -> list[Target]:
    """The batch targets on the batch table: the best pipelined setting at the largest B over
    the baseline at that B, and the lowest certification throughput gain of any setting."""
    out = []
    b = max(table.plan.batches)
    pipes = [r for r in table.rows if r.strategy == "pipelined" and r.batch == b]
    if pipes:
        best = max(pipes, key=lambda r: r.speedup)
        bound = BATCH_TARGETS["pipelined_b16"]
        out.append(
            Target(
                f"best pipelined at B={b} ({best.label}) >= {bound}x autoregressive at B={b}",
                best.speedup,
                bound,
                best.speedup >= bound,
                note=f"{best.tokens_per_s:.4g} tok/s aggregate",
            )
        )
    if table.samples:
        worst = min(table.samples, key=lambda s: s.ratio)
        bound = BATCH_TARGETS["samples"]
        out.append(
            Target(
                f"samples/s through generate_batch >= {bound:g}x generate() one at a time "
                f"(lowest: {worst.label})",
                worst.ratio,
                bound,
                worst.ratio >= bound,
                note=f"{worst.samples_per_s:.4g} vs {worst.alone_per_s:.4g} samples/s",
            )
        )
    return out
