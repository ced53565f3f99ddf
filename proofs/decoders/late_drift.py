"""A negative control of the per-position test (proofs/checks/positions.py): a decoder lossless up
to a position it does not declare, then sampling at a slightly wrong temperature.

Tokens at positions before `position` (0-based in prompt + continuation) are drawn by the wrapped
decoder with the asked SamplingParams, so their law is exact; from `position` on the wrapped decoder
continues the same sequence at `temperature_factor` times the temperature, from a seed of its own.
Greedy (temperature 0) stays greedy, and the first few tokens after a short prompt are exact: the
greedy check and the 3-token sampling cases cannot see it. Only a test that reads every position
of long samples can (docs/certify.md, "The per-position test"). It is what bugs at boundaries
look like from outside: a window that wraps, a cache page that fills, at a position nobody declared.

    loopcert certify --decoder proofs.decoders.late_drift:make     # must FAIL on positions[...]

The drift family (`family`): the wrongs a decoder can turn to past a position, each exact before it,
each with the quick plan's power to reject it stated in docs/certify.md, and their lossless twins:
- a temperature 1.15x or 0.9x the asked one (`temperature_factor`);
- a nucleus loosened (`top_p_add`: top_p + 0.05), so tokens outside the asked one come up;
- penalties that forget the output before the position (`declare_sampling`: the second part is a
  new request whose prompt holds the first part, so frequency and presence count only the tokens
  generated after it: a continuation resubmitted as a prompt);
- the twin: the same two parts, nothing changed (lossless for every law without penalties).
"""

from __future__ import annotations

from dataclasses import replace

from proofs.decoder_attributes import (
    declared_compute_dtype,
    declared_max_batch,
    declared_sampler_order,
    declared_sampling,
)
from proofs.decoders.protocol import tokens_of
from refdec.sampling import ENGINE_FIELDS, SamplingParams

POSITION = 200  # not a power of two, no window of the default model: a boundary nobody declared
TEMPERATURE_FACTOR = 1.3
EXACT_TOKENS = 40  # the family's decoders are exact for this many generated tokens
SEED_OFFSET = 2**62  # the drifted part's seed: apart from every seed of the exact part


class LateDrift:
    """`inner` (a BatchDecoder: fastdec.Decoder) exact before `position`, hotter from it on."""

    batch_queue = True

    def __init__(
        self,
        inner,
        position: int = POSITION,
        temperature_factor: float = TEMPERATURE_FACTOR,
        top_p_add: float = 0.0,
        declare_sampling: bool = False,
    ):
        self.inner, self.position, self.temperature_factor = inner, int(position), float(temperature_factor)
        self.top_p_add = float(top_p_add)
        self.sampler_order = declared_sampler_order(inner)
        self.max_batch = declared_max_batch(inner)
        self.compute_dtype = declared_compute_dtype(inner)
        if declare_sampling:  # the engines' other parameters, as the inner decoder honours them
            got = declared_sampling(inner)  # fastdec declares nothing: it honours every one
            self.sampling_fields = tuple(sorted(got.fields)) or ENGINE_FIELDS
            self.min_p_order, self.penalty_scope = got.min_p_order, got.penalty_scope
            self.penalty_window, self.penalty_sign = got.penalty_window, got.penalty_sign

    def drifted(self, sampling: SamplingParams) -> SamplingParams:
        top_p = sampling.top_p
        if top_p is not None and self.top_p_add:
            top_p = min(1.0, top_p + self.top_p_add)
        return replace(sampling, temperature=sampling.temperature * self.temperature_factor, top_p=top_p)

    def generate(self, prompt, max_new_tokens: int, sampling: SamplingParams, seed: int) -> list[int]:
        return self.generate_batch([prompt], max_new_tokens, sampling, [seed])[0]

    def generate_batch(
        self, prompts, max_new_tokens: int, sampling: SamplingParams, seeds
    ) -> list[list[int]]:
        prompts, seeds = [list(p) for p in prompts], list(seeds)
        exact = [min(max_new_tokens, max(0, self.position - len(p))) for p in prompts]
        out: list[list[int]] = [[] for _ in prompts]
        first = [i for i, k in enumerate(exact) if k > 0]
        if first:
            got = self.inner.generate_batch(
                [prompts[i] for i in first], [exact[i] for i in first], sampling, [seeds[i] for i in first]
            )
            for i, r in zip(first, got, strict=True):
                out[i] = list(tokens_of(r))
        rest = [i for i, k in enumerate(exact) if k < max_new_tokens]
        if rest:
            got = self.inner.generate_batch(
                [prompts[i] + out[i] for i in rest],
                [max_new_tokens - exact[i] for i in rest],
                self.drifted(sampling),
                [(seeds[i] + SEED_OFFSET) % 2**64 for i in rest],
            )
            for i, r in zip(rest, got, strict=True):
                out[i] += list(tokens_of(r))
        return out


def make(model, position: int = POSITION, temperature_factor: float = TEMPERATURE_FACTOR) -> LateDrift:
    """The control over fastdec's pipelined strategy at its default depths (a --decoder factory)."""
    from fastdec import Decoder  # fastdec is optional for user decoders
    from fastdec.config import DecodeConfig
    from speed.settings import default_depths

    d1, d2 = default_depths(model.cfg.recurrence)
    p = next(model.parameters())
    inner = Decoder(
        model, DecodeConfig("pipelined", draft_depth=d1, second_depth=d2), device=p.device, dtype=p.dtype
    )
    return LateDrift(inner, position, temperature_factor)


def family(inner, prompt_len: int) -> dict[str, LateDrift]:
    """The drift family over `inner` for prompts of prompt_len tokens, exact for EXACT_TOKENS tokens:
    name -> decoder. The lossy ones must fail the quick plan; "twin" must pass it."""
    at = prompt_len + EXACT_TOKENS
    return {
        "1.15x temperature": LateDrift(inner, at, 1.15),
        "0.9x temperature": LateDrift(inner, at, 0.9),
        "top-p loosened": LateDrift(inner, at, 1.0, top_p_add=0.05),
        "penalties forget the output": LateDrift(inner, at, 1.0, declare_sampling=True),
        "twin": LateDrift(inner, at, 1.0),
    }
