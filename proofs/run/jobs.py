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
run with --executor ray, proofs/run/ray_executor.py, or across machines with --shard instead).

No worker outlives its parent, however the parent ends: the run's `finally` ends them when it
can, and when it cannot (SIGKILL) each worker sees its parent go: on Linux the kernel sends it
SIGKILL (prctl PR_SET_PDEATHSIG), elsewhere a watcher thread sees the parent pid change (the
orphan is reparented) and exits.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Protocol

import torch

from refdec.errors import LoopcertError

MAX_DEFAULT_JOBS = 8  # the default never starts more workers than this, whatever the core count

_WORK: dict[str, Callable[..., dict]] = {}  # unit id -> run it; set in the parent before the fork
PR_SET_PDEATHSIG = 1  # linux/prctl.h
ORPHAN_POLL_S = 0.5  # the portable watcher checks the parent pid this often


def default_jobs(device: str = "cpu") -> int:
    """One worker per core this process may use, at most MAX_DEFAULT_JOBS; 1 on a GPU."""
    if device != "cpu":
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_DEFAULT_JOBS))


def check_jobs(jobs: int, device: str, executor: str = "local") -> int:
    """`jobs` when it is a valid worker count for this executor (local workers fork: CPU only;
    Ray's take one GPU each); else a LoopcertError naming it."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise LoopcertError(f"--jobs must be an integer >= 1, got {jobs!r}")
    if jobs > 1 and device != "cpu" and executor == "local":
        raise LoopcertError(
            f"--jobs {jobs} needs --device cpu (CUDA cannot be forked), got {device!r}: "
            "split a GPU run with --executor ray or across machines with --shard i/n"
        )
    return jobs


SIGNALS = {signal.SIGINT, signal.SIGTERM}


class Budget(Protocol):
    """What the parent needs of the sampling pool (proofs/run/budget.py SamplingPool)."""

    def reserve(self, uid: str) -> float | None:
        """The sampling time of the unit being dispatched; None for a unit that has none."""

    def settle(self, uid: str, used: float) -> None:
        """The unit came back having sampled for `used` seconds."""


class Executor(Protocol):
    """How certify runs a list of work units (proofs/run/certify.py picks one): in forked local
    workers (LocalExecutor) or as Ray tasks (proofs/run/ray_executor.py RayExecutor). Either
    way a unit's raw result depends on the plan, the seed and the unit id alone."""

    def describe(self, n_units: int) -> str:
        """The progress line that says how the units run."""

    def run_all(
        self, run, units: Sequence[tuple[str, Callable[..., dict]]], budget_for: Callable[[int], Budget]
    ) -> dict[str, dict]:
        """{unit id: raw result} of `units` (in dispatch order) of `run` (a CertifyRun);
        budget_for(workers) is the sampling pool of that many units running at once, called
        once the executor knows how many that is."""


class LocalExecutor:
    """`--jobs N`: N forked workers on this machine (run_units)."""

    def __init__(self, workers: int):
        self.workers = workers

    def describe(self, n_units: int) -> str:
        return f"running {n_units} work units in {self.workers} worker processes"

    def run_all(self, run, units, budget_for: Callable[[int], Budget]) -> dict[str, dict]:
        return run_units(units, self.workers, budget_for(self.workers))


def die_with_parent(parent: int) -> None:
    """End this process when `parent` ends, however it ends (also SIGKILL, which leaves the
    parent no `finally`): the kernel's parent-death signal on Linux, plus a watcher thread that
    sees the parent pid change (the portable path; it also covers a parent that died before
    the prctl call)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl in this libc: the watcher alone
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def _serve(conn, threads: int, parent: int) -> None:
    """A worker: run the units the parent sends ((uid, share); None: stop), answer each with
    (uid, result, None) or (uid, None, why)."""
    die_with_parent(parent)
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
            p = ctx.Process(
                target=_serve, args=(child_end, torch.get_num_threads(), os.getpid()), daemon=True
            )
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
                budget.settle(uid, float(result.get("seconds") or 0.0))
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


def makespan(seconds: Sequence[float], jobs: int) -> float:
    """Wall time of units of these durations handed out in this order to `jobs` workers, each to
    the first one free (what run_units does: --predict and its cut estimate)."""
    free = [0.0] * max(1, jobs)
    for t in seconds:
        k = free.index(min(free))
        free[k] += t
    return max(free)
