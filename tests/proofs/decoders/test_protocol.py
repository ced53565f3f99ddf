"""The decoder protocols: which decoders are BatchDecoders, what their optional attributes say,
and that the callers (draw, the serve scheduler) follow them."""

from __future__ import annotations

import pytest
import torch

import fastdec
import refdec
from loopcert.serve.scheduler import Scheduler
from proofs.decoder_attributes import (
    batch_call_limit,
    declared_compute_dtype,
    declared_max_batch,
    declared_sampler_order,
)
from proofs.decoders.draw import draw
from proofs.decoders.http_decoder import HTTPDecoder
from proofs.decoders.protocol import BatchDecoder, Decoder
from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams

T1 = SamplingParams(temperature=1.0)


class GenerateOnly:
    """The certify protocol's minimum: generate and nothing else."""

    def generate(self, prompt, max_new_tokens, sampling, seed):
        return [seed % 5] * max_new_tokens


class Batched(GenerateOnly):
    """A user's batch decoder; records the size of every generate_batch call."""

    def __init__(self, max_batch=None, batch_queue=False):
        self.calls: list[int] = []
        if max_batch is not None:
            self.max_batch = max_batch
        self.batch_queue = batch_queue

    def generate_batch(self, prompts, max_new_tokens, sampling, seeds):
        self.calls.append(len(seeds))
        return [self.generate(p, max_new_tokens, sampling, s) for p, s in zip(prompts, seeds)]


def test_which_decoders_are_batch_decoders():
    fast = fastdec.Decoder(refdec.load_model("tiny-ouro"), max_batch=4)
    http = object.__new__(HTTPDecoder)  # no server: the protocol is the class's methods
    plain = GenerateOnly()
    assert isinstance(fast, BatchDecoder) and isinstance(http, BatchDecoder)
    assert isinstance(Batched(), BatchDecoder)
    assert isinstance(plain, Decoder) and not isinstance(plain, BatchDecoder)
    assert not isinstance(object(), Decoder)
    # fastdec queues what exceeds its rows, so a call may hold any number; it computes in its dtype
    assert declared_max_batch(fast) == 4 and batch_call_limit(fast) is None
    assert fast.compute_dtype == fast.dtype == torch.float32
    assert declared_max_batch(http) is None and batch_call_limit(http) is None


def test_optional_attributes_bound_the_calls():
    assert batch_call_limit(Batched(max_batch=3)) == 3
    for wrong in (0, -2, "8", 2.5, True):  # a wrong declaration is named, never ignored
        with pytest.raises(LoopcertError, match="max_batch must be an int >= 1"):
            declared_max_batch(Batched(max_batch=wrong))
    assert declared_max_batch(Batched(max_batch=None)) is None  # None: not declared
    capped = Batched(max_batch=3)
    got = draw(capped, [1, 2], 2, T1, base_seed=10, n_samples=8)
    assert got.batched and got.samples == [[s % 5] * 2 for s in range(10, 18)]
    assert max(capped.calls) == 3 and sum(capped.calls) == 8
    queued = Batched(max_batch=3, batch_queue=True)  # control: a queueing decoder gets bigger calls
    draw(queued, [1, 2], 2, T1, base_seed=10, n_samples=8)
    assert queued.calls == [8]


def test_a_declared_compute_dtype_is_read_by_name_or_dtype():
    fast = fastdec.Decoder(refdec.load_model("tiny-ouro", dtype="float64"), dtype="float32")
    assert declared_compute_dtype(fast) is torch.float32  # what it computes in, not what it was handed
    for declared, want in (
        ("bfloat16", torch.bfloat16),
        ("torch.float16", torch.float16),
        (torch.float64, torch.float64),
    ):
        plain = GenerateOnly()
        plain.compute_dtype = declared
        assert declared_compute_dtype(plain) is want
    for wrong in ("float99", "nn", 16, torch.int64):  # a wrong declaration is named, never ignored
        plain = GenerateOnly()
        plain.compute_dtype = wrong
        with pytest.raises(LoopcertError, match="compute_dtype must be a floating torch.dtype"):
            declared_compute_dtype(plain)
    assert declared_compute_dtype(GenerateOnly()) is None


def test_a_declared_sampler_order_is_read_and_a_bad_one_named():
    plain = GenerateOnly()
    assert declared_sampler_order(plain) == "temperature-first"  # absent: the default
    plain.sampler_order = None
    assert declared_sampler_order(plain) == "temperature-first"
    plain.sampler_order = "filters-first"
    assert declared_sampler_order(plain) == "filters-first"

    class Declared(GenerateOnly):  # a class (a factory) declares it for its decoders
        sampler_order = "filters-first"

    assert declared_sampler_order(Declared) == declared_sampler_order(Declared()) == "filters-first"
    for bad in ("mlx", "Filters-First", 2):
        plain.sampler_order = bad
        with pytest.raises(LoopcertError, match=f"GenerateOnly.sampler_order .*{bad!r}"):
            declared_sampler_order(plain)
    http = object.__new__(HTTPDecoder)  # every HTTP dialect samples temperature-first
    assert declared_sampler_order(http) == declared_sampler_order(HTTPDecoder) == "temperature-first"
    mlx_like = SamplingParams(1.0, top_p=0.5, order="filters-first")
    with pytest.raises(LoopcertError, match="order 'filters-first'.*temperature-first"):
        http.generate([1, 2], 2, mlx_like, 0)
    with pytest.raises(LoopcertError, match="order 'filters-first'"):
        http.generate_batch([[1, 2]], 2, mlx_like, [0])


def test_a_generate_only_decoder_is_called_once_per_seed():
    got = draw(GenerateOnly(), [1, 2], 3, T1, base_seed=0, n_samples=4)
    assert not got.batched and got.samples == [[s % 5] * 3 for s in range(4)]


def test_the_scheduler_joins_by_protocol():
    assert Scheduler(GenerateOnly()).join == "sequence"
    batched = Scheduler(Batched(max_batch=3), max_batch=8)
    assert batched.join == "round" and batched.max_batch == 3  # never more than the decoder holds
    assert Scheduler(Batched(), max_batch=8).max_batch == 8


def test_a_seeded_decoder_without_its_decode_cannot_be_built():
    from proofs.decoders.protocol import SeededDecoder

    class NoDecode(SeededDecoder):
        pass

    with pytest.raises(TypeError, match="abstract"):
        NoDecode()
