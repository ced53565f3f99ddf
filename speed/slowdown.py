"""A decoder made slower on purpose: the negative control of the speed gates (test-only).

`slow(decoder, fraction)` makes every engine step of a fastdec Decoder cost (1 + fraction) times
what it costs: before each step it spins for `fraction` times the process time since the end of
the previous step (one step's engine call and host work). Spinning, not sleeping: the gates'
clock on a CPU is process time. The first step of each generate() call has no previous step to
measure and is not slowed. Nothing but the time changes: tokens, counts and seeds are the same,
so a gate must fail on speed figures only. Through fastdec's step hook (`Decoder._step_hook`,
fastdec/batch.py: called before every engine step).
"""

from __future__ import annotations

import time

from fastdec import Decoder
from refdec.errors import LoopcertError


class _Spin:
    def __init__(self, fraction: float):
        self.fraction, self.last, self.steps = fraction, None, 0

    def __call__(self, engine, lanes, lengths) -> None:
        now = time.process_time()
        if self.last is not None:
            end = now + self.fraction * (now - self.last)
            while time.process_time() < end:
                pass
            self.steps += 1
        self.last = time.process_time()


def slow(decoder: Decoder, fraction: float) -> Decoder:
    """`decoder`, every step after a generate() call's first made (1 + fraction) times as dear."""
    if not isinstance(decoder, Decoder):
        raise LoopcertError(f"only a fastdec Decoder can be slowed, got {type(decoder).__name__}")
    if not 0 < fraction <= 10:
        raise LoopcertError(f"the slowdown fraction must be in (0, 10], got {fraction}")
    spin = _Spin(fraction)
    generate = decoder.generate

    def slowed_generate(*args, **kwargs):
        spin.last = None  # the time since the previous call is not a step of this one
        return generate(*args, **kwargs)

    decoder._step_hook = spin
    decoder.generate = slowed_generate
    decoder.slowdown = spin  # tests read spin.steps
    return decoder
