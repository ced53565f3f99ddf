"""No --jobs worker outlives its parent: SIGKILL the certify process (no `finally` runs) once its
two workers exist, and both are gone soon after (proofs/run/jobs.py die_with_parent)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads children from /proc")


def children(pid: int) -> set[int]:
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.add(int(stat.parent.name))
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_workers_die_with_a_killed_parent(tmp_path):
    argv = ["certify", "tiny-raven", "--quick", "--jobs", "2", "--out", str(tmp_path)]
    code = "import sys; from loopcert.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    parent = subprocess.Popen(
        [sys.executable, "-c", code, *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 180
        workers: set[int] = set()
        while len(workers) < 2 and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.2)
            workers = children(parent.pid)
        assert len(workers) == 2, f"certify --jobs 2 started {len(workers)} workers"
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    # PR_SET_PDEATHSIG kills them as the parent dies (the watcher within 0.5 s elsewhere); the
    # bound is generous for a busy machine, not a measure of how fast
    deadline = time.monotonic() + 60
    while any(alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [w for w in workers if alive(w)]
    for w in left:  # never leave them behind, even when the test fails
        os.kill(w, signal.SIGKILL)
    assert not left, f"workers {left} outlived their parent"
