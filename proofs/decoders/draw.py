"""Draw N samples of one case from a decoder, batched when it can, within a deadline.

A BatchDecoder (proofs.decoders.protocol: fastdec.Decoder, HTTPDecoder, a user's) is called on
chunks of seeds through `generate_batch`, each chunk sized from the time the last one took (and
at most what one call may hold); otherwise `generate` is called once per seed. Sample i always uses
seed base + i, so the samples do not depend on the chunking; a deadline only stops the draw
early (what was reached is then reported, and the caller judges its power).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from proofs.decoder_attributes import batch_call_limit
from proofs.decoders.protocol import BatchDecoder, Decoder, Refused, run_generate, tokens_of
from refdec.sampling import SamplingParams

FIRST_CHUNK = 64  # seeds of the first generate_batch call
MAX_CHUNK = 4096
CHUNK_SECONDS = 5.0  # later chunks aim at about this long


@dataclass
class Draw:
    samples: list[list[int]]
    seconds: float
    batched: bool  # generate_batch was used
    error: str | None = None  # the decoder failed (sampling stopped there)
    stopped_by_deadline: bool = False
    refused: str | None = None  # its engine refused the parameters on the first call (protocol.Refused)

    @property
    def samples_per_s(self) -> float:
        return len(self.samples) / self.seconds if self.seconds > 0 else float("inf")


def draw(
    decoder: Decoder,
    prompt: Sequence[int],
    n_tokens: int,
    sampling: SamplingParams,
    base_seed: int,
    n_samples: int,
    deadline: float | Callable[[int, float], float] | None = None,
    max_rows: int | None = None,
    fails: Callable[[list[int]], bool] | None = None,
) -> Draw:
    """Up to n_samples samples (seeds base_seed ..), stopping at `deadline` (time.perf_counter();
    or deadline(samples so far, seconds so far), asked again before each call: a deadline that
    follows the measured rate, proofs.run.budget.RateDeadline), at most `max_rows` seeds a
    generate_batch call (None: what the decoder declares): certify caps it where the KV caches
    of a full batch would not fit (proofs/run/run.py sampling_rows).
    `fails(sample)`: the sample alone fails the case (malformed, impossible): the draw stops after
    the call that returned one, since no further sample can change the verdict."""
    t0 = time.perf_counter()
    batched = isinstance(decoder, BatchDecoder)
    out: list[list[int]] = []
    limit = batch_call_limit(decoder) if batched else None
    cap = MAX_CHUNK if limit is None else min(MAX_CHUNK, limit)
    if max_rows is not None:
        cap = max(1, min(cap, max_rows))
    chunk = min(FIRST_CHUNK, cap) if batched else 1
    stopped = False
    while len(out) < n_samples:
        end = deadline(len(out), time.perf_counter() - t0) if callable(deadline) else deadline
        if end is not None and time.perf_counter() >= end:
            stopped = True
            break
        seeds = list(range(base_seed + len(out), base_seed + min(n_samples, len(out) + chunk)))
        t = time.perf_counter()
        try:
            if batched:
                got = decoder.generate_batch([list(prompt)] * len(seeds), n_tokens, sampling, seeds)
                got = [tokens_of(r) for r in got]
                if len(got) != len(seeds):
                    raise ValueError(f"generate_batch returned {len(got)} results for {len(seeds)} seeds")
            else:
                got = [run_generate(decoder, prompt, n_tokens, sampling, s) for s in seeds]
        except Refused as e:  # the engine refused the parameters: a verdict on the case, when it is one
            if not out:
                return Draw(out, time.perf_counter() - t0, batched, refused=str(e))
            return Draw(  # after samples it gave: not a refusal of the parameters, a failure
                out,
                time.perf_counter() - t0,
                batched,
                f"seeds {seeds[0]}..{seeds[-1]}: refused after {len(out)} samples of the same parameters: "
                f"{e}",
            )
        except Exception as e:  # noqa: BLE001 - any failure of the candidate is a finding
            return Draw(
                out,
                time.perf_counter() - t0,
                batched,
                f"seeds {seeds[0]}..{seeds[-1]}: {type(e).__name__}: {e}",
            )
        out += got
        if fails is not None and any(map(fails, got)):
            break
        took = time.perf_counter() - t
        if batched:
            per = took / len(seeds)
            chunk = int(min(cap, max(1, CHUNK_SECONDS / max(per, 1e-9))))
            end = deadline(len(out), time.perf_counter() - t0) if callable(deadline) else deadline
            if end is not None:  # never overshoot the deadline by more than about one chunk
                chunk = max(1, min(chunk, int((end - time.perf_counter()) / max(per, 1e-9)) + 1))
    return Draw(out, time.perf_counter() - t0, batched, None, stopped)
