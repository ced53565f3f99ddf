"""The one sampling transform (docs/design.md section 3). Every decoder calls these functions.

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
    if probs.dim() != 1:
        return torch.stack([_filter(row, params) for row in probs.reshape(-1, probs.shape[-1])]).reshape(
            probs.shape
        )
    return _filter(probs, params)


def filter_probs(probs: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The rest of `transform` after the softmax: (V,) softmax at params.temperature -> its top-k
    and top-p law (itself when neither is set, or greedy). transform(x, params) is
    filter_probs(transform(x, SamplingParams(params.temperature)), params), bit for bit."""
    if params.greedy or (params.top_k is None and params.top_p is None):
        return probs
    return _filter(probs, params)


HEAD_SIZES = (64, 1024, 16384)  # top-p alone: ranked heads tried before sorting the whole vocabulary
NUCLEUS_MARGIN = 1e-12  # a head whose mass passes top_p by this holds the nucleus, rounding included


def _filter(probs: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """(V,) softmax -> top-k, renormalise, top-p, renormalise (the module docstring's rule).

    Only a ranked head that holds every kept token is sorted (a stable sort of a large vocabulary
    costs far more than a top-k): the k first under top-k, else the first of HEAD_SIZES whose
    mass passes top_p, else the whole vocabulary. The result is bitwise what a stable sort of all
    V gives (tests/refdec/test_sampling.py compares them): the head is that sort's prefix, a cumsum's
    prefix does not depend on what follows it, and each renormalising sum runs over a length-V
    vector laid out as the sorted one (head first, then zeros)."""
    V = probs.shape[-1]
    if params.top_k is not None:
        sizes = [min(params.top_k, V)]
    else:
        sizes = [m for m in HEAD_SIZES if m < V] + [V]
    for m in sizes:
        head, order = _ranked_head(probs, m)
        if params.top_k is not None:
            head = head / _sum_padded(head, V)
        if params.top_p is not None:
            total = torch.cumsum(head, dim=-1)
            if m < V and params.top_k is None and not total[-1] >= params.top_p + NUCLEUS_MARGIN:
                continue  # the nucleus may reach past this head
            # Keep token i iff the mass strictly before it is < top_p: the smallest nucleus.
            head = torch.where(total - head < params.top_p, head, 0.0)
            head = head / _sum_padded(head, V)
        return torch.zeros_like(probs).index_put_((order,), head)
    raise AssertionError("unreachable: the last head is the whole vocabulary")


def _ranked_head(probs: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The m most probable tokens of a (V,) law in the order of a stable descending sort (ties:
    lower id first): (m,) probabilities, (m,) token ids."""
    if m >= probs.numel():
        return torch.sort(probs, descending=True, stable=True)
    floor = torch.topk(probs, m, sorted=False).values.min()
    ids = torch.nonzero(probs >= floor).squeeze(-1)  # ascending ids: every token tied with the m-th
    vals, at = torch.sort(probs[ids], descending=True, stable=True)
    return vals[:m], ids[at[:m]]


def _sum_padded(head: torch.Tensor, V: int) -> torch.Tensor:
    """Sum of a sorted length-V law whose first entries are `head` and the rest zeros (the same
    reduction, hence the same rounding, as summing the whole sorted vector)."""
    buf = torch.zeros(V, dtype=head.dtype, device=head.device)
    buf[: head.numel()] = head
    return buf.sum()


def draw_uniform(generator: torch.Generator) -> float:
    """One U[0, 1) draw in float64 from a seeded generator (the only RNG decoders consume)."""
    return float(torch.rand((), generator=generator, dtype=torch.float64))


def sample_from(probs: torch.Tensor, u: float) -> int:
    """Inverse-CDF draw from a (V,) law: the first token whose cumulative mass exceeds u.

    Tokens of zero mass are never returned, even when rounding leaves the total below u.
    """
    p = probs.to(torch.float64)
    cdf = torch.cumsum(p, 0)
    idx = int(torch.searchsorted(cdf, u * cdf[-1].item(), right=True))  # a float64 scalar, as u * total
    idx = min(idx, p.numel() - 1)
    if p[idx].item() <= 0:  # u*total landed on the flat tail: take the last token with mass
        idx = int(torch.nonzero(p > 0)[-1])
    return idx


def sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    return sample_from(probs, draw_uniform(generator))
