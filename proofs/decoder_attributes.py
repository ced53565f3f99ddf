"""Every attribute certify reads from a decoder, read through one helper each (docs/decoders.md,
"What certify reads from a decoder": the one table of them).

A decoder needs only `generate` (proofs/decoders/protocol.py); everything else is optional, and a
decoder without it is judged by the default the table gives. Nothing else in proofs/ reads a
decoder's attributes by name (tests/proofs/test_decoder_attributes.py scans for getattr/hasattr):
a new attribute gets its helper here, its row in READERS and its row in the docs' table.

Each helper takes the decoder (or its factory or class, where the row says so) and returns a typed
value; a declaration that is there but wrong is a LoopcertError naming it, never a guess.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, replace

import torch

from refdec.errors import LoopcertError
from refdec.sampling import (
    CONVENTION_FIELDS,
    ENGINE_FIELDS,
    MIN_P_FIRST,
    SPLIT_SCOPE,
    SUBTRACT,
    TEMPERATURE_FIRST,
    SamplingParams,
    check_order,
)
from refdec.validate import is_int

# attribute -> the helper of this module that reads it (the docs' table has a row for each)
READERS: dict[str, str] = {
    "generate": "has_generate",
    "max_batch": "declared_max_batch",
    "batch_queue": "declared_batch_queue",
    "compute_dtype": "declared_compute_dtype",
    "dtype": "declared_compute_dtype",
    "sampler_order": "declared_sampler_order",
    "sampling_fields": "declared_sampling",
    "min_p_order": "declared_sampling",
    "penalty_scope": "declared_sampling",
    "penalty_window": "declared_sampling",
    "penalty_sign": "declared_sampling",
    "boundaries": "declared_pairs",
    "server_boundaries": "server_of",
    "speculation_widths": "speculation_widths",
    "prepare": "prepare_decoder",
    "model": "bound_model",
    "seed_hint": "declared_seed_hint",
    "device": "declared_device",
    "close": "close_decoder",
}


def has_generate(obj) -> bool:
    """Whether `obj` is a decoder: it has a callable `generate` (the one required attribute)."""
    return callable(getattr(obj, "generate", None))


def declared_max_batch(decoder) -> int | None:
    """The decoder's `max_batch` (an int >= 1); None when it declares none (absent or None). Any
    other value is a LoopcertError naming it."""
    cap = getattr(decoder, "max_batch", None)
    if cap is None:
        return None
    if not is_int(cap, 1):
        raise LoopcertError(f"{who_of(decoder)}.max_batch must be an int >= 1, got {cap!r}")
    return int(cap)


def who_of(decoder) -> str:
    """What an error calls a decoder, or its factory or class: its name, else its type's."""
    return getattr(decoder, "__name__", None) or type(decoder).__name__


def declared_batch_queue(decoder) -> bool:
    """Whether a generate_batch call may hold any number of prompts (`batch_queue`: it queues them)."""
    return bool(getattr(decoder, "batch_queue", False))


def batch_call_limit(decoder) -> int | None:
    """The most sequences one generate_batch call may be handed: None when any number may (it
    queues them: `batch_queue`) or when it does not say."""
    if declared_batch_queue(decoder):
        return None
    return declared_max_batch(decoder)


def _dtype(value) -> torch.dtype | None:
    if isinstance(value, str):
        value = getattr(torch, value.removeprefix("torch."), None)
    return value if isinstance(value, torch.dtype) else None


def declared_compute_dtype(decoder) -> torch.dtype | None:
    """The dtype the decoder computes in (a torch dtype, or its name with or without "torch."):
    its `compute_dtype`, else fastdec's `dtype`; None when it declares neither. The greedy
    checks' tie tolerance: a decoder handed float64 weights that computes in float32 is judged
    with float32's tolerance (proofs/checks/greedy.py). A `compute_dtype` that names no dtype is
    a LoopcertError naming it; a `dtype` that is none is not read (the name means other things
    elsewhere: a numpy dtype, an engine's own type)."""
    given = getattr(decoder, "compute_dtype", None)
    if given is not None:
        d = _dtype(given)
        if d is None or not d.is_floating_point:
            raise LoopcertError(
                f"{who_of(decoder)}.compute_dtype must be a floating torch.dtype or its name "
                f'("float32", "torch.bfloat16", ...), got {given!r}'
            )
        return d
    return _dtype(getattr(decoder, "dtype", None))


def declared_sampler_order(decoder, only_if_declared: bool = False) -> str | None:
    """The convention the decoder (or its factory, or class) declares in `sampler_order`: one of
    refdec.sampling.SAMPLER_ORDERS; "temperature-first" when it declares none (absent or None). An
    invalid value is a LoopcertError naming it. only_if_declared: None unless a name is there
    itself (a factory or class that declares it for every decoder it builds; a property of a class
    is read from a built decoder)."""
    order = getattr(decoder, "sampler_order", None)
    if only_if_declared and not isinstance(order, str):
        return None
    if order is None:
        return TEMPERATURE_FIRST
    return check_order(order, f"{type(decoder).__name__}.sampler_order")


@dataclass(frozen=True)
class SamplingSupport:
    """Which of the engines' other sampling parameters a decoder honours, and under which
    conventions (`sampling_fields`, `min_p_order`, `penalty_scope`, `penalty_window`, `penalty_sign`)."""

    fields: frozenset[str] = frozenset()  # of refdec.sampling.ENGINE_FIELDS
    min_p_order: str = MIN_P_FIRST
    penalty_scope: str = SPLIT_SCOPE
    penalty_window: int | None = None
    penalty_sign: str = SUBTRACT

    def missing(self, sampling: SamplingParams) -> tuple[str, ...]:
        """The fields `sampling` sets that the decoder does not declare (none: it may be handed it)."""
        return tuple(f for f in sampling.engine_fields() if f not in self.fields)

    def apply(self, sampling: SamplingParams) -> SamplingParams:
        """`sampling` under the decoder's conventions (what it is handed and judged by)."""
        return replace(
            sampling,
            min_p_order=self.min_p_order,
            penalty_scope=self.penalty_scope,
            penalty_window=self.penalty_window,
            penalty_sign=self.penalty_sign,
        )


ALL_FIELDS = SamplingSupport(frozenset(ENGINE_FIELDS))  # fastdec, refdec's own decoders: every one


def declared_sampling(decoder, only_if_declared: bool = False) -> SamplingSupport | None:
    """What the decoder (or its factory, or class) declares of the engines' other parameters; none
    when it declares nothing. only_if_declared: None unless `sampling_fields` is there itself (a
    class or factory that declares it for every decoder it builds). A bad declaration is a
    LoopcertError naming it."""
    who = who_of(decoder)
    fields = getattr(decoder, "sampling_fields", None)
    if only_if_declared and not isinstance(fields, (str, tuple, list, set, frozenset)):
        return None
    if fields is None:
        fields = ()
    elif fields == "all":
        fields = ENGINE_FIELDS
    elif isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
        raise LoopcertError(
            f'{who}.sampling_fields must be "all" or a collection of field names, got {fields!r}'
        )
    unknown = sorted(set(fields) - set(ENGINE_FIELDS))
    if unknown:
        raise LoopcertError(
            f"{who}.sampling_fields names {', '.join(unknown)}: not among {', '.join(ENGINE_FIELDS)}"
        )
    conventions = {f: getattr(decoder, f) for f in CONVENTION_FIELDS if getattr(decoder, f, None) is not None}
    try:  # SamplingParams checks each convention and names a bad one
        checked = replace(SamplingParams(), **conventions)
    except LoopcertError as e:
        raise LoopcertError(f"{who} declares a bad sampling convention: {e}") from None
    return SamplingSupport(
        frozenset(fields),
        checked.min_p_order,
        checked.penalty_scope,
        checked.penalty_window,
        checked.penalty_sign,
    )


def declared_pairs(decoder, where: str = "") -> list[tuple[int, str]]:
    """The decoder's `boundaries` as (position, what) pairs: each entry a position (an int >= 1) or
    a (position, what) pair; absent or None: none. Anything else is a LoopcertError naming it."""
    got = getattr(decoder, "boundaries", None)
    if got is None:
        return []
    name = where or f"{type(decoder).__name__}.boundaries"
    if isinstance(got, (str, bytes)) or not isinstance(got, Iterable):
        raise LoopcertError(f"{name} must be a sequence of positions or (position, what) pairs, got {got!r}")
    out = []
    for entry in got:
        pos, what = (entry, "declared by the decoder") if is_int(entry) else _pair(entry, name)
        if not is_int(pos, 1):
            raise LoopcertError(f"{name}: a position must be an integer >= 1, got {pos!r}")
        out.append((int(pos), str(what)))
    return out


def _pair(entry, name: str) -> tuple:
    if isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[1], str):
        return entry[0], entry[1]
    raise LoopcertError(f"{name}: each entry must be a position or a (position, what) pair, got {entry!r}")


def server_of(decoder) -> list[int]:
    """An HTTP decoder's `server_boundaries` (certify's --boundaries: a server's block and chunk
    sizes), integers >= 1; none for other decoders."""
    return sorted({int(p) for p in getattr(decoder, "server_boundaries", ()) or () if is_int(p, 1)})


def speculation_widths(decoder) -> list[int]:
    """The speculation widths k a decoder drafts: its `speculation_widths`, else fastdec's
    draft_ahead (its `config`, draft-verify), mlx-lm's num_draft (its `spec`)."""
    got = getattr(decoder, "speculation_widths", None)
    if got is not None:
        return sorted({int(k) for k in got if is_int(k, 1)})
    config = getattr(decoder, "config", None)
    if getattr(config, "strategy", None) in ("draft-verify", "adaptive-verify"):
        return [int(config.draft_ahead)]
    spec = getattr(decoder, "spec", None)
    k = getattr(spec, "num_draft", None)  # mlx-lm's; OpenVINO's spec has none (it drafts its own way)
    if getattr(spec, "speculative", False) and is_int(k, 1):
        return [int(k)]
    return []


def prepare_decoder(decoder, n_positions: int) -> float:
    """Call the decoder's `prepare(n_positions)` (the one-time work, compiles, that decoding up to
    n_positions positions needs) -> the seconds it took (0.0 when it has none)."""
    prepare = getattr(decoder, "prepare", None)
    if prepare is None:
        return 0.0
    t0 = time.perf_counter()
    prepare(n_positions)
    return time.perf_counter() - t0


def bound_model(decoder) -> torch.nn.Module | None:
    """The model a decoder object decodes with: its `model` when that is a model with a config
    (refdec.LoopedLM; fastdec.Decoder holds one), else None."""
    m = getattr(decoder, "model", None)
    return m if isinstance(m, torch.nn.Module) and hasattr(m, "cfg") else None


def declared_seed_hint(decoder) -> str | None:
    """The decoder's `seed_hint` (an HTTP decoder's: the server flag that pins seeds), said beside a
    failed reproducibility check; None when it has none."""
    hint = getattr(decoder, "seed_hint", None)
    return str(hint) if hint else None


def declared_device(decoder) -> str:
    """Where the decoder computes (`device`: fastdec's torch device), for the speed check's clock
    synchronisation; "cpu" when it does not say."""
    return getattr(decoder, "device", "cpu")


def close_decoder(decoder) -> None:
    """Call the decoder's `close()` when it has one (an HTTP decoder's connections)."""
    close = getattr(decoder, "close", None)
    if callable(close):
        close()
