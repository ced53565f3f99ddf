"""What gets certified: named decoder settings, each a recipe `build(model) -> decoder`.

By default the candidate is fastdec with each strategy and a grid of fastdec.DecodeConfig
settings whose depths scale with the model's R (docs/design.md section 6; the defaults are
fastdec.config's); `--decoder module:factory` makes it one user decoder. A Candidate with
`fixed_width` can also be built in fastdec's fixed-width mode for the bitwise check
(docs/design.md section 5).
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from fastdec.config import DecodeConfig
from proofs.decoder_attributes import (
    SamplingSupport,
    bound_model,
    declared_sampler_order,
    declared_sampling,
    has_generate,
)
from proofs.decoders.protocol import (
    Decoder,
    Factory,
    NotADecoder,
    NotApplicable,
    build_decoder,
    check_factory,
    load_factory,
)
from refdec.errors import LoopcertError
from speed.settings import fastdec_configs  # the settings certify samples and bench times


@dataclass(frozen=True)
class Candidate:
    label: str
    build: Callable[..., Decoder]  # (model) -> decoder; fastdec recipes also take fixed_width=W
    settings: dict = field(default_factory=dict)
    lossless: bool = True  # False: must be REJECTED (a mutant), see proofs/checks/mutation.py
    fixed_width: bool = False  # build(model, fixed_width=W) is supported
    # True: the decoder serves only the certified checkpoint (a server): it is sampled on that
    # model, and runs on other models are "not applicable"
    own_model: bool = False
    # the sampler convention its decoders declare, when known without building one (a factory or
    # class declaring `sampler_order`, the HTTP decoder); None: read from a built decoder
    sampler_order: str | None = None
    # which of the engines' other sampling parameters its decoders honour, and how, when known
    # without building one (proofs.decoder_attributes.declared_sampling); None: read from a built decoder
    sampling: SamplingSupport | None = None
    # what its spec was given beside it (an http:// spec's HTTPOptions): a worker in another
    # process tree rebuilds it from the spec and these (proofs/run/remote.py)
    options: Any = None
    # True: a user's Python decoder (a factory, an object), whose generate() is asked for one token
    # before any check (proofs.decoders.protocol.probe_generate); loopcert's engines are not
    probe: bool = False


def fastdec_candidate(config: DecodeConfig, lossless: bool = True, compile: bool = False) -> Candidate:
    """fastdec with `config`; compile: its engine steps compiled (fastdec/compiled.py), the label
    saying so."""

    def build(model, fixed_width=None):
        from fastdec import Decoder as FastDecoder  # fastdec is optional for user decoders

        p = next(model.parameters())  # the decoder runs where the model is, in its dtype
        return FastDecoder(
            model, config, fixed_width=fixed_width, device=p.device, dtype=p.dtype, compile=compile
        )

    defaults = DecodeConfig(config.strategy)
    given = {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(config)
        if f.name == "strategy" or getattr(config, f.name) != getattr(defaults, f.name)
    }
    label = f"{config.label} compiled" if compile else config.label
    settings = {"decoder": "fastdec", **given, **({"compile": True} if compile else {})}
    return Candidate(label, build, settings, lossless, fixed_width=True)


def fastdec_grid(R: int, full: bool, compile: bool = False) -> list[Candidate]:
    """Each lossless strategy at the default depths; --full adds the unusual lossless settings;
    compile: each with compiled engine steps."""
    return [fastdec_candidate(c, compile=compile) for c in fastdec_configs(R, full)]


class DecoderFactoryError(Exception):
    """A decoder factory (`--decoder module:factory`) raised something other than NotApplicable
    (or returned an object without generate()): the message names the model and the exception.
    The greedy check lists it as its own run, failed (proofs/checks/greedy.py float64_runs); every
    other check that builds the decoder fails with it."""


def factory_failure(model: str, error: BaseException) -> str:
    """The one wording of a factory failure, e.g. "the decoder factory failed on tiny-raven:
    ValueError: no weights"."""
    return f"the decoder factory failed on {model}: {type(error).__name__}: {error}"


def build_or_failure(candidate: Candidate, model, model_name: str):
    """candidate.build(model), or the DecoderFactoryError naming how its factory failed on
    `model_name` (a factory that breaks is that run's finding, not a crash). NotApplicable passes
    through: the caller decides whether declining that model is allowed."""
    try:
        return candidate.build(model)
    except NotApplicable:
        raise
    except Exception as e:  # noqa: BLE001 - the finding
        return (
            e if isinstance(e, DecoderFactoryError) else DecoderFactoryError(factory_failure(model_name, e))
        )


def user_candidate(spec: str, connect: bool = True, http=None) -> Candidate:
    """The one place a --decoder (or --relative-to) spec becomes decoders: module:factory;
    http://HOST:PORT/v1 (proofs/decoders/http_decoder.py; with connect=False the server is reached
    only when a decoder is built); mlx-lm[:KEY=VALUE,...] (proofs/decoders/mlx_spec.py);
    llama.cpp[:KEY=VALUE,...] (proofs/decoders/llamacpp_spec.py); openvino[:KEY=VALUE,...]
    (proofs/decoders/openvino_spec.py). `http`: an http:// spec's HTTPOptions (None: the defaults);
    with any other spec, a LoopcertError. A bad spec is a LoopcertError naming it, before any check."""
    from proofs.decoders.http_decoder import HTTPDecoder, http_factory, is_http_spec
    from proofs.decoders.llamacpp_spec import is_llamacpp_spec
    from proofs.decoders.mlx_spec import is_mlx_spec
    from proofs.decoders.openvino_spec import is_openvino_spec, parse_openvino_spec

    if http is not None and not is_http_spec(spec):
        raise LoopcertError(f"HTTP options are for an http:// decoder, not {spec!r}")
    if is_http_spec(spec):
        return Candidate(
            spec,
            http_factory(spec, connect, http),
            {"decoder": spec},
            own_model=True,
            sampler_order=declared_sampler_order(HTTPDecoder),
            options=http,
        )
    if is_mlx_spec(spec):
        from proofs.decoders.mlx_decoder import MLXDecoder, mlx_factory

        return Candidate(
            spec,
            mlx_factory(spec),
            {"decoder": spec},
            sampler_order=declared_sampler_order(MLXDecoder),
            sampling=declared_sampling(MLXDecoder, only_if_declared=True),
        )
    if is_llamacpp_spec(spec):
        from proofs.decoders.llamacpp_decoder import LlamaCppDecoder, llamacpp_factory

        return Candidate(
            spec,
            llamacpp_factory(spec),
            {"decoder": spec},
            sampler_order=declared_sampler_order(LlamaCppDecoder),
            sampling=declared_sampling(LlamaCppDecoder, only_if_declared=True),
        )
    if is_openvino_spec(spec):
        from proofs.decoders.openvino_decoder import OpenVINODecoder, openvino_factory

        return Candidate(
            spec,
            openvino_factory(spec),
            parse_openvino_spec(spec).settings(),
            sampler_order=declared_sampler_order(OpenVINODecoder),
            sampling=declared_sampling(OpenVINODecoder, only_if_declared=True),
        )
    return factory_candidate(load_factory(spec), spec)


def factory_candidate(factory: Factory, label: str) -> Candidate:
    """A factory `make(model) -> decoder` (imported from a --decoder spec, or handed to
    certify() from Python) as a candidate called `label`."""

    check_factory(factory, label)

    def build(model):
        try:
            return build_decoder(factory, model, label)
        except (NotApplicable, NotADecoder):
            raise
        except Exception as e:  # noqa: BLE001 - named as the factory's, never as the decoder's output
            raise DecoderFactoryError(factory_failure(model.cfg.name, e)) from e

    # a factory (a class, a function) may declare its decoders' convention; else a built one says
    declared = declared_sampler_order(factory, only_if_declared=True)
    sampling = declared_sampling(factory, only_if_declared=True)
    return Candidate(label, build, {"decoder": label}, sampler_order=declared, sampling=sampling, probe=True)


def python_candidate(decoder, label: str | None = None) -> Candidate:
    """What certify() takes from Python besides a spec: a decoder object (anything with generate())
    or a factory (a callable `make(model) -> decoder`, a class included), called `label` or by
    its qualified name. A LoopcertError names anything else."""
    if label is not None and (not isinstance(label, str) or not label.strip()):
        raise LoopcertError(f"label must be a non-empty string, got {label!r}")
    if not isinstance(decoder, type) and has_generate(decoder):
        return object_candidate(decoder, label or qualified_name(type(decoder)))
    if callable(decoder):
        return factory_candidate(decoder, label or qualified_name(decoder))
    raise LoopcertError(
        f"decoder must be a spec string, a decoder (an object with generate()) or a factory "
        f"(model -> decoder), got {type(decoder).__name__!r}"
    )


def qualified_name(obj) -> str:
    """module.QualName of a class or function (what a certificate calls a Python decoder)."""
    module = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__qualname__
    return f"{module}.{name}" if module and module != "builtins" else name


def object_candidate(decoder: Decoder, label: str) -> Candidate:
    """A decoder object, bound to the model it was built for: built on a copy of that model (any
    dtype: the same weights at the decoder's own precision) it is itself; on any other model it
    is not applicable (NotApplicable: certify's check_applies makes that a usage error for the
    certified model, the presets' runs are "not applicable" as a server's are). The model it was
    built for is its `model` attribute (fastdec.Decoder's); one without it is taken as built for
    whatever it is handed, and the checks judge its tokens. Its declarations are its own."""
    bound = bound_model(decoder)
    verdicts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # handed model -> same weights

    def build(model):
        if bound is not None:
            if model not in verdicts:
                verdicts[model] = same_weights(model, bound)
            if not verdicts[model]:
                raise NotApplicable(f"{label} was built for another model ({bound.cfg.name})")
        return decoder

    return Candidate(
        label,
        build,
        {"decoder": label},
        own_model=True,
        sampler_order=declared_sampler_order(decoder),
        sampling=declared_sampling(decoder),
        probe=True,
    )


def same_weights(model: torch.nn.Module, bound: torch.nn.Module) -> bool:
    """Whether `model` is a copy of `bound`: the same config and every parameter equal once cast
    to `bound`'s dtype (a float64 copy of float32 weights casts back exactly; so does any copy of
    the same checkpoint to a narrower dtype)."""
    if model is bound:
        return True
    if model.cfg != bound.cfg:
        return False
    theirs = dict(bound.named_parameters())
    mine = dict(model.named_parameters())
    if mine.keys() != theirs.keys():
        return False
    with torch.no_grad():
        return all(
            mine[k].shape == t.shape and torch.equal(mine[k].detach().to("cpu", t.dtype), t.detach().cpu())
            for k, t in theirs.items()
        )
