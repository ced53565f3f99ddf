"""Logits and filter settings for the tests of the sampling transforms (tests/refdec/test_sampling.py,
tests/refdec/test_sampler_orders.py): laws from near-uniform to concentrated, with and without ties,
and top-k / top-p at each of their boundaries."""

from __future__ import annotations

import torch

from refdec.sampling import TEMPERATURE_FIRST, SamplingParams


def spread_logits(V: int, spread: float) -> tuple[torch.Generator, tuple[torch.Tensor, torch.Tensor]]:
    """Float64 logits over V tokens, N(0, spread^2) from a generator seeded with V, and the same
    rounded to a grid of 1/4 (many exact ties, at every filter's boundary); and the generator, to
    draw more from."""
    gen = torch.Generator().manual_seed(V)
    x = torch.randn(V, generator=gen, dtype=torch.float64) * spread  # (V,)
    return gen, (x, torch.round(x * 4) / 4)


def filter_settings(V: int, order: str = TEMPERATURE_FIRST) -> list[SamplingParams]:
    """Sampling settings at every boundary of the top-k / top-p filters over V tokens, under the
    sampler convention `order`: one token, a few, a head, the whole vocabulary and past it; a mass
    cut, all of it, nearly all; both filters at once; at temperatures below, at and above 1."""
    return [
        SamplingParams(t, top_k=k, top_p=p, order=order)
        for t, k, p in (
            (1.0, 1, None),
            (0.7, 4, None),
            (1.0, 4, None),
            (1.0, 50, None),
            (1.0, V, None),
            (1.0, V + 3, None),
            (0.7, None, 0.9),
            (1.5, None, 0.9),
            (1.0, None, 0.5),
            (1.5, None, 0.5),
            (1.0, None, 1.0),
            (0.3, None, 0.999),
            (1.0, 40, 0.8),
            (2.0, 40, 0.8),
        )
    ]
