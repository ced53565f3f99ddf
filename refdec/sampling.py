"""The one sampling transform (DESIGN.md section 3). Every decoder calls these functions.

target = transform(logits): divide by temperature, softmax in float64, keep the top-k
tokens, renormalise, keep the smallest top-p nucleus, renormalise. Temperature 0 is greedy:
the transform is then the one-hot at argmax, lowest index winning ties.

Ranking for top-k and top-p is by probability, descending, ties broken by the lower token
id (a stable sort), so the kept set is always exactly k tokens / exactly the smallest
nucleus, never "all tokens tied with the k-th".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from refdec.errors import LoopcertError
from refdec.validate import check_number, is_int


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 means greedy (argmax, lowest index wins ties)
    top_k: int | None = None  # keep exactly the k most probable tokens
    top_p: float | None = None  # keep the smallest prefix with mass >= top_p

    def __post_init__(self):
        check_number("temperature", self.temperature, 0)
        k = self.top_k
        if k is not None and not is_int(k, 1):
            raise LoopcertError(f"top_k must be an integer >= 1 or None, got {k!r}")
        if self.top_p is not None:
            check_number("top_p", self.top_p, 0, 1, low_open=True)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def greedy_token(logits: torch.Tensor) -> int:
    """argmax of a (V,) vector; torch.argmax returns the first maximal index."""
    return int(torch.argmax(logits))


def transform(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """(..., V) logits -> (..., V) float64 probabilities of the target law."""
    x = logits.to(torch.float64)
    if params.greedy:
        return torch.nn.functional.one_hot(x.argmax(-1), x.shape[-1]).to(torch.float64)
    probs = torch.softmax(x / params.temperature, dim=-1)
    if params.top_k is None and params.top_p is None:
        return probs
    # Stable descending sort: equal probabilities keep ascending token order.
    sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    keep = torch.ones_like(sorted_p, dtype=torch.bool)
    if params.top_k is not None:
        keep[..., params.top_k :] = False
        sorted_p = torch.where(keep, sorted_p, 0.0)
        sorted_p = sorted_p / sorted_p.sum(-1, keepdim=True)
    if params.top_p is not None:
        # Keep token i iff the mass strictly before it is < top_p: the smallest nucleus.
        before = torch.cumsum(sorted_p, dim=-1) - sorted_p
        keep &= before < params.top_p
        sorted_p = torch.where(keep, sorted_p, 0.0)
        sorted_p = sorted_p / sorted_p.sum(-1, keepdim=True)
    return torch.zeros_like(probs).scatter(-1, order, sorted_p)


def draw_uniform(generator: torch.Generator) -> float:
    """One U[0, 1) draw in float64 from a seeded generator (the only RNG decoders consume)."""
    return float(torch.rand((), generator=generator, dtype=torch.float64))


def sample_from(probs: torch.Tensor, u: float) -> int:
    """Inverse-CDF draw from a (V,) law: the first token whose cumulative mass exceeds u.

    Tokens of zero mass are never returned, even when rounding leaves the total below u.
    """
    p = probs.to(torch.float64)
    cdf = torch.cumsum(p, 0)
    idx = int(torch.searchsorted(cdf, torch.tensor([u * float(cdf[-1])], dtype=torch.float64), right=True))
    idx = min(idx, p.numel() - 1)
    if p[idx] <= 0:  # u*total landed on the flat tail: take the last token with mass
        idx = int(torch.nonzero(p > 0)[-1])
    return idx


def sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    return sample_from(probs, draw_uniform(generator))
