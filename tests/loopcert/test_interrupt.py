"""Interrupted runs: SIGINT / SIGTERM during `certify` or `bench` leaves the previous
report as it was (no partial file, no temporary file), prints one line saying what was
interrupted, and exits 128 + the signal (130 / 143). A real `python -m loopcert` subprocess on a
tiny model, signalled once its run has started."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from loopcert.commands.common import Interrupted, uninterrupted

ROOT = Path(__file__).resolve().parents[2]
REPORTS = {"certify": ("certificate.json", "certificate.md"), "bench": ("speedup.json", "speedup.md")}
KEPT = {
    "certify": "no certificate written, the previous one is left in place",
    "bench": "no report written, the previous one is left in place",
}


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def lines_of(stream, q: queue.Queue) -> None:
    for line in stream:
        q.put(line)
    q.put(None)


# Each command and each signal once in the default run (each case is a subprocess, mostly
# imports); all four nightly.
CASES = [
    ("certify", signal.SIGINT),
    ("bench", signal.SIGTERM),
    pytest.param("certify", signal.SIGTERM, marks=pytest.mark.slow),
    pytest.param("bench", signal.SIGINT, marks=pytest.mark.slow),
]


@pytest.mark.tier2
@pytest.mark.parametrize("command, sig", CASES)
def test_a_signal_leaves_the_previous_report(tmp_path, command, sig):
    signalled(tmp_path, command, sig, [], None)


@pytest.mark.tier2
def test_a_signal_ends_the_certify_workers_quietly(tmp_path):
    """--jobs 2: SIGTERM once the workers run; the parent ends them (no worker's traceback, the
    one line), and no worker outlives the run."""
    pids = signalled(tmp_path, "certify", signal.SIGTERM, ["--jobs", "2"], "[greedy_float64] ...")
    assert len(pids) == 2
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "(python" not in Path(f"/proc/{pid}/stat").read_text()


def children_of(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def signalled(tmp_path, command, sig, extra, wait_for) -> list[int]:
    """Run `command` on tiny-raven, signal it once a progress line (containing `wait_for`) is
    out; -> the pids of its child processes at that moment."""
    out = tmp_path / "out"
    out.mkdir()
    for name in REPORTS[command]:
        (out / name).write_text(f"the previous {name}\n")
    before = snapshot(out)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "loopcert", command, "tiny-raven", "--quick", "--out", str(out), *extra]
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    q: queue.Queue = queue.Queue()
    threading.Thread(target=lines_of, args=(proc.stdout, q), daemon=True).start()
    try:
        while True:  # the first progress line (models loaded, checks running), or the one asked for
            line = q.get(timeout=120)
            assert line is not None, proc.stderr.read()
            if wait_for is None or wait_for in line:
                break
        pids = children_of(proc.pid)
        proc.send_signal(sig)
        proc.wait(timeout=60)
        err = proc.stderr.read()
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, err
    assert [line for line in err.splitlines() if line.strip()] == [
        f"loopcert {command}: interrupted by {signal.Signals(sig).name}; {KEPT[command]}"
    ]
    assert snapshot(out) == before  # the old report, byte for byte; no partial or temporary file
    return pids


def test_a_signal_while_a_report_is_written_waits_for_both_files():
    done = []
    with pytest.raises(Interrupted) as e, uninterrupted():
        os.kill(os.getpid(), signal.SIGTERM)
        done.append("json")  # the handler only noted the signal
        done.append("md")
    assert done == ["json", "md"] and e.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the caller's handler is back
