"""Traces of a looped model: its next-token laws at every depth over the positions of prompts.

Every position of each prompt gives next-token laws p_r (temperature 1, float64, refdec's
uncached `depth_logits`, through the one depth profile) at every depth r = 1..R. The Theorem 1
and Theorem 2 checks on real models (proofs/checks/theorem1.py, theorem2.py) read them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from analysis.depth_profile import depth_profile
from fastdec.accept import total_variation


def traces(model64, prompts: Sequence[Sequence[int]], max_positions: int | None = None) -> torch.Tensor:
    """(R, P, V) float64 laws at temperature 1: depth r-1, every position of every prompt
    (at most max_positions of them, evenly spaced)."""
    R = model64.cfg.recurrence
    _, laws = depth_profile(
        model64, [list(p) for p in prompts], list(range(1, R + 1)), R, keep_laws=True
    )  # (R, P, V): the one depth profile's laws
    P = laws.shape[1]
    if max_positions is not None and P > max_positions:
        laws = laws[:, torch.linspace(0, P - 1, max_positions).round().long()]
    return laws


def depth_pairs(R: int, full: bool) -> list[tuple[int, int]]:
    """d1 < d2 < R: all pairs for small R; for large R d1 <= 8 and d2 on a coarse grid."""
    pairs = [(a, b) for a in range(1, R) for b in range(a + 1, R)]
    if R <= 12 or full:
        return pairs
    d2s = sorted({*range(2, 13), 16, 20, 24, R - 1})
    return [(a, b) for a, b in pairs if a <= 8 and b in d2s]


def mean_tv_curve(laws: torch.Tensor) -> list[float]:
    """mean over positions of TV(p_r, p_R), r = 1..R."""
    R, P, _ = laws.shape
    return [float(np.mean([total_variation(laws[r, t], laws[R - 1, t]) for t in range(P)])) for r in range(R)]
