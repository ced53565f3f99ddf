"""The one sampling transform (docs/design.md section 3). Every decoder calls these functions.

target = transform(logits), under one of two conventions (SamplingParams.order, SAMPLER_ORDERS):

- "temperature-first" (HF transformers, vLLM, SGLang; the default): divide by temperature,
  softmax in float64, keep the top-k tokens, renormalise, keep the smallest top-p nucleus,
  renormalise. Ranking for top-k and top-p is by probability, descending, ties broken by the
  lower token id (a stable sort), so the kept set is always exactly k tokens / exactly the
  smallest nucleus, never "all tokens tied with the k-th".
- "filters-first" (mlx-lm 0.32.2, mlx_lm.sample_utils.make_sampler): the filters judge the
  temperature-1 law softmax(logits): first the top-p nucleus (top_p < 1 only; every token tied
  with the last one kept is kept too: mlx's apply_top_p cuts at a logprob threshold), then the
  top-k of what is left (exactly k, lower id first on a tie); then the kept logits are divided
  by the temperature and renormalised. docs/certify.md#sampler-conventions has the detail.

Temperature 0 is greedy under both: the one-hot at argmax, lowest index winning ties. Without
top-p the two conventions keep the same tokens (a ranking does not change when every logit is
divided by the same T > 0), so they give the same law (tests/refdec/test_sampling.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from refdec.errors import LoopcertError
from refdec.validate import check_number, is_int

TEMPERATURE_FIRST = "temperature-first"
FILTERS_FIRST = "filters-first"
SAMPLER_ORDERS = (TEMPERATURE_FIRST, FILTERS_FIRST)  # the module docstring's two conventions


def check_order(order, what: str = "order") -> str:
    """`order` when it is one of SAMPLER_ORDERS; else a LoopcertError naming it (and `what`)."""
    if not isinstance(order, str) or order not in SAMPLER_ORDERS:
        raise LoopcertError(f"{what} must be one of {', '.join(SAMPLER_ORDERS)}, got {order!r}")
    return order


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 means greedy (argmax, lowest index wins ties)
    top_k: int | None = None  # keep exactly the k most probable tokens
    top_p: float | None = None  # keep the smallest prefix with mass >= top_p
    order: str = TEMPERATURE_FIRST  # which law top-k / top-p judge: SAMPLER_ORDERS

    def __post_init__(self):
        check_number("temperature", self.temperature, 0)
        k = self.top_k
        if k is not None and not is_int(k, 1):
            raise LoopcertError(f"top_k must be an integer >= 1 or None, got {k!r}")
        if self.top_p is not None:
            check_number("top_p", self.top_p, 0, 1, low_open=True)
        check_order(self.order, "SamplingParams.order")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def order_matters(self) -> bool:
        """True when the two conventions may give different laws: sampling with top-p (greedy,
        plain temperature and top-k alone keep the same tokens under both)."""
        return not self.greedy and self.top_p is not None

    def with_order(self, order: str) -> SamplingParams:
        """These parameters under convention `order` (a LoopcertError naming a bad one)."""
        return replace(self, order=check_order(order))


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
    if params.order == FILTERS_FIRST:
        rows = probs.reshape(-1, probs.shape[-1])
        ones = torch.softmax(x, dim=-1).reshape(rows.shape)  # the temperature-1 law the filters judge
        return torch.stack([_filters_first(p1, pt, params) for p1, pt in zip(ones, rows)]).reshape(
            probs.shape
        )
    if probs.dim() != 1:
        return torch.stack([_filter(row, params) for row in probs.reshape(-1, probs.shape[-1])]).reshape(
            probs.shape
        )
    return _filter(probs, params)


def filter_probs(probs: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The rest of `transform` after the softmax: (V,) softmax at params.temperature -> its top-k
    and top-p law (itself when neither is set, or greedy). transform(x, params) is
    filter_probs(transform(x, SamplingParams(params.temperature)), params), bit for bit.

    "temperature-first" only: the filters-first law judges the temperature-1 law, which the
    tempered one does not give back bit for bit; call `transform` on the logits for it."""
    if params.greedy or (params.top_k is None and params.top_p is None):
        return probs
    if params.order != TEMPERATURE_FIRST:
        raise LoopcertError(
            f"filter_probs takes temperature-first parameters only, got order {params.order!r}: "
            "the filters-first law needs the logits (refdec.sampling.transform)"
        )
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


def _filters_first(ones: torch.Tensor, tempered: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """(V,) temperature-1 law, (V,) law at params.temperature -> the filters-first law: the kept
    set judged on `ones` (kept_filters_first), the tempered law renormalised on it."""
    kept = kept_filters_first(ones, params)
    out = torch.zeros_like(tempered)
    out[kept] = tempered[kept]
    return out / out.sum()


def kept_filters_first(ones: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The token ids mlx-lm's sampler keeps, judged on the (V,) temperature-1 law `ones`, in rank
    order (mlx_lm.sample_utils.make_sampler: apply_top_p, then apply_top_k; no min_p, no XTC).

    top-p (only when top_p < 1, as mlx applies it only for 0 < top_p < 1): rank the tokens by
    probability; token i is kept iff the mass ranked strictly before it is < top_p x the total
    (mlx: dropped iff `mass_above >= top_p * total_mass`), and so is every token tied with the
    last one kept (mlx keeps `logprobs >= threshold`). top-k then keeps the k first of those (mlx:
    `argpartition`, exactly k; on a tie at the k-th place mlx's choice is its partition's, here
    the lower id). Only a ranked head that holds the nucleus is sorted (as `_filter` does)."""
    V = ones.shape[-1]
    k = V if params.top_k is None else min(params.top_k, V)
    if params.top_p is None or params.top_p >= 1:
        return _ranked_head(ones, k)[1]
    bar = params.top_p * ones.sum()
    for m in [m for m in HEAD_SIZES if m < V] + [V]:
        head, _ = _ranked_head(ones, m)
        total = torch.cumsum(head, dim=-1)
        if m < V and not total[-1] >= bar + NUCLEUS_MARGIN:
            continue  # the nucleus may reach past this head
        last = head[int((total - head < bar).sum()) - 1]  # the least probable token of the nucleus
        break
    tied = torch.nonzero(ones >= last).squeeze(-1)  # ascending ids: the nucleus and its ties
    _, at = torch.sort(ones[tied], descending=True, stable=True)
    return tied[at[:k]]


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
