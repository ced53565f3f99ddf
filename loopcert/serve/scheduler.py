"""The batching scheduler of `loopcert serve`: one decode thread, rounds of batched sequences.

Each HTTP request becomes one Job per choice (prompt x n). Jobs wait in a FIFO; the decode
thread repeatedly takes a *round*: the oldest waiting job and every other waiting job that can
share its `Decoder.generate_batch` call, up to `max_batch`, and decodes them together.
generate_batch takes a prompt, max_new_tokens, SamplingParams and seed per sequence but one
EOS and one keep_logits, so a round groups jobs by (EOS, logprobs wanted) only.

A round starts when `max_batch` jobs wait or `window_s` after the decode thread found the
first one (default 10 ms in `loopcert serve --batch-window-ms`), whichever comes first.

Granularity, precisely: a request joins the running batch at the next ROUND, not the next
engine step. `Decoder.generate_batch` decodes a whole batch to completion in one call, so a
request that arrives while a round runs waits for that round to end (at most the round's
longest max_tokens). Within a round every engine step advances the live lanes of all its
sequences in one call, and a sequence that stops early frees its rows (issue 11).

With `use_batch=False` (`loopcert serve --no-batch`), or a decoder without generate_batch, a
round decodes its jobs one after another with `generate` (same laws, no batching gain). A job
cancelled while it waits (its client went away) is dropped before it is decoded; one
cancelled while its round runs is decoded and discarded. Either way nothing of it stays
queued (`status()`).

`ignore_seed=True` makes a deliberately WRONG server (a negative control for certify's
reproducibility check): each job decodes with a fresh random seed instead of the request's.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams


class Overloaded(LoopcertError):
    """More jobs waiting than the server accepts."""


@dataclass(eq=False)
class Job:
    prompt: list[int]
    max_new_tokens: int
    sampling: SamplingParams
    seed: int
    eos_token_id: int | None = None
    keep_logits: bool = False
    on_done: Callable[[Job], None] | None = None  # called from the decode thread
    # filled in by the scheduler
    result: object = None  # fastdec GenerateResult
    error: BaseException | None = None
    cancelled: bool = False
    decoded_seed: int | None = None
    t_submit: float = field(default_factory=time.perf_counter)
    t_start: float | None = None
    t_end: float | None = None
    round: int | None = None
    batch_size: int | None = None
    batched: bool = False  # decoded by generate_batch (False: the per-sequence fallback)

    @property
    def key(self) -> tuple:
        return (self.eos_token_id, self.keep_logits)


class Scheduler:
    def __init__(
        self,
        decoder,
        max_batch: int = 32,
        max_waiting: int = 4096,
        ignore_seed: bool = False,
        use_batch: bool | None = None,
        window_s: float = 0.0,
    ):
        if max_batch < 1 or max_waiting < 1:
            raise LoopcertError(f"max_batch and max_waiting must be >= 1, got {max_batch}, {max_waiting}")
        if not 0 <= window_s < 10:
            raise LoopcertError(f"the batch window must be in [0, 10) seconds, got {window_s}")
        self.decoder, self.max_batch, self.max_waiting = decoder, max_batch, max_waiting
        self.window_s = window_s
        self.ignore_seed = ignore_seed
        batch_fn = getattr(decoder, "generate_batch", None)
        self.has_batch = callable(batch_fn) if use_batch is None else bool(use_batch and callable(batch_fn))
        # never more rows than the decoder's cache was sized for
        if self.has_batch:
            self.max_batch = min(max_batch, getattr(decoder, "max_batch", max_batch))
        self._waiting: deque[Job] = deque()
        self._running: list[Job] = []
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.rounds = 0
        self.completed = 0
        self.cancelled = 0
        self.largest_round = 0

    # -- control ------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="loopcert-decode", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def submit(self, jobs: list[Job]) -> None:
        with self._cond:
            if len(self._waiting) + len(jobs) > self.max_waiting:
                raise Overloaded(f"{len(self._waiting)} sequences are waiting (limit {self.max_waiting})")
            now = time.perf_counter()
            for j in jobs:
                j.t_submit = now
                self._waiting.append(j)
            self._cond.notify_all()

    def cancel(self, jobs: list[Job]) -> None:
        """Drop jobs whose client went away; a job already decoding finishes and is discarded."""
        with self._cond:
            for j in jobs:
                if j.t_end is not None or j.cancelled:
                    continue
                j.cancelled = True
                self.cancelled += 1
                try:
                    self._waiting.remove(j)
                except ValueError:
                    pass  # running: its round ends normally

    def status(self) -> dict:
        with self._cond:
            return {
                "waiting": len(self._waiting),
                "running": len(self._running),
                "rounds": self.rounds,
                "completed": self.completed,
                "cancelled": self.cancelled,
                "largest_round": self.largest_round,
                "max_batch": self.max_batch,
                "batching": "generate_batch" if self.has_batch else "per-sequence fallback",
            }

    # -- the decode thread ----------------------------------------------------------------------
    def _take_round(self) -> list[Job]:
        head = self._waiting[0]
        group = [j for j in self._waiting if j.key == head.key][: self.max_batch]
        for j in group:
            self._waiting.remove(j)
        return group

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._stop:
                    self._cond.wait()
                # the batch window: clients answered by the last round send their next requests
                # within milliseconds; waiting for them fills the round instead of decoding 1
                deadline = time.perf_counter() + self.window_s
                while len(self._waiting) < self.max_batch and not self._stop:
                    left = deadline - time.perf_counter()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._stop:
                    return
                group = self._take_round()
                self._running = group
                self.rounds += 1
                self.largest_round = max(self.largest_round, len(group))
                rnd = self.rounds
            t0 = time.perf_counter()
            for j in group:
                j.t_start, j.round, j.batch_size = t0, rnd, len(group)
                j.decoded_seed = secrets.randbits(63) if self.ignore_seed else j.seed
            self._decode(group)
            with self._cond:
                self._running = []
                now = time.perf_counter()
                for j in group:
                    j.t_end = now
                    self.completed += not j.cancelled
            for j in group:
                if j.on_done is not None and not j.cancelled:
                    j.on_done(j)

    def _decode(self, group: list[Job]) -> None:
        first = group[0]
        if self.has_batch:
            try:
                results = self.decoder.generate_batch(
                    [j.prompt for j in group],
                    [j.max_new_tokens for j in group],
                    [j.sampling for j in group],
                    [j.decoded_seed for j in group],
                    eos_token_id=first.eos_token_id,
                    keep_logits=first.keep_logits,
                )
            except Exception:  # noqa: BLE001 - isolate the job at fault: decode each alone below
                pass
            else:
                for j, r in zip(group, results, strict=True):
                    j.result, j.batched = r, True
                return
        for j in group:
            if j.cancelled:
                continue
            try:
                j.result = self.decoder.generate(
                    j.prompt,
                    j.max_new_tokens,
                    j.sampling,
                    seed=j.decoded_seed,
                    eos_token_id=j.eos_token_id,
                    keep_logits=j.keep_logits,
                )
            except Exception as e:  # noqa: BLE001 - reported to that request only (HTTP 500)
                j.error = e
