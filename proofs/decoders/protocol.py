"""The decoder protocol that certification speaks (docs/design.md section 6).

A decoder is any object with `generate(prompt, max_new_tokens, sampling, seed)` returning the
new token ids, either as a sequence of ints or as an object with a `.tokens` attribute (the
fastdec result). `loopcert certify --decoder module:factory` builds one with `factory(model)`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams
from refdec.validate import is_int


@runtime_checkable
class Decoder(Protocol):
    def generate(
        self, prompt: Sequence[int], max_new_tokens: int, sampling: SamplingParams, seed: int
    ) -> Any: ...


Factory = Callable[[Any], Decoder]  # model -> decoder


class NotApplicable(Exception):  # noqa: N818 - a verdict, not an error
    """Raised by a factory for a model it does not serve (e.g. a decoder bound to its own
    checkpoint, handed a tiny preset): certify reports that run "not applicable" with the
    message, and hides nothing else. Declining the certified model itself is a failure."""


def check_decoder(obj, where: str) -> Decoder:
    if not callable(getattr(obj, "generate", None)):
        raise LoopcertError(f"{where} returned {type(obj).__name__!r}, which has no generate() method")
    return obj


def tokens_of(result) -> list[int]:
    """The new token ids of a generate() result: a sequence of ints or an object with .tokens.

    Anything else is the decoder breaking the protocol; a check then records it as a failure,
    it never guesses.
    """
    toks = getattr(result, "tokens", result)
    if hasattr(toks, "tolist"):  # a tensor or array
        toks = toks.tolist()
    if isinstance(toks, (str, bytes)) or not isinstance(toks, Sequence):
        raise LoopcertError(f"generate() returned {type(result).__name__!r}, not token ids or .tokens")
    out = []
    for t in toks:
        if not is_int(t):
            raise LoopcertError(f"generate() returned a non-integer token {t!r}")
        out.append(int(t))
    return out


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
        raise LoopcertError(f"--decoder {spec!r}: cannot import {module_name!r} ({e})") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise LoopcertError(f"--decoder {spec!r}: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise LoopcertError(f"--decoder {spec!r}: {attr!r} is not callable")
    return obj


def build_decoder(factory: Factory, model, spec: str) -> Decoder:
    return check_decoder(factory(model), f"--decoder {spec!r}")
