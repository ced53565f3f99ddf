"""Which engines a fastdec.Decoder keeps: a byte limit on their KV caches (docs/scale.md).

A Decoder makes one Engine per (capacity, rows) key and, unbounded, keeps each for its life: a
decoder fed batches of 64, 32, 16, 5 and 1 rows holds caches of 64 + 32 + 16 + 8 + 1 rows. At a
real model's shape one 64-row engine is gigabytes (24 layers x 4 levels x 4 KV heads x 65
positions x 128 dims x 64 rows, K and V, float32: 1.6 GB), and certify keeps one decoder per
setting alive through its run. So a Decoder keeps engines under a byte limit: making an engine
that would take the kept caches past it first drops whole least-recently-used engines (with their
prefill memos), never one in use. Decoded tokens do not change: a fresh engine's cache is zeros,
and nothing a sequence reads depends on what a cache held before (the cache INVARIANT,
fastdec/cache.py); a dropped engine costs only its remaking (allocation, and CUDA graphs).

The default (`cache_bytes=None`):

    CUDA graphs   no limit: an engine's graphs are captured once per shape and width, and
                  recapturing them costs far more than the caches' memory on a GPU
    otherwise     keep engines while their sum stays within the largest engine made so far plus
                  an eighth of it, and at least AUTO_FLOOR: a small model (the tiny presets, the
                  default model: tens of MB at 64 rows) keeps every engine, as before, so nothing
                  is remade in benchmarks and tests; a large one keeps its biggest batch engine
                  and small companions (the 1-row engine of generate(), an 8-row tail of a
                  64-row batch), and pays one allocation (a memset of the cache, small beside
                  decoding a batch in it) when a mid-size batch displaces the big one. A larger
                  slack would save few of those and cost as much memory in every decoder certify
                  keeps (its memory check counts this bound: proofs/cost/kv_need.py).

A Decoder then holds at most `held_bound` of the sizes of the engines it can make: what
certify's memory check counts (proofs/cost/kv_need.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from refdec.errors import LoopcertError
from refdec.validate import is_int

AUTO_FLOOR = 1 << 30  # bytes of caches a default CPU decoder always may keep
AUTO_SLACK = 8  # ... beyond its largest engine: 1/AUTO_SLACK of it


def check_cache_bytes(value) -> int | None:
    """Decoder's `cache_bytes`: None (the default policy) or an int >= 0 of bytes."""
    if value is None:
        return None
    if not is_int(value, 0):
        raise LoopcertError(
            f"cache_bytes must be None (the default policy) or an integer >= 0 of bytes, got {value!r}"
        )
    return int(value)


def limit_for(cache_bytes: int | None, cuda_graphs: bool, largest: int) -> int | None:
    """The byte limit in force (None: none) given the setting and the largest engine made."""
    if cache_bytes is not None:
        return cache_bytes
    if cuda_graphs:
        return None
    return max(AUTO_FLOOR, largest + largest // AUTO_SLACK)


def to_evict(kept: Mapping, new: int, limit: int | None, pinned: Iterable = ()) -> list:
    """Keys of `kept` ({key: bytes}, least recently used first) to drop, in order, before an
    engine of `new` bytes is made: the oldest first until the rest and the new one fit the limit
    (or only pinned engines are left)."""
    if limit is None:
        return []
    pinned = set(pinned)
    held = sum(kept.values())
    out = []
    for key, size in kept.items():
        if held + new <= limit:
            break
        if key in pinned:
            continue
        out.append(key)
        held -= size
    return out


def held_bound(cache_bytes: int | None, cuda_graphs: bool, sizes: Iterable[int]) -> int:
    """The most bytes of caches a Decoder holds when every engine it makes has one of `sizes`
    (one per key it can make), with nothing pinned across calls: never more than all of them, and
    after making an engine either within the limit or that engine alone (`to_evict`); the default
    limit grows with the largest engine made, so its bound is the limit for the largest size."""
    sizes = list(sizes)
    total, largest = sum(sizes), max(sizes, default=0)
    limit = limit_for(cache_bytes, cuda_graphs, largest)
    return total if limit is None else min(total, max(limit, largest))
