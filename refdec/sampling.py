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

The engines' other parameters (named as vLLM names them; docs/certify.md#sampling-parameters has
each engine's convention, read from its source):

- Before the temperature, on the float64 logits, in this order (vLLM, SGLang, transformers and
  mlx-lm agree on it): `logit_bias` added; `repetition_penalty` r (a counted token's logit is
  divided by r when > 0, else multiplied by r); `frequency_penalty` f and `presence_penalty` e
  subtracted (f x count, e x [count > 0]); while fewer than `min_tokens` tokens were generated,
  every stop token (`stop_token_ids`, and the EOS id unless `ignore_eos`) gets -inf. Greedy is the
  argmax of these processed logits.
- Which tokens a penalty counts (`penalty_scope`): "split" (vLLM, SGLang): the repetition penalty
  counts the prompt's and the output's tokens, frequency and presence the output's only;
  "context" (mlx-lm): all three count the last `penalty_window` tokens of prompt + output (mlx-lm's
  default window is 20; None: all of them).
- How frequency and presence apply (`penalty_sign`): "subtract" (vLLM, SGLang, mlx-lm, llama.cpp):
  f x count + e subtracted from the logit; "by-sign" (OpenVINO GenAI's LogitTransformers): the
  presence penalty, then the frequency penalty, each subtracted from a logit >= 0 and added to a
  negative one, the second judged on the logit as the first left it (so a penalised negative logit
  rises, and a logit within rounding of 0 may go either way: the law is discontinuous there).
- `min_p` keeps the tokens of probability >= min_p x the largest. temperature-first: on the
  tempered law, either before top-k / top-p with a renormalisation (`min_p_order`
  "min-p-first", vLLM's argmax-invariant processor) or after them ("min-p-last", transformers'
  MinPLogitsWarper, SGLang's joint mask); the two differ only with top-p. filters-first (mlx-lm):
  on the temperature-1 law, with top-p and top-k (mlx applies top-p, min-p, top-k, each a mask;
  kept sets that are prefixes of one ranking, so the order does not matter).

Penalties and min_tokens make the law of a position depend on the tokens before it: `transform`
then needs a `Context` (the prompt, the output so far, the EOS id), and refuses to guess without
one. A sequence ends at its first stop token (`stop_ids`), which it includes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from refdec.errors import LoopcertError
from refdec.validate import check_int, check_number, is_int

TEMPERATURE_FIRST = "temperature-first"
FILTERS_FIRST = "filters-first"
SAMPLER_ORDERS = (TEMPERATURE_FIRST, FILTERS_FIRST)  # the module docstring's two conventions
MIN_P_FIRST = "min-p-first"  # vLLM: min-p on the tempered law, renormalised, then top-k / top-p
MIN_P_LAST = "min-p-last"  # transformers, SGLang: min-p's mask after top-k / top-p
MIN_P_ORDERS = (MIN_P_FIRST, MIN_P_LAST)
SPLIT_SCOPE = "split"  # vLLM, SGLang: repetition counts prompt + output, frequency/presence output only
CONTEXT_SCOPE = "context"  # mlx-lm: every penalty counts the last penalty_window tokens of the context
PENALTY_SCOPES = (SPLIT_SCOPE, CONTEXT_SCOPE)
SUBTRACT = "subtract"  # vLLM, SGLang, mlx-lm, llama.cpp: f x count + e subtracted
BY_SIGN = "by-sign"  # OpenVINO GenAI: presence, then frequency, each subtracted from a logit >= 0, else added
PENALTY_SIGNS = (SUBTRACT, BY_SIGN)


# the engines' other parameters (the module docstring), each honoured or not by a decoder as a
# whole: proofs.decoder_attributes.declared_sampling reads which a decoder declares
ENGINE_FIELDS = (
    "min_p",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "stop_token_ids",
    "min_tokens",
    "ignore_eos",
)
# how an engine applies them
CONVENTION_FIELDS = ("min_p_order", "penalty_scope", "penalty_window", "penalty_sign")


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
    # the engines' other parameters (module docstring); the defaults change nothing
    min_p: float = 0.0  # keep tokens of probability >= min_p x the largest
    repetition_penalty: float = 1.0  # > 0; 1: off
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    # ((token id, bias), ...) sorted by id; a {id: bias} dict is accepted
    logit_bias: tuple[tuple[int, float], ...] = ()
    stop_token_ids: tuple[int, ...] = ()  # end the sequence (sorted, unique); the EOS id is the decoder's
    min_tokens: int = 0  # no stop token before this many new tokens
    ignore_eos: bool = False  # the EOS id neither stops nor is masked by min_tokens
    min_p_order: str = MIN_P_FIRST  # temperature-first only: MIN_P_ORDERS
    penalty_scope: str = SPLIT_SCOPE  # which tokens the penalties count: PENALTY_SCOPES
    penalty_window: int | None = None  # "context" scope: the last this many tokens (None: all)
    penalty_sign: str = SUBTRACT  # how frequency and presence apply: PENALTY_SIGNS

    def __post_init__(self):
        check_number("temperature", self.temperature, 0)
        k = self.top_k
        if k is not None and not is_int(k, 1):
            raise LoopcertError(f"top_k must be an integer >= 1 or None, got {k!r}")
        if self.top_p is not None:
            check_number("top_p", self.top_p, 0, 1, low_open=True)
        check_order(self.order, "SamplingParams.order")
        check_number("min_p", self.min_p, 0, 1)
        check_number("repetition_penalty", self.repetition_penalty, 0, low_open=True)
        check_number("frequency_penalty", self.frequency_penalty)
        check_number("presence_penalty", self.presence_penalty)
        object.__setattr__(self, "logit_bias", _bias_pairs(self.logit_bias))
        object.__setattr__(self, "stop_token_ids", _token_ids("stop_token_ids", self.stop_token_ids))
        check_int("min_tokens", self.min_tokens, 0)
        if not isinstance(self.ignore_eos, bool):
            raise LoopcertError(f"ignore_eos must be True or False, got {self.ignore_eos!r}")
        if self.min_p_order not in MIN_P_ORDERS:
            raise LoopcertError(
                f"min_p_order must be one of {', '.join(MIN_P_ORDERS)}, got {self.min_p_order!r}"
            )
        if self.penalty_scope not in PENALTY_SCOPES:
            raise LoopcertError(
                f"penalty_scope must be one of {', '.join(PENALTY_SCOPES)}, got {self.penalty_scope!r}"
            )
        if self.penalty_sign not in PENALTY_SIGNS:
            raise LoopcertError(
                f"penalty_sign must be one of {', '.join(PENALTY_SIGNS)}, got {self.penalty_sign!r}"
            )
        if self.penalty_window is not None:
            check_int("penalty_window", self.penalty_window, 1)
            if self.penalty_scope != CONTEXT_SCOPE:
                raise LoopcertError(
                    f"penalty_window={self.penalty_window} applies to penalty_scope {CONTEXT_SCOPE!r} only, "
                    f"not {self.penalty_scope!r}"
                )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def order_matters(self) -> bool:
        """True when the two conventions may give different laws: sampling with top-p or min-p
        (greedy, plain temperature and top-k alone keep the same tokens under both)."""
        return not self.greedy and (self.top_p is not None or self.min_p > 0)

    @property
    def penalized(self) -> bool:
        """Some penalty is on (the law then depends on the tokens before the position)."""
        return self.repetition_penalty != 1 or self.frequency_penalty != 0 or self.presence_penalty != 0

    @property
    def needs_context(self) -> bool:
        """The law of a position depends on the tokens before it: `transform` needs a Context."""
        return self.penalized or self.min_tokens > 0

    @property
    def plain(self) -> bool:
        """Only temperature, top-k, top-p and order: the law of the logits alone, as before the
        engines' other parameters (decoders keep their fast paths for these)."""
        return not self.needs_context and not self.logit_bias and self.min_p == 0

    def stop_ids(self, eos_token_id: int | None = None) -> frozenset[int]:
        """The tokens that end a sequence: stop_token_ids, and the EOS id unless ignore_eos."""
        eos = () if eos_token_id is None or self.ignore_eos else (int(eos_token_id),)
        return frozenset(self.stop_token_ids) | frozenset(eos)

    def engine_fields(self) -> tuple[str, ...]:
        """The ENGINE_FIELDS these parameters set (differ from the defaults), in that order."""
        return tuple(
            f for f in ENGINE_FIELDS if getattr(self, f) != SamplingParams.__dataclass_fields__[f].default
        )

    def with_order(self, order: str) -> SamplingParams:
        """These parameters under convention `order` (a LoopcertError naming a bad one)."""
        return replace(self, order=check_order(order))

    def describe(self) -> dict:
        """The fields that differ from the defaults (reports, certificates): the old three always."""
        out = {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}
        for f in (*ENGINE_FIELDS, *CONVENTION_FIELDS):
            v = getattr(self, f)
            if v != SamplingParams.__dataclass_fields__[f].default:
                out[f] = (
                    [list(p) for p in v] if f == "logit_bias" else list(v) if f == "stop_token_ids" else v
                )
        return out


def _bias_pairs(bias) -> tuple[tuple[int, float], ...]:
    """logit_bias as ((id, bias), ...) sorted by id, from a dict or pairs; LoopcertError naming it."""
    try:
        items = list(bias.items()) if isinstance(bias, dict) else [tuple(p) for p in bias]
    except TypeError:
        raise LoopcertError(
            f"logit_bias must be a {{token id: bias}} dict or (id, bias) pairs, got {bias!r}"
        ) from None
    out = {}
    for pair in items:
        if len(pair) != 2:
            raise LoopcertError(f"logit_bias must hold (token id, bias) pairs, got {pair!r}")
        t, b = pair
        if not is_int(t, 0):
            raise LoopcertError(f"logit_bias token ids must be integers >= 0, got {t!r}")
        if int(t) in out:
            raise LoopcertError(f"logit_bias names token {int(t)} twice")
        out[int(t)] = check_number(f"logit_bias[{int(t)}]", b)
    return tuple(sorted(out.items()))


def _token_ids(name: str, ids) -> tuple[int, ...]:
    try:
        ids = list(ids)
    except TypeError:
        raise LoopcertError(f"{name} must be a sequence of token ids, got {ids!r}") from None
    for t in ids:
        if not is_int(t, 0):
            raise LoopcertError(f"{name} must hold integers >= 0, got {t!r}")
    return tuple(sorted({int(t) for t in ids}))


@dataclass(frozen=True)
class Context:
    """What the law of one position depends on beyond its logits (the module docstring): the
    prompt, the tokens generated before the position, and the EOS id (None: none)."""

    prompt: tuple[int, ...]
    output: tuple[int, ...] = ()
    eos_token_id: int | None = None

    @classmethod
    def of(
        cls, prompt: Sequence[int], output: Sequence[int] = (), eos_token_id: int | None = None
    ) -> Context:
        return cls(tuple(int(t) for t in prompt), tuple(int(t) for t in output), eos_token_id)

    def then(self, token: int) -> Context:
        """The context of the next position, after `token` was generated."""
        return Context(self.prompt, self.output + (int(token),), self.eos_token_id)

    def counted(self, params: SamplingParams) -> tuple[dict[int, int], dict[int, int]]:
        """({token: count} the repetition penalty sees, {token: count} frequency/presence see)."""
        if params.penalty_scope == CONTEXT_SCOPE:
            ctx = self.prompt + self.output
            if params.penalty_window is not None:
                ctx = ctx[-params.penalty_window :]
            c = _count(ctx)
            return c, c
        return _count(self.prompt + self.output), _count(self.output)


def _count(tokens: Sequence[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for t in tokens:
        out[t] = out.get(t, 0) + 1
    return out


def process_logits(
    logits: torch.Tensor, params: SamplingParams, context: Context | None = None
) -> torch.Tensor:
    """(..., V) logits -> float64 logits after logit_bias, the penalties and the min_tokens mask
    (the module docstring's order). The penalties and the mask need `context` ((V,) logits);
    logit_bias alone does not."""
    x = logits.to(torch.float64)
    V = x.shape[-1]
    if params.logit_bias:
        ids = [t for t, _ in params.logit_bias]
        if max(ids) >= V:
            raise LoopcertError(f"logit_bias names token {max(ids)}, outside the vocabulary [0, {V})")
        x = x.clone()
        x[..., ids] += torch.tensor([b for _, b in params.logit_bias], dtype=torch.float64)
    if not params.needs_context:
        return x
    if context is None:
        raise LoopcertError(
            "these sampling parameters (a penalty or min_tokens) make the law depend on the tokens "
            "before the position: pass a refdec.sampling.Context"
        )
    if x.dim() != 1:
        raise LoopcertError(f"a Context applies to one position's (V,) logits, got shape {tuple(x.shape)}")
    x = x.clone()
    if params.penalized:
        rep, add = context.counted(params)
        if params.repetition_penalty != 1 and rep:
            idx = torch.tensor(sorted(rep), dtype=torch.long)
            sel = x[idx]
            x[idx] = torch.where(sel > 0, sel / params.repetition_penalty, sel * params.repetition_penalty)
        if (params.frequency_penalty != 0 or params.presence_penalty != 0) and add:
            idx = torch.tensor(sorted(add), dtype=torch.long)
            n = torch.tensor([add[t] for t in sorted(add)], dtype=torch.float64)
            if params.penalty_sign == SUBTRACT:
                x[idx] -= params.frequency_penalty * n + params.presence_penalty
            else:  # BY_SIGN: presence, then frequency, each toward the side of 0 the logit is on
                for amount in (params.presence_penalty, params.frequency_penalty * n):
                    sel = x[idx]
                    x[idx] = torch.where(sel >= 0, sel - amount, sel + amount)
    if len(context.output) < params.min_tokens:
        stops = sorted(t for t in params.stop_ids(context.eos_token_id) if t < V)
        if len(stops) == V:
            raise LoopcertError(
                f"min_tokens={params.min_tokens} masks every token of the vocabulary (all stop)"
            )
        x[stops] = -math.inf
    return x


def greedy_token(logits: torch.Tensor) -> int:
    """argmax of a (V,) vector; torch.argmax returns the first maximal index."""
    return int(torch.argmax(logits))


def transform(logits: torch.Tensor, params: SamplingParams, context: Context | None = None) -> torch.Tensor:
    """(..., V) logits -> (..., V) float64 probabilities of the target law. Parameters that need
    the tokens before the position (SamplingParams.needs_context) need `context` and (V,) logits."""
    if params.plain:
        x = logits.to(torch.float64)
    else:
        x = process_logits(logits, params, context)
    if params.greedy:
        return torch.nn.functional.one_hot(x.argmax(-1), x.shape[-1]).to(torch.float64)
    probs = torch.softmax(x / params.temperature, dim=-1)
    if params.min_p > 0 and params.order == TEMPERATURE_FIRST and params.min_p_order == MIN_P_FIRST:
        probs = _min_p(probs, probs, params.min_p)
    if params.top_k is None and params.top_p is None:
        if params.min_p > 0 and params.order == FILTERS_FIRST:
            return _min_p(probs, torch.softmax(x, dim=-1), params.min_p)
        return (
            _min_p(probs, probs, params.min_p)
            if params.min_p > 0 and params.min_p_order == MIN_P_LAST
            else probs
        )
    if params.order == FILTERS_FIRST:
        rows = probs.reshape(-1, probs.shape[-1])
        ones = torch.softmax(x, dim=-1).reshape(rows.shape)  # the temperature-1 law the filters judge
        return torch.stack([_filters_first(p1, pt, params) for p1, pt in zip(ones, rows)]).reshape(
            probs.shape
        )
    if probs.dim() != 1:
        out = torch.stack([_filter(row, params) for row in probs.reshape(-1, probs.shape[-1])]).reshape(
            probs.shape
        )
    else:
        out = _filter(probs, params)
    if params.min_p > 0 and params.min_p_order == MIN_P_LAST:
        out = _min_p(out, probs, params.min_p)
    return out


def _min_p(law: torch.Tensor, judge: torch.Tensor, min_p: float) -> torch.Tensor:
    """(..., V) `law` kept where `judge` >= min_p x its largest entry, renormalised."""
    keep = judge >= min_p * judge.max(-1, keepdim=True).values
    out = torch.where(keep, law, 0.0)
    return out / out.sum(-1, keepdim=True)


def filter_probs(probs: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The rest of `transform` after the softmax: (V,) softmax at params.temperature -> its top-k
    and top-p law (itself when neither is set, or greedy). transform(x, params) is
    filter_probs(transform(x, SamplingParams(params.temperature)), params), bit for bit.

    "temperature-first" only: the filters-first law judges the temperature-1 law, which the
    tempered one does not give back bit for bit; call `transform` on the logits for it."""
    if not params.plain:
        raise LoopcertError("filter_probs takes temperature, top-k, top-p and order only; call transform")
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
    if params.min_p > 0:  # mlx's apply_min_p: a mask on the same temperature-1 law
        kept = kept[ones[kept] >= params.min_p * ones.max()]
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
