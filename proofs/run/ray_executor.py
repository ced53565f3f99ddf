"""Run a certify plan's work units as Ray tasks (`loopcert certify --executor ray`, docs/design.md
section 8, docs/distributed.md).

The parent builds the run once (models, exact laws, N per case), puts it into Ray's object store
once as a RunSpec (proofs/run/remote.py: the workers rebuild the run on the parent's models and
plan, so they never plan otherwise), and submits one task per work unit, each asking for one GPU
(`--device cuda`) or one CPU. At most `workers` units are in flight, handed out in the order given
(dispatch_order) as results come back (ray.wait), so the sampling pool is shared as with --jobs:
the pool holds `workers` x the budget in worker-seconds, each unit reserves its share when it is
submitted and settles when it returns (proofs/run/budget.py). A worker sends its progress lines
back with its result and the parent prints them: the same lines as --jobs, each when its unit
ends.

Faults: a task whose worker dies, or that raises, is retried RETRIES times by Ray; a unit still
without a result is then a failed unit (proofs/run/units.py failed_unit): its check fails naming
it, and so does the certificate. An interrupt (Ctrl-C, SIGTERM) or an error cancels every task in
flight (ray.cancel) before it propagates; certify then writes nothing, as with --jobs.

Ray is imported here only, and only when a run asks for it: loopcert runs without it.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from proofs.run.jobs import Budget
from proofs.run.remote import RunSpec, WorkerRuns
from proofs.run.units import failed_unit
from refdec.errors import LoopcertError

RAY_EXTRA = "pip install 'loopcert[ray]'"
CONNECT_TIMEOUT_S = 30.0  # --ray-address: no answer within this is an error, never a hang
RETRIES = 1  # Ray retries a task once, whether its worker died or it raised
POLL_S = 1.0  # ray.wait's timeout: signals are handled in between
WAITING_EVERY_S = 30.0  # how often the parent says that units wait for resources


def import_ray():
    """The ray module, or a LoopcertError naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise LoopcertError(f"--executor ray needs Ray, which is not installed: {RAY_EXTRA}") from None
    return ray


@dataclass(frozen=True)
class Fault:
    """Test-only: the task of unit `uid` kills its own worker (SIGKILL; `raises`: raises instead)
    on its first `times` attempts, counted as files in `folder` (shared by a local cluster's
    workers)."""

    uid: str
    times: int
    folder: str
    raises: bool = False

    def strike(self, uid: str) -> None:
        if uid != self.uid:
            return
        folder = Path(self.folder)
        folder.mkdir(parents=True, exist_ok=True)
        if len(list(folder.iterdir())) < self.times:
            (folder / f"attempt-{uuid.uuid4().hex}").touch()
            if self.raises:
                raise RuntimeError(f"test fault in {uid}")
            os.kill(os.getpid(), signal.SIGKILL)


_RUNS = WorkerRuns()  # in each Ray worker process: the run it rebuilt, by spec key


def _task(spec_box: list, key: str, uid: str, share: float | None, fault: Fault | None) -> dict:
    """One work unit in a Ray worker. `spec_box` holds the spec's ObjectRef inside a list, so that
    Ray does not fetch and unpickle the whole run for every task: only a worker's first unit does."""
    import ray

    if fault is not None:
        fault.strike(uid)
    return _RUNS.run(key, lambda: ray.get(spec_box[0]), uid, share)


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def reason(e: BaseException) -> str:
    """What went wrong in a failed task, in one line: the task's own exception (a RayTaskError's
    `cause`) as "Type: message", else the last line of Ray's text without its colour codes (Ray's
    first line only names the worker: "ray::_task() (pid=..., ip=...)")."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}".splitlines()[0]
    lines = [line.strip() for line in ANSI.sub("", str(e)).splitlines() if line.strip()]
    return lines[-1] if lines else type(e).__name__


class DeferredSignals:
    """While Ray waits for results, SIGINT / SIGTERM are only noted; `check()` (called between
    ray.wait calls, at most POLL_S apart) then restores the handlers the process had and raises
    the signal again, so that handler (certify's Interrupted; KeyboardInterrupt by default) runs
    in Python code, not inside Ray's C++ wait, which turns an exception raised there into a
    SystemError. Main thread only (Python's rule for signal handlers); elsewhere it does nothing."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.got: int | None = None
        self.saved: dict = {}

    def __enter__(self) -> DeferredSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self.saved[sig] = signal.signal(sig, self._note)
        return self

    def _note(self, signum, _frame) -> None:
        self.got = self.got or signum

    def check(self) -> None:
        if self.got is not None:
            got, self.got = self.got, None
            self._restore()
            signal.raise_signal(got)

    def _restore(self) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self.saved.clear()

    def __exit__(self, *exc) -> None:
        self._restore()
        if exc[0] is None and self.got is not None:  # noted after the last check
            signal.raise_signal(self.got)


def waiting_line(
    in_flight: int, done: int, total: int, resource: str, cluster: Mapping[str, float]
) -> str | None:
    """The progress line for units that wait for resources; None when the cluster can run every
    unit in flight at once (each takes one `resource`)."""
    have = int(cluster.get(resource, 0))
    if in_flight <= have:
        return None
    return (
        f"  {done}/{total} work units done, {in_flight} submitted: {in_flight - have} waiting for "
        f"resources (1 {resource} each; the cluster has {have})"
    )


def check_address(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """A LoopcertError within `timeout` when HOST:PORT does not accept a connection (ray.init
    itself would retry for minutes); other forms ("auto", "ray://...") are left to Ray."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in host or not host:
        return
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as e:
        raise LoopcertError(
            f"--ray-address {address}: no Ray cluster answers there ({e.strerror or e}; "
            f"waited at most {timeout:.0f} s)"
        ) from None


class RayExecutor:
    """`--executor ray [--ray-address ADDRESS]`: the units as Ray tasks, `workers` at once (None:
    as many as the cluster has CPUs, or GPUs on --device cuda)."""

    def __init__(
        self, workers: int | None, device: str, address: str | None = None, fault: Fault | None = None
    ):
        self.workers, self.device, self.address, self.fault = workers, device, address, fault
        self.resource = "CPU" if device == "cpu" else "GPU"

    def describe(self, n_units: int) -> str:
        where = f"the Ray cluster at {self.address}" if self.address else "a local Ray cluster"
        many = f"{self.workers} at once" if self.workers else f"one per {self.resource} of the cluster"
        return f"running {n_units} work units as Ray tasks on {where}, {many}"

    def connect(self, ray) -> bool:
        """Join the cluster (or start a local one); True when this call did, so must shut it down.
        A process already connected (ray.is_initialized) keeps its connection. The process's
        SIGINT / SIGTERM handlers are the same after as before: ray.init installs its own (its
        core worker's failure-signal handler: a SIGTERM then ends the process with status 1,
        bypassing certify's interrupt handling and this executor's cleanup)."""
        if ray.is_initialized():
            return False
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            return self._connect(ray)
        finally:
            for sig, handler in handlers.items():
                if handler is not None and threading.current_thread() is threading.main_thread():
                    signal.signal(sig, handler)

    def _connect(self, ray) -> bool:
        quiet = {"log_to_driver": False, "include_dashboard": False}
        if self.address is None:
            cpus = self.workers if self.device == "cpu" and self.workers else None  # None: the machine's
            ray.init(num_cpus=cpus, **quiet)
            return True
        check_address(self.address)
        box: dict = {}

        def join() -> None:
            try:
                ray.init(address=self.address, **quiet)
                box["ok"] = True
            except Exception as e:  # noqa: BLE001 - reported below as the address's error
                box["error"] = e

        t = threading.Thread(target=join, name="ray-init", daemon=True)
        t.start()
        t.join(CONNECT_TIMEOUT_S)
        if "ok" not in box:
            why = f"{type(box['error']).__name__}: {box['error']}" if "error" in box else "no answer"
            raise LoopcertError(
                f"--ray-address {self.address}: cannot join a Ray cluster there within "
                f"{CONNECT_TIMEOUT_S:.0f} s ({why})"
            )
        return True

    def run_all(self, run, units, budget_for: Callable[[int], Budget]) -> dict[str, dict]:
        ray = import_ray()
        started = self.connect(ray)
        flying: dict = {}  # ObjectRef -> unit id
        signals = DeferredSignals()  # handled between waits, in Python code
        try:
            with signals:
                cluster = ray.cluster_resources()
                workers = self.workers or max(1, int(cluster.get(self.resource, 0)))
                budget = budget_for(workers)
                spec_ref = ray.put(RunSpec.of(run, units))  # once: every task takes the ref
                need = {"num_cpus": 1} if self.device == "cpu" else {"num_cpus": 0, "num_gpus": 1}
                task = ray.remote(_task).options(**need, max_retries=RETRIES, retry_exceptions=True)
                key = uuid.uuid4().hex
                pending = [uid for uid, _ in units]
                results: dict[str, dict] = {}
                told = -WAITING_EVERY_S

                def submit() -> None:
                    uid = pending.pop(0)
                    flying[task.remote([spec_ref], key, uid, budget.reserve(uid), self.fault)] = uid

                while pending and len(flying) < workers:
                    submit()
                while flying:
                    done, _ = ray.wait(list(flying), num_returns=1, timeout=POLL_S)
                    signals.check()
                    if not done:
                        if time.monotonic() - told >= WAITING_EVERY_S:
                            line = waiting_line(len(flying), len(results), len(units), self.resource, cluster)
                            if line:
                                run.say(line)
                                told = time.monotonic()
                            cluster = ray.cluster_resources()  # nodes may join
                        continue
                    for ref in done:
                        uid = flying.pop(ref)
                        try:
                            got = ray.get(ref)
                            for line in got["said"]:
                                run.say(line)
                            result = got["result"]
                        except ray.exceptions.RayError as e:  # its worker died or it raised, RETRIES + 1 x
                            why = f"{type(e).__name__} after {RETRIES + 1} attempts: {reason(e)[:300]}"
                            result = failed_unit(uid, why)
                            run.say(f"  {uid}: FAILED ({why})")
                        results[uid] = result
                        budget.settle(uid, float(result.get("seconds") or 0.0))
                        if pending:
                            submit()
                return results
        finally:  # also on Ctrl-C, SIGTERM or an error: nothing of this run keeps running
            for ref in flying:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - it ended meanwhile: nothing left to cancel
                    pass
            if started:
                ray.shutdown()
