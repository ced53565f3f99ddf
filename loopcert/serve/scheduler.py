"""The batching scheduler of `loopcert serve`: one decode thread, continuous batching.

Each HTTP request becomes one Job per choice (prompt x n). Jobs wait in a FIFO; one decode
thread decodes them, at one of three granularities (`join`):

- "step" (fastdec.Decoder, the default): continuous batching. The thread holds a
  fastdec.ContinuousBatch and, before every engine step, lets waiting jobs join it on free
  rows (at most `max_batch` live), then advances every live sequence by one step and answers
  those that ended. A request that arrives while others decode joins them at the next *step*,
  and a sequence that ends frees its row for the next one at once. A batch has one capacity,
  chosen when it starts empty (the largest prompt + max_tokens among the jobs then waiting,
  with rows x capacity at most BATCH_POSITIONS); a job that does not fit it waits, and the
  jobs behind it too (FIFO: nothing overtakes it), until the batch has drained.
  Each sequence is decoded exactly as generate() decodes it alone (same law; the same bits in
  fixed-width mode): tests/fastdec/test_continuous.py.
- "round" (a decoder with generate_batch but no steps, e.g. a user's): the thread takes a
  *round*, the oldest waiting job and every other waiting job that can share its
  generate_batch call (same EOS, same logprobs wish: generate_batch takes one of each), up to
  `max_batch`, and decodes it to completion; requests arriving meanwhile wait for the next round.
- "sequence" (`loopcert serve --no-batch`, or a decoder without generate_batch): a round
  decodes its jobs one after another with `generate` (same laws, no batching gain).

Either batched mode starts decoding when `max_batch` jobs wait or `window_s` after the decode
thread found the first one (default 10 ms in `loopcert serve --batch-window-ms`), whichever
comes first; in "step" mode only when the batch is empty (a running batch takes new jobs at
every step). A job cancelled while it waits (its client went away) is dropped before it is
decoded; in "step" mode one cancelled while it decodes leaves the batch at the next step; in
the round modes it is decoded and discarded. Either way nothing of it stays queued (`status()`).

In "step" mode a job with `on_progress` is handed its committed tokens after every engine step
that added some (`Job.partial`): `stream` requests send their text as it is decoded. In the round
modes a job's tokens arrive all at once, when its round ends.

Each job records where it was decoded: `round` (the round, or in "step" mode the engine step
at which it joined) and `batch_size` (the round's size, or the live sequences once it joined).

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

from fastdec import ContinuousBatch, Decoder
from fastdec.decoder import capacity_for
from proofs.decoder_attributes import declared_max_batch
from proofs.decoders.protocol import BatchDecoder
from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams


class Overloaded(LoopcertError):
    """More jobs waiting than the server accepts."""


class ShuttingDown(LoopcertError):
    """The server stopped (SIGTERM, SIGINT) before this job was decoded: its request is answered
    at once (HTTP 503) instead of being cut off mid-response."""


@dataclass(eq=False)
class Job:
    prompt: list[int]
    max_new_tokens: int
    sampling: SamplingParams
    seed: int
    eos_token_id: int | None = None
    keep_logits: bool = False
    on_done: Callable[[Job], None] | None = None  # called from the decode thread
    # step mode: called from the decode thread after each engine step that committed tokens, with
    # `partial` set to them (always a prefix of the result: fastdec commits tokens for good)
    on_progress: Callable[[Job], None] | None = None
    partial: list[int] = field(default_factory=list)
    tick: object = None  # the app's wake-up for on_progress (an asyncio.Event, serve/app.py)
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
    def options(self) -> dict:
        """The job's generate() keywords beyond (prompt, max_new_tokens, sampling, seed)."""
        return {"eos_token_id": self.eos_token_id, "keep_logits": self.keep_logits}

    @property
    def key(self) -> tuple:
        """Jobs of one key share a generate_batch round: it takes one of each option."""
        return (self.eos_token_id, self.keep_logits)


JOINS = ("step", "round", "sequence")
BATCH_POSITIONS = 8192  # rows x capacity of a "step" batch: 32 rows of 256 positions


class Scheduler:
    def __init__(
        self,
        decoder,
        max_batch: int = 32,
        max_waiting: int = 4096,
        ignore_seed: bool = False,
        join: str | None = None,
        window_s: float = 0.0,
    ):
        if max_batch < 1 or max_waiting < 1:
            raise LoopcertError(f"max_batch and max_waiting must be >= 1, got {max_batch}, {max_waiting}")
        if not 0 <= window_s < 10:
            raise LoopcertError(f"the batch window must be in [0, 10) seconds, got {window_s}")
        steps = isinstance(decoder, Decoder)
        batches = steps or isinstance(decoder, BatchDecoder)
        if join is None:
            join = "step" if steps else "round" if batches else "sequence"
        if join not in JOINS:
            raise LoopcertError(f"join must be one of {JOINS}, got {join!r}")
        if (join == "step" and not steps) or (join == "round" and not batches):
            raise LoopcertError(
                f"join={join!r} needs a decoder with "
                + ("steps (a fastdec.Decoder)" if join == "step" else "generate_batch")
                + f", got {type(decoder).__name__}"
            )
        self.decoder, self.max_batch, self.max_waiting = decoder, max_batch, max_waiting
        self.join, self.window_s = join, window_s
        self.ignore_seed = ignore_seed
        if join != "sequence":  # never more rows than the decoder's cache was sized for
            self.max_batch = min(max_batch, declared_max_batch(decoder) or max_batch)
        self._waiting: deque[Job] = deque()
        self._running: list[Job] = []
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.rounds = 0  # rounds, or in "step" mode engine steps
        self.completed = 0
        self.cancelled = 0
        self.largest_round = 0  # the most sequences decoded together

    # -- control ------------------------------------------------------------------------------
    def start(self) -> None:
        loop = self._loop_steps if self.join == "step" else self._loop_rounds
        self._thread = threading.Thread(target=loop, name="loopcert-decode", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 60.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

    def shutdown(self, reason: str) -> None:
        """Take no more work and answer every job not yet decoded (waiting or in the batch) now,
        with ShuttingDown(reason) as its error; the decode thread drops them at its next step."""
        with self._cond:
            self._stop = True
            pending = [j for j in (*self._waiting, *self._running) if j.t_end is None and not j.cancelled]
            self._waiting.clear()
            now = time.perf_counter()
            for j in pending:
                j.error, j.t_end, j.cancelled = ShuttingDown(reason), now, True
            self._cond.notify_all()
        for j in pending:
            if j.on_done is not None:
                j.on_done(j)

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
        """Drop jobs whose client went away (a decoding one: at the next step, or in the round
        modes once its round ends, discarded)."""
        with self._cond:
            for j in jobs:
                if j.t_end is not None or j.cancelled:
                    continue
                j.cancelled = True
                self.cancelled += 1
                try:
                    self._waiting.remove(j)
                except ValueError:
                    pass  # running: dropped by the decode thread

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
                "join": self.join,
                "batching": {
                    "step": "continuous (a request joins at the next engine step)",
                    "round": "generate_batch rounds",
                    "sequence": "per-sequence fallback",
                }[self.join],
            }

    # -- the decode thread ----------------------------------------------------------------------
    def _wait_for_work(self) -> bool:
        """(holding the lock) Until a job waits and the batch window has passed; False: stop."""
        while not self._waiting and not self._stop:
            self._cond.wait()
        # the batch window: clients answered a moment ago send their next requests within
        # milliseconds; waiting for them fills the batch instead of decoding 1
        deadline = time.perf_counter() + self.window_s
        while len(self._waiting) < self.max_batch and not self._stop:
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            self._cond.wait(left)
        return not self._stop

    def _seed(self, j: Job) -> int:
        return secrets.randbits(63) if self.ignore_seed else j.seed

    def _finish(self, jobs: list[Job]) -> None:
        """Answer jobs that ended (decoded, or failed with j.error)."""
        with self._cond:
            now = time.perf_counter()
            for j in jobs:
                j.t_end = now
                self.completed += not j.cancelled
        for j in jobs:
            if j.on_done is not None and not j.cancelled:
                j.on_done(j)

    # "step": continuous batching
    def _loop_steps(self) -> None:
        batch = None
        live: dict[object, Job] = {}  # ContinuousBatch handle -> job
        while True:
            with self._cond:
                if not live and not self._wait_for_work():
                    return
                if self._stop:
                    return
                for h, j in list(live.items()):
                    if j.cancelled:  # its client went away: leave the batch now
                        batch.drop(h)
                        del live[h]
                        j.t_end = time.perf_counter()
                if not live:
                    batch = self._new_batch(batch)
                joined, failed = self._admit(batch, live)
                self._running = list(live.values())
                if live:
                    self.rounds += 1
                    self.largest_round = max(self.largest_round, len(live))
                step = self.rounds
            for j in joined:
                j.round, j.batch_size = step, len(live)
            self._finish(failed)
            if not live:
                continue
            try:
                ended = batch.step()
            except Exception as e:  # noqa: BLE001 - the batch is lost: every live job gets the error
                for j in live.values():
                    j.error = e
                done, live, batch = list(live.values()), {}, None
            else:
                done = []
                for h, res in ended:
                    j = live.pop(h)
                    j.result, j.batched = res, True
                    done.append(j)
            with self._cond:
                self._running = list(live.values())
            self._progress(live)
            self._finish(done)

    @staticmethod
    def _progress(live: dict) -> None:
        """Hand each live job that asked for it the tokens its sequence has committed so far."""
        for h, j in live.items():
            if j.on_progress is not None and not j.cancelled and len(h.tokens) > len(j.partial):
                j.partial = list(h.tokens)  # a new list: the reader never sees one being extended
                j.on_progress(j)

    def _new_batch(self, old):
        """(holding the lock, nothing live) A batch whose capacity fits the jobs waiting now."""
        head = list(self._waiting)[: self.max_batch]
        need = max((len(j.prompt) + j.max_new_tokens for j in head), default=1)
        capacity = capacity_for(need)
        rows = max(1, min(self.max_batch, BATCH_POSITIONS // capacity))
        if old is not None and old.capacity == capacity and old.rows == rows:
            return old
        return ContinuousBatch(self.decoder, need, rows=rows)

    def _admit(self, batch, live: dict) -> tuple[list[Job], list[Job]]:
        """(holding the lock) Waiting jobs join the batch in FIFO order while rows are free and
        the oldest fits; -> (joined, refused by validation)."""
        joined, failed = [], []
        while self._waiting and batch.room() and len(live) < self.max_batch:
            j = self._waiting[0]
            if not batch.fits(len(j.prompt), j.max_new_tokens):
                if live or joined:
                    break  # it waits for the batch to drain; nothing overtakes it
            self._waiting.popleft()
            j.t_start = time.perf_counter()
            j.decoded_seed = self._seed(j)
            try:
                h = batch.add(j.prompt, j.max_new_tokens, j.sampling, j.decoded_seed, **j.options)
            except LoopcertError as e:  # this job's input (e.g. too long for any batch): its error only
                j.error = e
                failed.append(j)
                continue
            live[h] = j
            joined.append(j)
        return joined, failed

    # "round" and "sequence"
    def _take_round(self) -> list[Job]:
        head = self._waiting[0]
        group = [j for j in self._waiting if j.key == head.key][: self.max_batch]
        for j in group:
            self._waiting.remove(j)
        return group

    def _loop_rounds(self) -> None:
        while True:
            with self._cond:
                if not self._wait_for_work():
                    return
                group = self._take_round()
                self._running = group
                self.rounds += 1
                self.largest_round = max(self.largest_round, len(group))
                rnd = self.rounds
            t0 = time.perf_counter()
            for j in group:
                j.t_start, j.round, j.batch_size = t0, rnd, len(group)
                j.decoded_seed = self._seed(j)
            self._decode(group)
            with self._cond:
                self._running = []
            self._finish(group)

    def _decode(self, group: list[Job]) -> None:
        first = group[0]
        if self.join == "round":
            try:
                results = self.decoder.generate_batch(
                    [j.prompt for j in group],
                    [j.max_new_tokens for j in group],
                    [j.sampling for j in group],
                    [j.decoded_seed for j in group],
                    **first.options,
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
                    j.prompt, j.max_new_tokens, j.sampling, seed=j.decoded_seed, **j.options
                )
            except Exception as e:  # noqa: BLE001 - reported to that request only (HTTP 500)
                j.error = e
