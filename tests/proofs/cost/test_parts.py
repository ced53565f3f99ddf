"""The one table from a check to its cost (proofs/cost/parts.py): every row names a plan field that
exists, a part the layer-cut estimate makes and a group of the scale table; every part the
estimate makes but the setup (load, exact laws) belongs to a check; per-setting names resolve to
their family's row. tests/proofs/run/test_certify.py checks that --predict predicts exactly the
checks a certify run reports."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from proofs.cost.estimate import QUANTITIES, run_parts
from proofs.cost.parts import DTYPE, GROUPS, PROBE_FIELDS, TABLE, group_of, part_of, row_of
from proofs.run.plan import FULL, QUICK, CertifyPlan

SETUP = {"load", "exact laws"}  # the estimate's parts before any check


def estimate_parts(dtype: torch.dtype, plan: CertifyPlan) -> set[str]:
    return set(run_parts(dict.fromkeys((*QUANTITIES, "sample"), 1.0), plan, 2, dtype, 1.0, 10.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_every_part_of_the_estimate_is_a_check_s_and_back(dtype):
    name = str(dtype).removeprefix("torch.")
    named = {part_of(row.check, name) for row in TABLE} - {None}
    made = estimate_parts(dtype, FULL) | estimate_parts(dtype, QUICK)
    assert made - SETUP <= named and named <= made


def test_every_row_names_a_plan_field_and_a_group():
    fields = {f.name for f in dataclasses.fields(CertifyPlan)}
    assert set(PROBE_FIELDS.values()) <= fields and len(PROBE_FIELDS) >= 6
    assert {row.group for row in TABLE} <= set(GROUPS)
    assert len({row.check for row in TABLE}) == len(TABLE)


@pytest.mark.parametrize(
    ("check", "row", "part", "group"),
    [
        ("greedy_float64", "greedy_float64", "greedy_float64", "greedy"),
        ("greedy_bfloat16", f"greedy_{DTYPE}", "greedy_bfloat16", "greedy"),
        ("greedy_depth", "greedy_depth", None, "greedy"),
        ("sampling[tiny-ouro: autoregressive]", "sampling[", "sampling", "sampling"),
        ("positions[default: mine]", "positions[", "positions", "sampling"),
        ("positions", "positions[", "positions", "sampling"),  # the family, as probe_plan names it
        ("relative_sampling[m: x]", "relative_sampling[", None, "sampling"),
        ("theorem2_traces", "theorem2_traces", "traces", "theorems"),
        ("false_alarm", "false_alarm", None, "mutants"),
    ],
)
def test_a_check_name_finds_its_row(check, row, part, group):
    assert row_of(check).check == row
    assert part_of(check, "bfloat16") == part and group_of(check) == group
    assert row_of(check).per_setting == row.endswith("[")


def test_a_name_the_table_lacks_has_no_part():
    assert row_of("no_such_check") is None and part_of("no_such_check", "float32") is None
    assert group_of("no_such_check") == "no_such_check"
