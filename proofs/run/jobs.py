"""Run a certify plan's work units in N local worker processes (`loopcert certify --jobs N`).

A plan is a list of work units, each deterministic given the plan and the seed and runnable on
its own (proofs/run/units.py `plan_units`; the shards of proofs/run/shards.py rest on the same
property). Here the parent builds the run once (models, exact laws, N per case), forks N workers
that inherit it, and hands them the units one at a time in the order given (proofs/run/units.py
`dispatch_order`: the dear ones first), as each worker comes free; the raw results are then
assembled by the same code as a serial run. A unit's result does not depend on which worker ran
it or when (its seeds are fixed by the plan), so the certificate equals the serial one apart
from timings, unless the time budget cut a sampling unit short (its tally says so either way).

The sampling budget stays wall time: with N workers the pool holds N x the budget in
worker-seconds, and each sampling unit is handed its share when it is dispatched (what it
leaves unused goes back to the pool when it returns): proofs/run/budget.py, reserve and settle.

Fork, not spawn: the workers inherit the loaded models and laws (no second setup) and whatever
the caller configured in-process. CUDA cannot be forked, hence --jobs 1 on a GPU (split a GPU
run across machines with --shard instead).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Protocol

import torch

from refdec.errors import LoopcertError

MAX_DEFAULT_JOBS = 8  # the default never starts more workers than this, whatever the core count

_WORK: dict[str, Callable[..., dict]] = {}  # unit id -> run it; set in the parent before the fork


def default_jobs(device: str = "cpu") -> int:
    """One worker per core this process may use, at most MAX_DEFAULT_JOBS; 1 on a GPU."""
    if device != "cpu":
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_DEFAULT_JOBS))


def check_jobs(jobs: int, device: str) -> int:
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise LoopcertError(f"--jobs must be an integer >= 1, got {jobs!r}")
    if jobs > 1 and device != "cpu":
        raise LoopcertError(
            f"--jobs {jobs} needs --device cpu (CUDA cannot be forked), got {device!r}: "
            "split a GPU run across machines with --shard i/n"
        )
    return jobs


SIGNALS = {signal.SIGINT, signal.SIGTERM}


class Budget(Protocol):
    """What the parent needs of the sampling pool (proofs/run/budget.py SamplingPool)."""

    def reserve(self, uid: str) -> float | None:
        """The sampling time of the unit being dispatched; None for a unit that has none."""

    def settle(self, uid: str, used: float) -> None:
        """The unit came back having sampled for `used` seconds."""


def _serve(conn, threads: int) -> None:
    """A worker: run the units the parent sends ((uid, share); None: stop), answer each with
    (uid, result, None) or (uid, None, why)."""
    # the parent handles Ctrl-C and SIGTERM and ends the workers with SIGTERM: they die quietly,
    # not through the CLI's handler the fork copied (a traceback each)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
    torch.set_num_threads(threads)
    while True:
        try:
            msg = conn.recv()
        except EOFError:  # the parent is gone
            return
        if msg is None:
            return
        uid, share = msg
        try:
            conn.send((uid, _WORK[uid](share), None))
        except Exception as e:  # noqa: BLE001 - the parent names the unit and fails the run
            conn.send((uid, None, f"{type(e).__name__}: {e}"))


def run_units(units: Sequence[tuple[str, Callable[..., dict]]], jobs: int, budget: Budget) -> dict[str, dict]:
    """{unit id: raw result} of `units` ((id, fn(share) -> dict)), run by `jobs` forked workers.

    budget.reserve(uid) is called when a unit is dispatched (its sampling time, or None: the
    worker passes it to the unit), budget.settle(uid, seconds it sampled) when it comes back."""
    _WORK.clear()
    _WORK.update(dict(units))
    ctx = multiprocessing.get_context("fork")
    workers = []
    # no signal between a fork and the try below: the workers are ended in its finally
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        for _ in range(jobs):
            parent_end, child_end = ctx.Pipe()
            p = ctx.Process(target=_serve, args=(child_end, torch.get_num_threads()), daemon=True)
            p.start()
            child_end.close()
            workers.append((p, parent_end))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    results: dict[str, dict] = {}
    busy: dict = {}  # connection -> the unit its worker runs
    pending = [uid for uid, _ in units]

    def dispatch(conn) -> None:
        uid = pending.pop(0)
        conn.send((uid, budget.reserve(uid)))
        busy[conn] = uid

    try:
        for _, conn in workers:
            if pending:
                dispatch(conn)
        while busy:
            for conn in wait(list(busy), timeout=0.5):  # a timeout: signals are handled meanwhile
                try:
                    uid, result, error = conn.recv()
                except EOFError:
                    raise RuntimeError(f"a certify worker died running {busy[conn]}") from None
                del busy[conn]
                if error is not None:
                    raise RuntimeError(f"work unit {uid} failed in its worker: {error}")
                results[uid] = result
                budget.settle(uid, float(result.get("seconds", 0.0)))
                if pending:
                    dispatch(conn)
    finally:  # also on Ctrl-C, SIGTERM or an error: no worker outlives the run
        for p, _ in workers:
            if p.is_alive():
                p.terminate()
        for p, conn in workers:
            p.join()
            conn.close()
        _WORK.clear()
    return results
