"""--predict's answer as typed data (proofs/cost/predict.py makes it, loopcert certify --predict
prints it): the layer-cut estimate (Estimate) and, where that did not stop it, the measured
prediction per sampling unit (SampledUnit) and per check (CheckCost). Seconds throughout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Estimate:
    """The layer-cut estimate of a run (proofs/cost/estimate.py estimate, cut_first): the cuts'
    timings and work, the quantities at the model's layers, the run's parts, its time in one
    process and with `jobs` workers, what the measured prediction would spend, and what decide()
    warns of (non-empty: the prediction stops there unless asked for the rest)."""

    model: str
    layer_field: str  # the repeated layers cut (refdec.config.ModelConfig's field)
    layers: int  # the model's own count of them
    cuts: Mapping[str, Mapping[str, float]]  # "1", "2" -> quantity -> seconds
    work: Mapping[str, int]  # multiply-adds of a position: "1", "2" (the cuts), "model"
    at_layers: Mapping[str, float]  # quantity -> seconds at `layers`
    load_how: str
    contexts: int  # the contexts the exact laws evaluate
    parts: Mapping[str, float]  # part -> seconds in one process (proofs/cost/parts.py names them)
    serial_seconds: float
    wall_seconds: float
    jobs: int
    sampling_rows: int | None
    first_chunk: int
    estimate_seconds: float  # what the estimate itself took
    prediction_seconds: float  # what the measured prediction would spend
    warnings: tuple[str, ...]

    @classmethod
    def of(cls, data: Mapping) -> Estimate:
        return cls(
            **{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name != "warnings"},
            warnings=tuple(data["warnings"]),
        )

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "warnings": list(self.warnings)}


@dataclass(frozen=True)
class SampledUnit:
    """One sampling unit (setting, case) of the measured prediction: sampled for the slice, its
    rate, the time to reach its N (predicted) and what the budget lets it sample (budgeted)."""

    unit: str
    check: str
    model: str
    setting: str
    case: str
    planned: int  # N
    slice: int  # samples drawn in the slice
    samples_per_s: float | None
    predicted_seconds: float
    no_power: bool
    budgeted_seconds: float
    first_chunk_seconds: float | None = None


@dataclass(frozen=True)
class CheckCost:
    """One check's predicted time, how it was measured, and for a sampling check its samples and
    what its budget lets it sample."""

    check: str
    predicted_seconds: float
    how: str
    samples: int | None = None
    budgeted_seconds: float | None = None


@dataclass(frozen=True)
class Prediction:
    """`loopcert certify --predict`'s answer. stopped: the layer-cut estimate said the measured
    prediction or the run would take too long, and the rest was not asked for; then only the
    estimate and its warnings are filled."""

    mode: str
    model: str
    dtype: str  # the run's dtype by name (greedy_<dtype> is its low-precision greedy check)
    target_tv: float
    estimate: Estimate
    stopped: bool
    warnings: tuple[str, ...]
    units: tuple[SampledUnit, ...] = ()
    checks: tuple[CheckCost, ...] = ()
    setup_seconds: float = 0.0  # models, exact laws, N per case, as measured
    no_power: tuple[str, ...] = ()  # cases no time gives power
    sampling_seconds: float = 0.0  # every sampling unit to its N, no budget
    serial_seconds: float = 0.0  # the run in one process
    jobs: int = 1
    executor: str = "local"
    workers_label: str = ""
    ship_seconds: float = 0.0  # ray: one pickle round trip of the run
    wall_seconds: float = 0.0  # with `jobs` workers
    sampling_budget_s: float = 0.0

    def to_dict(self) -> dict:
        """As JSON-ready data (benchmarks/scale_parts.py writes it)."""
        out = dataclasses.asdict(self)
        out["estimate"] = self.estimate.to_dict()
        return out
