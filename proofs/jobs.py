"""Run a certify plan's work units in N local worker processes (`loopcert certify --jobs N`).

A plan is a list of work units, each deterministic given the plan and the seed and runnable on
its own (proofs/certify.py `plan_units`; the shards of proofs/shards.py rest on the same
property). Here the parent builds the run once (models, exact laws, N per case), forks N workers
that inherit it, and hands them the units one at a time in the order given (proofs/certify.py
`dispatch_order`: the dear ones first), as each worker comes free; the raw results are then
assembled by the same code as a serial run. A unit's result does not depend on which worker ran
it or when (its seeds are fixed by the plan), so the certificate equals the serial one apart
from timings, unless the time budget cut a sampling unit short (its tally says so either way).

The sampling budget stays wall time: with N workers the pool holds N x the budget in
worker-seconds, and each sampling unit is handed its share when it is dispatched (what it
leaves unused goes back to the pool when it returns), the serial rule of
CertifyRun.pool_share.

Fork, not spawn: the workers inherit the loaded models and laws (no second setup) and whatever
the caller configured in-process. CUDA cannot be forked, hence --jobs 1 on a GPU (split a GPU
run across machines with --shard instead).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import time
from collections.abc import Callable, Sequence

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


def _worker_init(threads: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and ends the workers
    torch.set_num_threads(threads)


def _run(uid: str, share: float | None) -> tuple[str, dict]:
    return uid, _WORK[uid](share)


def run_units(
    units: Sequence[tuple[str, Callable[..., dict]]],
    jobs: int,
    share_of: Callable[[str], float | None],
    returned: Callable[[str, float | None, dict], None],
) -> dict[str, dict]:
    """{unit id: raw result} of `units` ((id, fn(share) -> dict)), run by `jobs` forked workers.

    share_of(uid) is called when a unit is dispatched (its sampling time, or None), returned(uid,
    share, result) when it comes back (what it did not use goes back to the pool)."""
    _WORK.clear()
    _WORK.update(dict(units))
    done: queue.SimpleQueue = queue.SimpleQueue()
    ctx = multiprocessing.get_context("fork")
    pool = ctx.Pool(jobs, initializer=_worker_init, initargs=(torch.get_num_threads(),))
    results: dict[str, dict] = {}
    shares: dict[str, float | None] = {}
    try:
        pending = [uid for uid, _ in units]
        running = 0
        while pending or running:
            while pending and running < jobs:
                uid = pending.pop(0)
                shares[uid] = share_of(uid)
                pool.apply_async(_run, (uid, shares[uid]), callback=done.put, error_callback=done.put)
                running += 1
            got = _next(done)
            running -= 1
            if isinstance(got, BaseException):
                raise RuntimeError(f"a certify worker failed: {type(got).__name__}: {got}") from got
            uid, result = got
            results[uid] = result
            returned(uid, shares[uid], result)
    finally:
        pool.terminate()  # also on Ctrl-C or an error: no worker outlives the run
        pool.join()
        _WORK.clear()
    return results


def _next(done: queue.SimpleQueue):
    while True:  # a timeout keeps the parent responsive to signals while it waits
        try:
            return done.get(timeout=0.5)
        except queue.Empty:
            time.sleep(0)
