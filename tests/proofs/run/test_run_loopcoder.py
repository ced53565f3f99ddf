"""A LoopCoder model through CertifyRun (proofs/run/run.py): the full plan's extra sampling evidence
is tiny-loopcoder (TINY_PRESETS leaves it out), and the depth-trace checks run wherever the model
has a depth pair d1 < d2 < R, and are not applicable, with that reason, where it has none (R = 2)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from plans import SMALL_PLAN

import refdec
from proofs.run.plan import FULL
from proofs.run.run import CertifyRun
from refdec.checkpoints import write_published
from refdec.config import TINY_LOOPCODER


def folder_of(tmp_path, name, **changes) -> str:
    cfg = replace(refdec.get_preset(name), name="m", **changes)
    return str(write_published(refdec.LoopedLM(cfg).init_weights(1), tmp_path / name))


def run_of(plan, name) -> CertifyRun:
    return CertifyRun(plan, name, None, "cpu", torch.float32, 0, lambda _m: None)


@pytest.mark.parametrize("preset", [TINY_LOOPCODER, "tiny-raven"])
def test_full_plan_adds_the_tiny_preset_of_the_folders_family(tmp_path, preset):
    folder = folder_of(tmp_path, preset)
    assert [name for name, _, _ in run_of(FULL, folder).sampling_plan()] == [folder, preset]


def test_full_plan_on_tiny_loopcoder_adds_nothing():
    # tiny-loopcoder is its family's tiny preset: the extra evidence would be itself
    assert [name for name, _, _ in run_of(FULL, TINY_LOOPCODER).sampling_plan()] == [TINY_LOOPCODER]


def test_traces_of_tiny_loopcoder_are_not_applicable_for_want_of_a_depth_pair():
    run = run_of(SMALL_PLAN, TINY_LOOPCODER)
    for r in (run.theorem1_traces(), run.theorem2_traces()):
        assert r.not_applicable.startswith("R=2 leaves no depth pair d1 < d2 < R"), r.not_applicable
        assert r.passed


def test_traces_run_on_a_loopcoder_with_depth_pairs(tmp_path):
    """Control: a LoopCoder looped 4 times has pairs (1, 2), (1, 3), (2, 3): both checks run on its
    depth profile (pass 1, then passes mixing pass 1's keys) and are applicable."""
    run = run_of(SMALL_PLAN, folder_of(tmp_path, TINY_LOOPCODER, recurrence=4))
    one, two = run.theorem1_traces(), run.theorem2_traces()
    assert one.not_applicable is None and two.not_applicable is None
    assert one.passed and one.details.depth_pairs == 3 and two.details.R == 4
