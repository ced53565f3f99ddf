"""What a built decoder declares, as plain data: its sampler convention, the engines' sampling
parameters it honours, the boundaries it names and its speculation widths, or why its factory
gave none. Read once where the decoder is built (a probe process when certify forks workers:
proofs/run/probe.py), it answers proofs.boundaries.collect and the run's questions as the decoder
itself would (the attributes have the protocol's names: proofs/decoders/protocol.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proofs.decoder_attributes import (
    SamplingSupport,
    close_decoder,
    declared_compute_dtype,
    declared_max_batch,
    declared_pairs,
    declared_sampler_order,
    declared_sampling,
    server_of,
    speculation_widths,
)
from proofs.decoders.candidates import DecoderFactoryError
from proofs.decoders.protocol import NotApplicable, probe_generate
from refdec.sampling import TEMPERATURE_FIRST


@dataclass(frozen=True)
class Declared:
    sampler_order: str = TEMPERATURE_FIRST
    sampling: SamplingSupport = SamplingSupport()
    boundaries: tuple[tuple[int, str], ...] = ()  # (position, what): protocol's `boundaries`
    server_boundaries: tuple[int, ...] = ()  # an HTTP decoder's --boundaries
    speculation_widths: tuple[int, ...] = ()
    not_applicable: str | None = None  # the factory declined the model (NotApplicable's message)
    factory_error: str | None = None  # the factory failed otherwise: the checks that build it say so

    @property
    def built(self) -> bool:
        return self.not_applicable is None and self.factory_error is None


def declared_by(build: Callable, model, probe: str | None = None) -> Declared:
    """Build a decoder with `build(model)` and read what it declares. A factory that declines the
    model, or a `module:factory` that fails (DecoderFactoryError: the checks that build it report
    it as the decoder's failure), is said in the result; anything else raises, as building it
    raises (a server of another model, a factory that returns no decoder, a bad declaration:
    usage errors). Every declaration is read, so that a wrong one stops the run here; with
    `probe` (the decoder's name: a user's Python decoder) its generate() is asked for one token
    too (proofs.decoders.protocol.probe_generate)."""
    try:
        decoder = build(model)
    except NotApplicable as e:
        return Declared(not_applicable=str(e) or "declined by the factory")
    except DecoderFactoryError as e:
        return Declared(factory_error=str(e))
    try:
        declared_max_batch(decoder)
        declared_compute_dtype(decoder)
        if probe is not None:
            probe_generate(decoder, probe)
        return Declared(
            declared_sampler_order(decoder),
            declared_sampling(decoder),
            tuple(declared_pairs(decoder)),
            tuple(server_of(decoder)),
            tuple(speculation_widths(decoder)),
        )
    finally:
        close_decoder(decoder)  # an HTTP decoder's connections
