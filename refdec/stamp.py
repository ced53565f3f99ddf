"""The one stamp of every generated artefact (docs/design.md section 9): the certificate, the
speedup report, the benchmark baseline and the model card say where they came from in the same
words: commit, date, versions, device, dtype and seeds.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

import numpy as np
import torch

from refdec.values import dtype_name

ROOT = Path(__file__).resolve().parent.parent


def git_commit() -> str:
    """The checkout's HEAD, "(with uncommitted changes)" when tracked files differ from it;
    "unknown" outside a git checkout."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        )
        if sha.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return sha.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def device_name(device) -> str:
    """The GPU's name on CUDA; the CPU's model name (from /proc/cpuinfo where there is one)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        return cpu


def stamp(model: str, device, dtype, seeds: dict) -> dict:
    """commit, date (UTC, ISO 8601), versions, platform, device (+ its name, torch threads, CPU
    count), dtype, model and seeds (what each seed drives, in words or numbers). Callers add
    their own keys (mode, command, ...) beside these, never instead of them."""
    return {
        "commit": git_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "cuda": torch.version.cuda if torch.cuda.is_available() else "none",
        "platform": platform.platform(),
        "device": str(torch.device(device)),
        "device_name": device_name(device),
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "dtype": dtype_name(dtype),
        "model": model,
        "seeds": seeds,
    }
