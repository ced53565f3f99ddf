"""The one table from a check of the certificate to what it costs (docs/scale.md, "Where the cost
lives"): the part of the layer-cut estimate it is counted in (proofs/cost/estimate.py run_parts),
the plan field its work grows with (--predict's probe cuts that field: proofs/cost/predict.py
probe_plan), and its group in the scale table (benchmarks/scale_report.py). Every place that maps checks to
costs reads this table; nothing else names a check's part.
"""

from __future__ import annotations

from dataclasses import dataclass

# the groups of the scale table, in its order ("setup": what the run does before its first check)
GROUPS = ("setup", "greedy", "bitwise", "sampling", "reproducibility", "mutants", "theorems", "speed")
DTYPE = "{dtype}"  # in a check's or a part's name: the run's dtype (greedy_float32, greedy_bfloat16)


@dataclass(frozen=True)
class Costed:
    """One check's cost. `check` is its name as the certificate writes it; "name[" stands for one
    check per model and setting ("sampling[tiny-ouro: autoregressive]"), DTYPE for the run's dtype.
    `part`: the layer-cut estimate's part it is counted in, None where the estimate does not count
    it (its own tiny models, or no work of its own). `grows_with`: the CertifyPlan field its work
    grows with about linearly, which --predict's probe cuts; None where the probe runs it whole or
    cuts it its own way (the speed repeats, the mutants, the positions' tokens)."""

    check: str
    part: str | None
    grows_with: str | None
    group: str

    @property
    def per_setting(self) -> bool:
        """One check per model and setting: a part of the estimate is their sum, not one's cost."""
        return self.check.endswith("[")


TABLE = (
    Costed("greedy_float64", "greedy_float64", "greedy_prompts", "greedy"),
    Costed(f"greedy_{DTYPE}", f"greedy_{DTYPE}", "greedy_prompts", "greedy"),
    Costed("greedy_depth", None, None, "greedy"),
    Costed("coverage", None, None, "greedy"),  # assembled from greedy_depth and the samples: no work
    Costed("bitwise_fixed_width", "bitwise_fixed_width", "bitwise_prompts", "bitwise"),
    Costed("sampling[", "sampling", None, "sampling"),  # measured per case: N / samples/s
    Costed("relative_sampling[", None, None, "sampling"),
    Costed("positions[", "positions", None, "sampling"),
    Costed("sampler_convention", None, None, "sampling"),
    Costed("reproducibility", "reproducibility", None, "reproducibility"),
    Costed("seed_invariance", None, None, "reproducibility"),
    Costed("mutation", None, None, "mutants"),
    Costed("false_alarm", None, "false_alarm", "mutants"),
    Costed("theorem1_random", None, "theorem1_random_cases", "theorems"),
    Costed("theorem1_search", None, "theorem1_search_examples", "theorems"),
    Costed("theorem1_traces", "traces", "trace_prompts", "theorems"),
    Costed("theorem2_traces", "traces", "trace_prompts", "theorems"),
    Costed("theorem2_published", None, None, "theorems"),
    Costed("speed", "speed", None, "speed"),
)
BY_CHECK = {row.check: row for row in TABLE}


def row_of(check: str) -> Costed | None:
    """The table's row of a check's name as the certificate writes it, or of a per-setting check's
    family ("positions" for every "positions[...]"); None for a name it lacks."""
    if "[" in check:
        return BY_CHECK.get(check.split("[")[0] + "[")
    if check + "[" in BY_CHECK:
        return BY_CHECK[check + "["]
    if check in BY_CHECK:
        return BY_CHECK[check]
    if check.startswith("greedy_"):  # the run's dtype: any greedy_<dtype> but float64 and depth
        return BY_CHECK[f"greedy_{DTYPE}"]
    return None


def part_of(check: str, dtype: str) -> str | None:
    """The layer-cut estimate's part a check is counted in, in a run of `dtype` (by name)."""
    row = row_of(check)
    return None if row is None or row.part is None else row.part.format(dtype=dtype)


def group_of(check: str) -> str:
    """The scale table's group of a check; a check the table lacks is its own group."""
    row = row_of(check)
    return check if row is None else row.group


PROBE_FIELDS = {row.check: row.grows_with for row in TABLE if row.grows_with}  # what probe_plan cuts
