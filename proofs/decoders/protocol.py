"""The decoder protocols that certification speaks (docs/design.md section 6).

A Decoder is any object with `generate(prompt, max_new_tokens, sampling, seed)` returning the
new token ids, either as a sequence of ints or as an object with a `.tokens` attribute (the
fastdec result). A BatchDecoder also has `generate_batch`, many seeds in one call.
`loopcert certify --decoder module:factory` builds one with `factory(model)`.
"""

from __future__ import annotations

import importlib
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

# the readers of the optional attributes live in proofs/decoder_attributes.py; they are public
# here too, where docs/decoders.md first named them (tests/test_public_api.py PUBLIC)
from proofs.decoder_attributes import (  # noqa: F401 - public names of the protocol
    ALL_FIELDS,
    SamplingSupport,
    batch_call_limit,
    declared_compute_dtype,
    declared_max_batch,
    declared_sampler_order,
    declared_sampling,
    has_generate,
    prepare_decoder,
)
from refdec.decode import check_generate_args, tokens_of
from refdec.errors import LoopcertError
from refdec.model import LoopedLM
from refdec.sampling import (
    SUBTRACT,
    SamplingParams,
)


@runtime_checkable
class Decoder(Protocol):
    def generate(
        self, prompt: Sequence[int], max_new_tokens: int, sampling: SamplingParams, seed: int
    ) -> Any:
        """The new token ids (not the prompt) of one sequence sampled by `sampling` from seed
        `seed`: a sequence of ints, or an object with `.tokens`. The same arguments give the same
        tokens (the reproducibility check holds a decoder to it)."""


@runtime_checkable
class BatchDecoder(Decoder, Protocol):
    """A Decoder that decodes many sequences in one call (fastdec.Decoder, HTTPDecoder, a user's).

    Only `generate_batch` is required (isinstance checks that). Optional attributes, each read
    through its helper in proofs/decoder_attributes.py (READERS; docs/decoders.md has the one table
    of them, with the defaults), and a decoder without them is still a BatchDecoder:

    max_batch      int >= 1: the most sequences it decodes together (fastdec: its cache rows);
                   without `batch_queue`, also the most one generate_batch call may be handed
    batch_queue    True: a call may hold any number of prompts, `max_batch` decoding at a time
                   and the rest queued (fastdec.Decoder), so callers size calls by time alone
    compute_dtype  the torch dtype (or its name) it computes in, whatever the model it was
                   handed: the greedy check's tie tolerance (proofs.checks.greedy)
    sampler_order  one of refdec.sampling.SAMPLER_ORDERS: the convention its sampler applies
                   top-k / top-p in (read through `declared_sampler_order`; absent or None:
                   "temperature-first"). Certify judges it against that law and hands it
                   SamplingParams with that `order` (docs/certify.md#sampler-conventions)
    boundaries     positions where its state changes shape, as ints or (position, what) pairs
                   (read through proofs.decoder_attributes.declared_pairs): certify's greedy_depth
                   crosses each, and coverage fails one left uncrossed (docs/certify.md#boundaries)
    sampling_fields  the engines' other parameters it honours (refdec.sampling.ENGINE_FIELDS names,
                   or "all"; read through `declared_sampling`; absent: none): certify samples it
                   only under the plan's cases whose fields it declares and lists the others as
                   not declared; a parameter the engine refuses at run time raises `Refused`
    min_p_order, penalty_scope, penalty_window, penalty_sign
                   how it applies them (refdec.sampling's conventions; absent: SamplingParams'
                   defaults, vLLM's): every case it is handed carries them, and is judged under them
    model          the refdec.LoopedLM it decodes (fastdec.Decoder's): a decoder object handed to
                   certify() is certified on that model only, and must be a copy of the certified
                   one (proofs.decoders.candidates.object_candidate; absent: taken as built for it)
    prepare        prepare(n_positions) -> seconds: do now the one-time work (compiles) that
                   decoding sequences of up to n_positions positions needs (read through
                   `prepare_decoder`); certify calls it before it times the decoder, so the
                   sampling budget buys samples, not compiles (fastdec.Decoder with compile=True)
    """

    def generate_batch(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        sampling: SamplingParams,
        seeds: Sequence[int],
    ) -> Sequence[Any]:
        """One result per prompt, in order, each as generate() returns it: result i has exactly
        the law (and, for a reproducible decoder, the tokens) of generate(prompts[i],
        max_new_tokens, sampling, seeds[i]) alone, whatever else the call holds.

        `loopcert serve`'s round mode also hands fastdec.Decoder's extensions: per-sequence
        lists of max_new_tokens and sampling, and eos_token_id= and keep_logits= keywords.
        """


Factory = Callable[[Any], Decoder]  # model -> decoder


class SeededDecoder(ABC):
    """Base of loopcert's own reference decoders (naive_kv, specref): `generate` validates its
    arguments as refdec.generate does (a LoopcertError names the bad value) and hands `decode`
    the prompt ids, the depth and a fresh torch.Generator(seed), the stream refdec draws from."""

    model: LoopedLM
    depth: int | None = None  # the depth generate() decodes at; None: the model's R

    def generate(
        self,
        prompt: Sequence[int],
        max_new_tokens: int,
        sampling: SamplingParams,
        seed: int,
        eos_token_id: int | None = None,
    ) -> list[int]:
        """New token ids (not the prompt); the EOS token is included when it ends the run."""
        ids, depth = check_generate_args(self.model, prompt, max_new_tokens, sampling, seed, self.depth)
        gen = torch.Generator().manual_seed(seed)
        return self.decode(ids, depth, max_new_tokens, sampling, gen, eos_token_id)

    @abstractmethod
    def decode(
        self,
        ids: list[int],
        depth: int,
        max_new_tokens: int,
        sampling: SamplingParams,
        gen: torch.Generator,
        eos_token_id: int | None,
    ) -> list[int]:
        """Each decoder's own decoding, from validated arguments: the new ids (EOS included when
        it ends the run). Abstract, so a subclass without it cannot be built."""


class NotApplicable(Exception):  # noqa: N818 - a verdict, not an error
    """Raised by a factory for a model it does not serve (e.g. a decoder bound to its own
    checkpoint, handed a tiny preset): certify reports that run "not applicable" with the
    message, and hides nothing else. Declining the certified model itself is a failure."""


class Refused(LoopcertError):
    """Raised by a decoder when its engine refuses the sampling parameters it was handed (vLLM
    0.32's 400 on min_p under speculative decoding): certify reports that case "refused by the
    engine: <message>", neither a pass nor a crash (docs/certify.md#sampling-parameters)."""


class NotADecoder(LoopcertError):
    """A factory that cannot be called as `factory(model)`, one that returned something without a
    callable `generate`, or a decoder whose `generate` breaks the protocol on a one-token request
    (probe_generate): a usage error before any check, never a finding of the run."""


def check_decoder(obj, where: str) -> Decoder:
    if not has_generate(obj):
        what = "None" if obj is None else f"a {type(obj).__name__!r}"
        raise NotADecoder(
            f"{where} returned {what}, not a decoder: a factory returns an object with a callable "
            "generate(prompt, max_new_tokens, sampling, seed)"
        )
    return obj


def check_factory(factory: Factory, where: str) -> None:
    """A NotADecoder unless `factory` can be called as factory(model) (a class: its __init__);
    a callable whose signature Python cannot read (a builtin) passes."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(object())
    except TypeError:
        raise NotADecoder(
            f"{where}: a factory is called as factory(model) -> decoder, and "
            f"{getattr(factory, '__name__', type(factory).__name__)}{sig} cannot be called so"
        ) from None


def probe_generate(decoder: Decoder, where: str) -> None:
    """Ask `decoder` for one greedy token after a one-token prompt, before any check: a NotADecoder
    when `generate` cannot take the protocol's four arguments, or returns anything but one token
    id (a list of ints; a 1-D numpy array or torch tensor of integers is converted, as every check
    converts it: refdec.decode.tokens_of). An exception raised inside it is left to the checks,
    which report it as their finding with its own text."""
    try:
        inspect.signature(decoder.generate).bind([0], 1, SamplingParams(), 0)
    except (TypeError, ValueError) as e:
        if isinstance(e, TypeError):
            raise NotADecoder(
                f"{where}: generate must take (prompt, max_new_tokens, sampling, seed); "
                f"generate{inspect.signature(decoder.generate)} cannot ({e})"
            ) from None
    try:
        got = decoder.generate([0], 1, SamplingParams(), 0)
    except Exception:  # noqa: BLE001 - the decoder's own failure: the checks report it
        return
    try:
        tokens = tokens_of(got)
    except LoopcertError as e:
        raise NotADecoder(f"{where}: asked for 1 greedy token after a 1-token prompt, {e}") from None
    if len(tokens) != 1:
        asked = "asked for 1 greedy token after a 1-token prompt"
        raise NotADecoder(f"{where}: {asked}, generate() {length_note(len(tokens), 1)}")


def length_note(got: int, asked: int) -> str:
    """ "returned N tokens, expected M" and, where N is M plus a prompt, "(the prompt included?)":
    the words of a wrong length, before the run and in a check's failure."""
    said = f"returned {got} token{'s' if got != 1 else ''}, expected {asked}"
    return said + (" (the prompt included? generate returns the new tokens only)" if got > asked else "")


def run_generate(
    decoder: Decoder, prompt: Sequence[int], max_new_tokens: int, sampling: SamplingParams, seed: int
) -> list[int]:
    return tokens_of(decoder.generate(list(prompt), max_new_tokens, sampling, seed))


def load_factory(spec: str) -> Factory:
    """ "package.module:factory" -> the callable; every way the spec can be wrong is a LoopcertError."""
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise LoopcertError(f"--decoder must look like 'module:factory', got {spec!r}")
    module_name, attr = spec.split(":")
    if not module_name or not attr:
        raise LoopcertError(f"--decoder must look like 'module:factory', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise LoopcertError(
            f"--decoder {spec!r}: cannot import {module_name!r} ({e}){import_hint(module_name, e)}"
        ) from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise LoopcertError(f"--decoder {spec!r}: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise LoopcertError(f"--decoder {spec!r}: {attr!r} is not callable")
    return obj


def import_hint(module_name: str, error: ImportError) -> str:
    """What to do about a --decoder module that cannot be imported: when the missing module is the
    spec's own (or a package above it), where Python looks for it; else nothing (the module was
    found and an import inside it failed: the error says which)."""
    missing = getattr(error, "name", None)
    parts = module_name.split(".")
    if missing is not None and missing not in {".".join(parts[: i + 1]) for i in range(len(parts))}:
        return ""
    return (
        f"; Python looks for it on sys.path: run loopcert from the folder that holds "
        f"{parts[0]}.py (or the {parts[0]}/ package), or add that folder to PYTHONPATH "
        f"(PYTHONPATH=/path/to/folder loopcert certify ...)"
    )


def build_decoder(factory: Factory, model, spec: str) -> Decoder:
    return check_decoder(factory(model), f"--decoder {spec!r}")


def refuse_unhonoured(
    s: SamplingParams,
    fields: Sequence[str],
    engine: str,
    lacks: str,
    *,
    scope: str | None = None,
    sign: str = SUBTRACT,
    min_p_order: str | None = None,
) -> None:
    """A LoopcertError naming what `s` sets that an engine's request cannot carry: a field outside
    `fields` ("<field>=<value>: <lacks>"), or a convention other than the engine's own where `s`
    uses it: the penalties' `scope` (None: any), how frequency and presence apply (`sign`), min-p's
    order (None: any). Each engine decoder calls it before a request, so a convention it cannot
    follow is refused by name, never sampled under its own rule instead."""
    other = [f for f in s.engine_fields() if f not in fields]
    if other:
        raise LoopcertError(
            f"SamplingParams {', '.join(f'{f}={getattr(s, f)!r}' for f in other)}: {lacks} (this decoder "
            f"sends {', '.join(fields)}): refused rather than sampled without"
        )
    wrong = []
    if scope is not None and s.penalized and s.penalty_scope != scope:
        wrong.append(f"penalty_scope {s.penalty_scope!r} ({engine}'s is {scope!r})")
    if (s.frequency_penalty or s.presence_penalty) and s.penalty_sign != sign:
        wrong.append(f"penalty_sign {s.penalty_sign!r} ({engine}'s is {sign!r})")
    if min_p_order is not None and s.min_p > 0 and not s.greedy and s.min_p_order != min_p_order:
        wrong.append(f"min_p_order {s.min_p_order!r} ({engine}'s is {min_p_order!r})")
    if wrong:
        raise LoopcertError(f"SamplingParams {'; '.join(wrong)}: {engine} has no field to ask otherwise")
