"""One row per setting of a timed grid: speedup, ideal speedup, efficiency and the acceptance
statistics behind them; the same rows in `loopcert bench`'s report and in certify's speed check.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from fastdec import DecodeConfig, Decoder
from speed.costs import CLOCK_INDEX, ideal_seconds
from speed.settings import BASELINE, NAIVE, rewind_depths
from speed.timing import GREEDY, aggregate, ratio


@dataclass(frozen=True)
class GridRow:
    label: str
    strategy: str
    draft_depth: int | None
    second_depth: int | None
    draft_ahead: int | None
    verify_depth: int | None
    lossless: bool
    clock: str  # which clock `speedup` and `tokens_per_s` use
    tokens_per_s: float  # decode tokens per second of `clock`
    wall_tokens_per_s: float
    speedup: float  # median over rounds of baseline time / this setting's time (`clock`)
    speedup_wall: float
    speedup_cpu: float
    ideal_speedup: float
    efficiency: float  # speedup / ideal_speedup
    in_engine_share: float  # share of the decode time spent inside timed engine calls
    wall: list[float]  # decode seconds per round
    cpu: list[float]
    ideal_seconds: float
    decode_tokens: int
    same_tokens_as_baseline: bool
    deterministic: bool
    gamma: float
    acceptance_rate: float
    from_first: int
    from_second: int
    from_restart: int
    proposals: int
    accepted: int
    gate_open_rate: float
    gate_checks: int
    gate_opens: int
    mean_live_lanes: float
    peak_lanes: int
    steps: int
    steps_per_token: float
    calls: dict  # phase -> padded width -> calls
    rewind_hit_rate: dict = field(default_factory=dict)  # telemetry depth L -> hit rate (None: no checks)
    rewind_checks: dict = field(default_factory=dict)


_NAMES = [f.name for f in dataclasses.fields(GridRow)]
# The acceptance statistics a row carries (the one list of them): GridRow's fields gamma..calls,
# copied from the setting's aggregate Stats.
STAT_FIELDS = tuple(_NAMES[_NAMES.index("gamma") : _NAMES.index("calls") + 1])


@dataclass(frozen=True)
class Speed:
    """One setting's speed against the baseline's in the same `time_runs`."""

    decode: bool  # decode-only times (fastdec Stats on both sides) or whole generate() calls
    tokens_per_s: float  # by `clock`
    wall_tokens_per_s: float
    speedup: float  # median over rounds of baseline time / this setting's time, by `clock`
    speedup_wall: float
    speedup_cpu: float

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def measured_speed(times: dict, label: str, base_label: str, clock: str) -> Speed:
    """The speed figures of `label` in a `time_runs` result: decode-only when both it and the
    baseline report fastdec Stats, else whole generate() calls (a user's decoder)."""
    t, base = times[label], times[base_label]
    decode = t["stats"] is not None and base["stats"] is not None
    sfx = "" if decode else "_total"
    n = t["decode_tokens"] if decode else sum(len(x) for x in t["tokens"])
    return Speed(
        decode=decode,
        tokens_per_s=n / statistics.median(t[clock + sfx]),
        wall_tokens_per_s=n / statistics.median(t["wall" + sfx]),
        speedup=ratio(base[clock + sfx], t[clock + sfx]),
        speedup_wall=ratio(base["wall" + sfx], t["wall" + sfx]),
        speedup_cpu=ratio(base["cpu" + sfx], t["cpu" + sfx]),
    )


def rows_from(
    times: dict,
    settings: Sequence[DecodeConfig],
    costs: dict,
    clock: str = "wall",
    base_label: str = BASELINE,
) -> list[GridRow]:
    """One row per setting of a `time_runs` result: speedup (by `clock`; both clocks' beside),
    decode tokens/s, ideal speedup and efficiency (by `clock`), acceptance statistics."""
    c = CLOCK_INDEX[clock]
    base = times[base_label]
    base_per_tok = statistics.median(base[clock]) / base["decode_tokens"]
    rows = []
    for st in settings:
        t = times[st.label]
        s = t["stats"]
        n = t["decode_tokens"]
        # a compiled decoder's calls are not timed one by one (speed.timing.time_runs): no ideal
        timed_calls = bool(t["call_seconds"])
        ideal = ideal_seconds(s["calls"], costs, c) if timed_calls else float("nan")
        sp = measured_speed(times, st.label, base_label, clock)
        speed = sp.speedup
        ideal_speedup = base_per_tok / (ideal / n) if ideal > 0 else float("nan")
        rows.append(
            GridRow(
                label=st.label,
                strategy=st.strategy,
                draft_depth=st.draft_depth,
                second_depth=st.second_depth,
                draft_ahead=st.draft_ahead,
                verify_depth=st.verify_depth,
                lossless=st.lossless,
                clock=clock,
                tokens_per_s=sp.tokens_per_s,
                wall_tokens_per_s=sp.wall_tokens_per_s,
                speedup=speed,
                speedup_wall=sp.speedup_wall,
                speedup_cpu=sp.speedup_cpu,
                ideal_speedup=ideal_speedup,
                efficiency=speed / ideal_speedup,
                in_engine_share=sum(v[c] for v in t["call_seconds"].values()) / sum(t[clock])
                if timed_calls
                else float("nan"),
                wall=t["wall"],
                cpu=t["cpu"],
                ideal_seconds=ideal,
                decode_tokens=n,
                same_tokens_as_baseline=t["tokens"] == base["tokens"],
                deterministic=t["deterministic"],
                **{k: s[k] for k in STAT_FIELDS},
            )
        )
    return rows


def telemetry(model, settings: Sequence[DecodeConfig], prompts, n_tokens: int, device="cpu") -> dict:
    """label -> {L: [checks, hits]}: rewind telemetry at L = R/8, R/4, R/2 in separate, untimed
    runs (each telemetry depth adds a readout, so it would slow the timed runs)."""
    R = model.cfg.recurrence
    out = {}
    for st in settings:
        if st.strategy == "autoregressive":
            continue
        dec = Decoder(model, dataclasses.replace(st, telemetry_depths=rewind_depths(R)), device=device)
        stats = [dec.generate(list(p), n_tokens, GREEDY, i).stats for i, p in enumerate(prompts)]
        out[st.label] = aggregate(stats)["rewind_at"]
    return out


def with_telemetry(rows: Sequence[GridRow], tele: dict) -> list[GridRow]:
    out = []
    for row in rows:
        got = tele.get(row.label, {})
        out.append(
            dataclasses.replace(
                row,
                rewind_hit_rate={d: (h / c if c else None) for d, (c, h) in got.items()},
                rewind_checks={d: c for d, (c, _) in got.items()},
            )
        )
    return out


@dataclass(frozen=True)
class NaiveComparison:
    """fastdec beside proofs.decoders.naive_kv, a plain KV-cached loop over the same maths (the honest
    baseline). The autoregressive strategy is slower than that loop (its R + 1 engine calls per
    token each plan a call, build index tensors, look up RoPE rows and write the cache by index;
    naive_kv does that once per token): `baseline_over_naive` measures that machinery, which
    every strategy pays too, so speedups over the baseline compare at equal machinery.
    `over_naive` is what a user gains over the plain loop: each setting's speedup over it."""

    naive_tokens_per_s: float
    baseline_tokens_per_s: float
    baseline_over_naive: float  # by the report's clock
    baseline_over_naive_wall: float
    baseline_over_naive_cpu: float
    same_tokens: bool
    over_naive: dict[str, float] = field(default_factory=dict)  # setting -> speedup over naive_kv
    measured: str = "whole generate() calls, prefill included"


def naive_comparison(times: dict, clock: str) -> NaiveComparison:
    b, n = times[BASELINE], times[NAIVE]
    key = f"{clock}_total"
    toks = sum(len(t) for t in b["tokens"])
    return NaiveComparison(
        naive_tokens_per_s=toks / statistics.median(n[key]),
        baseline_tokens_per_s=toks / statistics.median(b[key]),
        baseline_over_naive=ratio(n[key], b[key]),
        baseline_over_naive_wall=ratio(n["wall_total"], b["wall_total"]),
        baseline_over_naive_cpu=ratio(n["cpu_total"], b["cpu_total"]),
        same_tokens=n["tokens"] == b["tokens"],
        over_naive={label: ratio(n[key], t[key]) for label, t in times.items() if label != NAIVE},
    )
