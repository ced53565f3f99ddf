"""Draw N samples of one case from a decoder, batched when it can, within a deadline.

A BatchDecoder (proofs.decoders.protocol: fastdec.Decoder, HTTPDecoder, a user's) is called on
chunks of seeds through `generate_batch`, each chunk sized from the time the last one took (and
at most what one call may hold); otherwise `generate` is called once per seed. Sample i always uses
seed base + i, so the samples do not depend on the chunking; a deadline only stops the draw
early (what was reached is then reported, and the caller judges its power).

A request that raises does not end the draw (docs/certify.md#decoder-errors): a generate_batch call
that raises is retried one seed at a time, so that the seeds that work are kept, and each seed that
raises is skipped, not replaced (the samples stay a function of the seeds alone: Draw.seeds says
which), and counted. A crash is a finding, but what the completed requests show about the law is
evidence too. Only when too many fail (too_many_failures) does the draw stop, with an error.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from proofs.decoder_attributes import batch_call_limit
from proofs.decoders.protocol import BatchDecoder, Decoder, Refused, tokens_of
from refdec.sampling import SamplingParams

FIRST_CHUNK = 64  # seeds of the first generate_batch call
MAX_CHUNK = 4096
CHUNK_SECONDS = 5.0  # later chunks aim at about this long
# the draw stops as an error once this many requests were made and more than half of them raised
# (the first FAILURE_GRACE all raising among them): the kept samples are then too few, and too
# biased by the selection (a bias of up to the failed fraction in TV), to say anything of the law
FAILURE_GRACE = 8


def too_many_failures(failed: int, requests: int) -> bool:
    """The plan-level cap on requests that raised: more than half of them, once FAILURE_GRACE
    requests were made (a caller that draws in several calls applies it to its running totals)."""
    return requests >= FAILURE_GRACE and 2 * failed > requests


class Malformed(Exception):
    """A decoder's call returned what no sample can be read from (a wrong number of results, a
    result that is no token list): the decoder's error, which stops the draw, unlike a request that
    raised."""


RATE_SLACK = 1.5  # under the plan's budget a unit may take its N's time at its measured rate x this
RUNAWAY = 4.0  # ... but never more than this x its part of the plan's budget (WorkUnit.budget_s)


@dataclass(frozen=True)
class RateDeadline:
    """A unit's deadline under the plan's budget, asked again before each call (proofs.decoders.draw):
    its share of the pool, stretched to its planned N at the rate measured so far x RATE_SLACK, and
    at most `cap` (RUNAWAY x its part of the plan's budget). Before its first sample it has no rate:
    the cap, so that it measures one even when earlier units used up the pool."""

    start: float  # time.perf_counter() when the unit started
    share: float  # seconds the pool handed it
    planned: int  # its N
    cap: float  # seconds it never runs past

    def __call__(self, drawn: int, elapsed: float) -> float:
        if drawn <= 0 or elapsed <= 0:
            return self.start + max(self.share, self.cap)
        need = RATE_SLACK * self.planned * elapsed / drawn
        return self.start + max(self.share, min(need, self.cap))


@dataclass
class Draw:
    samples: list[list[int]]
    seconds: float
    batched: bool  # generate_batch was used
    error: str | None = None  # the decoder failed past the cap (too_many_failures: sampling stopped there)
    stopped_by_deadline: bool = False
    refused: str | None = None  # its engine refused the parameters on the first call (protocol.Refused)
    seeds: list[int] | None = None  # each sample's seed: base + i, less the seeds that raised
    failed: int = 0  # requests (seeds) that raised: skipped, not replaced
    first_failed_seed: int | None = None
    first_failure: str | None = None  # "<exception type>: <message>" of the first seed that raised

    @property
    def requests(self) -> int:
        """Seeds tried: the samples kept and the requests that raised."""
        return len(self.samples) + self.failed

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
    follows the measured rate, RateDeadline), at most `max_rows` seeds a
    generate_batch call (None: what the decoder declares): certify caps it where the KV caches
    of a full batch would not fit (proofs/run/run.py sampling_rows).
    `fails(sample)`: the sample alone fails the case (malformed, impossible): the draw stops after
    the call that returned one, since no further sample can change the verdict.
    A seed whose request raises is skipped and counted (Draw.failed); the draw stops with an error
    only at too_many_failures."""
    t0 = time.perf_counter()
    batched = isinstance(decoder, BatchDecoder)
    out: list[list[int]] = []
    kept: list[int] = []  # each sample's seed
    failed: list[tuple[int, str]] = []  # (seed, message), the first kept in full, then only counted
    limit = batch_call_limit(decoder) if batched else None
    cap = MAX_CHUNK if limit is None else min(MAX_CHUNK, limit)
    if max_rows is not None:
        cap = max(1, min(cap, max_rows))
    chunk = min(FIRST_CHUNK, cap) if batched else 1
    stopped = False
    tried = 0  # seeds base_seed .. base_seed + tried - 1 were asked for

    def call(seeds: list[int]) -> list[list[int]]:
        """The samples of `seeds`; what the decoder raises propagates, a result that breaks the
        protocol is a Malformed."""
        if batched:
            got = decoder.generate_batch([list(prompt)] * len(seeds), n_tokens, sampling, seeds)
            if len(got) != len(seeds):
                raise Malformed(f"generate_batch returned {len(got)} results for {len(seeds)} seeds")
            results = got
        else:
            results = [decoder.generate(list(prompt), n_tokens, sampling, s) for s in seeds]
        try:
            return [tokens_of(r) for r in results]
        except Exception as e:  # noqa: BLE001 - named as the decoder's error
            raise Malformed(f"{type(e).__name__}: {e}") from e

    def result(error: str | None = None, refused: str | None = None) -> Draw:
        first = failed[0] if failed else (None, None)
        return Draw(
            out, time.perf_counter() - t0, batched, error, stopped, refused, kept, len(failed), *first
        )

    while tried < n_samples:
        end = deadline(len(out), time.perf_counter() - t0) if callable(deadline) else deadline
        if end is not None and time.perf_counter() >= end:
            stopped = True
            break
        seeds = list(range(base_seed + tried, base_seed + min(n_samples, tried + chunk)))
        t = time.perf_counter()
        asked = len(seeds)  # of `seeds`, those asked for (fewer when the cap stops the one-by-one retry)
        try:
            try:
                got, ok = call(seeds), seeds
            except (Refused, Malformed):
                raise
            except Exception as e:  # noqa: BLE001 - one request's failure is a finding, not the end
                if len(seeds) == 1:
                    got, ok = [], []
                    failed.append((seeds[0], f"{type(e).__name__}: {e}"))
                else:  # which seeds raise: each alone, the others kept, until the cap is passed
                    # (a server that died would otherwise be asked once per seed of the chunk)
                    got, ok = [], []
                    for asked, s in enumerate(seeds, 1):
                        try:
                            got += call([s])
                            ok.append(s)
                        except (Refused, Malformed):
                            raise
                        except Exception as e1:  # noqa: BLE001
                            failed.append((s, f"{type(e1).__name__}: {e1}"))
                            if too_many_failures(len(failed), tried + asked):
                                break
        except Refused as e:  # the engine refused the parameters: a verdict on the case, when it is one
            if not out:
                return result(refused=str(e))
            return result(  # after samples it gave: not a refusal of the parameters, a failure
                f"seeds {seeds[0]}..{seeds[-1]}: refused after {len(out)} samples of the same parameters: {e}"
            )
        except Malformed as e:  # a result no sample can be read from: the draw stops there
            return result(f"seeds {seeds[0]}..{seeds[-1]}: {e}")
        tried += asked
        out += got
        kept += ok
        if too_many_failures(len(failed), tried):
            seed, why = failed[0]
            return result(
                f"{len(failed)} of {tried} requests raised (first seed {seed}: {why}): sampling stopped "
                f"there, past the cap of half the requests"
            )
        if fails is not None and any(map(fails, got)):
            break
        took = time.perf_counter() - t
        if batched:
            per = took / len(seeds)
            chunk = int(min(cap, max(1, CHUNK_SECONDS / max(per, 1e-9))))
            end = deadline(len(out), time.perf_counter() - t0) if callable(deadline) else deadline
            if end is not None:  # never overshoot the deadline by more than about one chunk
                chunk = max(1, min(chunk, int((end - time.perf_counter()) / max(per, 1e-9)) + 1))
    return result()
