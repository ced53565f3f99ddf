"""A Decoder keeps its engines' KV caches under a byte limit (fastdec/kept.py).

- Engine.cache_bytes is what its tensors hold, and what kv_cache_bytes / Decoder.engine_bytes
  say before the engine is made (the numbers the limit and certify's memory check use).
- Tokens and logits are bitwise those of an unbounded decoder when a tiny limit drops an engine
  before every new one (greedy and sampled, every strategy, batches of varying sizes and
  capacities); the dropping is checked to happen (the control: an unbounded decoder keeps them).
- After every call the kept caches are within the limit, or are the engine in use alone; the
  least recently used engine goes first; a step hook decoding with the decoder never drops the
  engine in use; the default keeps every engine of a small model and, past its floor, the largest
  engine plus an eighth; held_bound bounds what any order of calls leaves kept.
- A bad cache_bytes is a LoopcertError naming it.
"""

import random

import pytest
import torch
from batching import CONFIGS, SAMPLINGS, model_for, same

import fastdec.kept as kept
from fastdec import Decoder
from fastdec.cache import kv_cache_bytes
from fastdec.decoder import capacity_for, rows_for
from fastdec.kept import AUTO_FLOOR, held_bound, limit_for, to_evict
from refdec import LoopcertError
from refdec.config import TINY_PRESETS

UNBOUNDED = 2**62

# (batch size, prompt length, new tokens): rows 8, 1, 4, 8, 2 and capacities 64 and 128
CALLS = [(5, 6, 5), (1, 3, 7), (3, 70, 4), (8, 6, 5), (2, 9, 3), (1, 70, 2), (5, 4, 6)]


def prompts(n: int, length: int, vocab: int, salt: int) -> list[list[int]]:
    return [[(salt + 3 * i + 5 * j) % vocab for j in range(length)] for i in range(n)]


def tensor_bytes(engine) -> int:
    return sum(
        t.numel() * t.element_size()
        for tl in engine.cache.timelines()
        for t in (tl.k, tl.v, tl.side_k, tl.side_v)
    )


@pytest.mark.parametrize(
    "name, strategy",
    [(n, s) for n in TINY_PRESETS for s in CONFIGS] + [("tiny-loopcoder", "autoregressive")],
)
def test_cache_bytes_are_counted_before_and_after(name, strategy):
    model = model_for(name, recurrence=2 if name == "tiny-loopcoder" else 4)
    for dtype in (torch.float32, torch.float64):
        dec = Decoder(model, CONFIGS[strategy], dtype=dtype)
        for n_positions, batch in ((10, 1), (100, 3), (20, 64)):
            key = (capacity_for(n_positions), rows_for(batch))
            before = dec.engine_bytes(*key)
            eng = dec.engine(n_positions, batch)
            assert eng.cache_bytes == before == tensor_bytes(eng) > 0
            c = dec.config
            n_readouts = len(eng.readout_depths)
            item = dtype.itemsize
            assert kv_cache_bytes(model.cfg, c.depth, n_readouts, key[0], c.n_side, item, key[1]) == before
        assert dec.held_bytes == sum(tensor_bytes(e) for e in dec._engines.values())


@pytest.mark.parametrize("strategy", list(CONFIGS))
@pytest.mark.parametrize("name", ["tiny-ouro", "tiny-raven"])
def test_tokens_do_not_depend_on_the_limit(name, strategy):
    model = model_for(name, recurrence=4)
    V = model.cfg.vocab_size
    free = Decoder(model, CONFIGS[strategy], cache_bytes=UNBOUNDED)
    tight = Decoder(model, CONFIGS[strategy], cache_bytes=0)  # keeps only the engine of the last call
    for k, (b, length, n) in enumerate(CALLS):
        ps = prompts(b, length, V, k)
        sps = [SAMPLINGS[(k + i) % len(SAMPLINGS)] for i in range(b)]  # greedy and sampled
        seeds = [1000 * k + i for i in range(b)]
        got = tight.generate_batch(ps, n, sps, seeds, keep_logits=True)
        want = free.generate_batch(ps, n, sps, seeds, keep_logits=True)
        assert all(same(g, w) for g, w in zip(got, want)), (k, b, length)
        assert list(tight._engines) == [(capacity_for(length + n), rows_for(b))]  # the others dropped
    # the control: the unbounded decoder kept every key, so the tight one dropped and remade engines
    keys = {(capacity_for(length + n), rows_for(b)) for b, length, n in CALLS}
    assert set(free._engines) == keys and len(keys) > 3
    assert free.held_bytes > tight.held_bytes


def test_kept_caches_stay_within_the_limit():
    model = model_for("tiny-raven", recurrence=4)
    dec = Decoder(model, CONFIGS["pipelined"])
    limit = 2 * dec.engine_bytes(64, 8) + dec.engine_bytes(128, 1)
    dec = Decoder(model, CONFIGS["pipelined"], cache_bytes=limit)
    V = model.cfg.vocab_size
    rng = random.Random(0)
    dropped = 0
    for k in range(30):
        b, length, n = rng.choice(CALLS)
        before = set(dec._engines)
        dec.generate_batch(prompts(b, length, V, k), n, SAMPLINGS[1], list(range(b)))
        key = (capacity_for(length + n), rows_for(b))
        dropped += len(before - set(dec._engines))
        assert dec.held_bytes <= limit or set(dec._engines) == {key}, (k, sorted(dec._engines))
        assert list(dec._engines)[-1] == key  # the engine just used is the most recent
    assert dropped > 0  # the limit was binding: engines were dropped (else this test shows nothing)


def test_the_least_recently_used_engine_goes_first():
    model = model_for("tiny-ouro", recurrence=4)
    dec = Decoder(model, "autoregressive")
    a, b, c = (dec.engine_bytes(64, r) for r in (1, 2, 4))
    dec = Decoder(model, "autoregressive", cache_bytes=a + b + c - 1)  # room for two of them only
    e1, e2 = dec.engine(10, 1), dec.engine(10, 2)
    assert dec.engine(10, 1) is e1  # kept, and now more recent than e2
    dec.engine(10, 4)
    assert set(dec._engines) == {(64, 1), (64, 4)} and dec._engines[(64, 1)] is e1
    assert (64, 2) not in dec._prefills  # its prefill memo goes with it
    assert dec.engine(10, 2) is not e2  # remade
    # the pure rule: oldest first, skipping pinned ones, until the rest and the new one fit
    assert to_evict({"x": 5, "y": 3, "z": 2}, 4, 10) == ["x"]
    assert to_evict({"x": 5, "y": 3, "z": 2}, 4, 10, pinned={"x"}) == ["y", "z"]
    assert to_evict({"x": 5, "y": 3}, 20, 10) == ["x", "y"]
    assert to_evict({"x": 5, "y": 3}, 20, None) == []


def test_a_step_hook_decoding_with_the_decoder_never_drops_the_engine_in_use():
    model = model_for("tiny-ouro", recurrence=4)
    dec = Decoder(model, "autoregressive", cache_bytes=0)
    V = model.cfg.vocab_size
    seen = []

    def hook(engine, lanes, lengths):
        if not seen:
            seen.append(engine)
            dec._step_hook = None
            dec.generate([1, 2, 3], 2)  # another key (rows 1): must not drop the batch's engine
            dec._step_hook = hook
            assert dec._engines.get((64, 4)) is engine

    dec._step_hook = hook
    dec.generate_batch(prompts(3, 4, V, 0), 3, SAMPLINGS[0], [0, 1, 2])
    assert seen and (64, 4) in dec._engines


def test_the_default_keeps_small_engines_and_bounds_large_ones(monkeypatch):
    model = model_for("tiny-raven", recurrence=4)
    dec = Decoder(model, CONFIGS["draft-verify"])
    assert dec.cache_bytes is None and dec.cache_limit == AUTO_FLOOR
    for b, length, n in CALLS:
        dec.generate_batch(prompts(b, length, 13, 1), n, SAMPLINGS[0], list(range(b)))
    assert set(dec._engines) == {(capacity_for(p + n), rows_for(b)) for b, p, n in CALLS}  # as before
    assert limit_for(None, True, 10**12) is None  # CUDA graphs: no limit
    monkeypatch.setattr(kept, "AUTO_FLOOR", 0)  # a large model: past the floor
    dec = Decoder(model, CONFIGS["draft-verify"])
    e = dec.engine_bytes(64, 1)
    assert dec.engine_bytes(64, 8) == 8 * e  # a cache is linear in its rows
    dec.engine(10, 8)
    dec.engine(10, 1)  # 9e fits the largest (8e) plus an eighth
    assert set(dec._engines) == {(64, 8), (64, 1)} and dec.cache_limit == 9 * e
    dec.engine(10, 4)  # 13e does not: the 8-row engine, least recently used, goes
    assert set(dec._engines) == {(64, 1), (64, 4)} and dec.held_bytes == 5 * e


@pytest.mark.parametrize("setting", [None, 0, "small"])
def test_held_bound_bounds_any_order_of_calls(setting, monkeypatch):
    monkeypatch.setattr(kept, "AUTO_FLOOR", 0)
    model = model_for("tiny-ouro", recurrence=4)
    probe = Decoder(model, CONFIGS["pipelined"])
    keys = [(c, r) for c in (64, 128) for r in (1, 2, 4, 8, 16, 32, 64)]
    sizes = [probe.engine_bytes(*k) for k in keys]
    cache_bytes = sizes[-1] // 3 if setting == "small" else setting
    bound = held_bound(cache_bytes, False, sizes)
    assert bound < sum(sizes)  # not vacuous: an unbounded decoder can hold more
    rng = random.Random(7)
    dec = Decoder(model, CONFIGS["pipelined"], cache_bytes=cache_bytes)
    most = 0
    for _ in range(60):
        c, r = rng.choice(keys)
        dec.engine(c, r)
        most = max(most, dec.held_bytes)
    assert most <= bound


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1G", float("inf")])
def test_bad_cache_bytes_is_named(bad):
    with pytest.raises(LoopcertError, match=r"cache_bytes must be None .* got " + repr(bad)[:3]):
        Decoder(model_for("tiny-ouro", recurrence=4), "autoregressive", cache_bytes=bad)


def test_a_dropped_engine_is_freed_at_once(monkeypatch):
    """Its memory goes back when it is dropped, not at the cycle collector's next pass (an Engine
    refers to itself); the control, below COLLECT_BYTES with the collector off, stays alive."""
    import gc
    import weakref

    import fastdec.decoder as decoder_module

    model = model_for("tiny-ouro", recurrence=4)
    gc.disable()
    try:
        for collect, freed in ((0, True), (2**62, False)):
            monkeypatch.setattr(decoder_module, "COLLECT_BYTES", collect)
            dec = Decoder(model, "autoregressive", cache_bytes=0)
            old = weakref.ref(dec.engine(10, 2))
            dec.engine(10, 1)
            assert (old() is None) is freed
    finally:
        gc.enable()
