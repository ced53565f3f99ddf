"""The speedup report as typed data: what `loopcert bench` measures and reports/speedup.py
renders. Every figure is a ratio measured in one run (speed.timing)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from refdec.values import jsonable
from speed.batch_table import BatchPlan, BatchTable
from speed.context import ContextSweep
from speed.costs import CallCost
from speed.rows import GridRow, NaiveComparison
from speed.targets import Target
from speed.theorem2_vs_measured import DepthSpectrum, Theorem2Comparison
from speed.timing import Workload


@dataclass(frozen=True)
class BenchPlan:
    mode: str  # "quick" (CI) or "full"
    grid: Workload  # the strategy grid's prompts, tokens and rounds
    sampling_repeats: int  # rounds of the sampling (T=1) table
    lengths: tuple[int, ...]  # the context sweep's cached positions
    sweep_tokens: int  # new tokens per context: enough that the pipeline's fill (R - d1 steps) amortises
    sweep_repeats: int
    batch: BatchPlan  # the batch table (speed.batch_table)


PLANS = {
    "quick": BenchPlan(
        "quick",
        Workload(prompts=2, prompt_len=48, tokens=32, repeats=3),
        sampling_repeats=3,
        lengths=(64, 512, 2048),
        sweep_tokens=128,
        sweep_repeats=2,
        batch=BatchPlan(tokens=24, repeats=2, sample_calls=4, sample_alone=32),
    ),
    "full": BenchPlan(
        "full",
        Workload(prompts=4, prompt_len=64, tokens=64, repeats=5),
        sampling_repeats=3,
        lengths=(64, 128, 256, 512, 1024, 2048),
        sweep_tokens=256,
        sweep_repeats=3,
        batch=BatchPlan(tokens=48, repeats=3, sample_batch=256, sample_calls=4, sample_alone=64),
    ),
}


@dataclass(frozen=True)
class SpeedReport:
    """Sections in the order reports/speedup.py renders them. A new table (the batch
    table, say) is a module of this package that measures it, a field here, a section there."""

    stamp: dict  # refdec.stamp plus mode, load average, command, seconds
    plan: BenchPlan
    clock: str  # "cpu" or "wall": which clock the figures use (speed.timing.default_clock)
    R: int
    prompts: list[int]  # prompt lengths
    rewind_depths: list[int]
    targets: list[Target]
    rows: list[GridRow]  # the greedy strategy grid
    naive: NaiveComparison | None
    sampling_rows: list[GridRow]  # the gate settings at temperature 1
    step_costs: list[CallCost]  # pooled over the greedy grid
    theorem2: Theorem2Comparison
    spectrum: DepthSpectrum
    context: ContextSweep
    batch: BatchTable  # many sequences through one engine

    def to_json(self) -> dict:
        """Plain JSON-able data (speedup.json)."""
        return jsonable(asdict(self))
