"""Will a model fit? Its size from the config and safetensors headers alone, against the memory
free, before a byte of weights is loaded (docs/scale.md).

A run that dies from memory halfway through a 1.4B-parameter float64 load has cost minutes and
may take the machine's other jobs with it; the parameter count is known from the headers, so
the question is asked first. "Free" is the kernel's MemAvailable, or LOOPCERT_MEMORY_FREE when
set (bytes, or with a K/M/G/T suffix, powers of 1024): a cap a shared machine, a container
whose limit /proc does not show, or a test can put on it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from refdec.errors import LoopcertError

FREE_ENV = "LOOPCERT_MEMORY_FREE"
HEADROOM = 0.10  # activations, exact laws and the interpreter beyond the weights: 10% of them ...
HEADROOM_MIN = 256 * 2**20  # ... and at least 256 MiB
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def gib(n: float) -> str:
    """A size in the largest binary unit it fills at least once (3 significant digits): "0.00 GiB"
    said nothing about 1M of free memory."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}" if n / size < 1000 else f"{n / size:.0f} {unit}"
    return f"{n:.0f} bytes"


def parse_bytes(text: str, name: str = FREE_ENV) -> int:
    """'12G', '512MiB', '1000' -> bytes; a LoopcertError naming `name` and the bad value."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise LoopcertError(f"{name} must be a number of bytes (e.g. 12G, 512M, 1000), got {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def free_bytes() -> int | None:
    """The memory a new allocation may use: LOOPCERT_MEMORY_FREE if set, else MemAvailable from
    /proc/meminfo; None where neither is known (then nothing is refused)."""
    cap = os.environ.get(FREE_ENV)
    if cap:
        return parse_bytes(cap)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass(frozen=True)
class Need:
    """The memory a run will hold: its copies of the weights, the buffers sized from the config
    (certify's decoders' KV caches: proofs/cost/kv_need.py) and a headroom beyond the weights."""

    parameters: int
    copies: tuple[tuple[str, int], ...]  # (what, bytes per parameter)
    buffers: tuple[tuple[str, int], ...] = ()  # (what, bytes)

    @property
    def weights(self) -> int:
        return self.parameters * sum(b for _, b in self.copies)

    @property
    def total(self) -> int:
        buffers = sum(b for _, b in self.buffers)
        return self.weights + buffers + max(HEADROOM_MIN, int(HEADROOM * self.weights))

    def describe(self) -> str:
        parts = " + ".join(f"{what} {gib(self.parameters * b)}" for what, b in self.copies)
        buffers = "".join(f", + {what} {gib(b)}" for what, b in self.buffers)
        return f"{gib(self.total)} ({self.parameters / 1e6:,.1f}M parameters: {parts}{buffers}, + headroom)"


def check_fits(need: Need, what: str, hint: str = "") -> None:
    """LoopcertError, before anything is loaded, when `need` exceeds the memory free."""
    free = free_bytes()
    if free is not None and need.total > free:
        source = f" ({FREE_ENV})" if os.environ.get(FREE_ENV) else " (MemAvailable)"
        raise LoopcertError(
            f"{what} does not fit: it needs {need.describe()}, {gib(free)} is free{source}"
            + (f"; {hint}" if hint else "")
        )


def parameters_of(name_or_path) -> int:
    """The parameter count of a preset, "default" or a model folder, from config.json and the
    safetensors headers (refdec.checkpoints.describe): no weights are read."""
    from refdec.checkpoints import describe

    return describe(_source(name_or_path))["parameters"]


def config_of(name_or_path):
    """The ModelConfig of a preset, "default" or a model folder, read as parameters_of reads it."""
    from refdec.checkpoints import recognise

    return recognise(_source(name_or_path))[0]


def _source(name_or_path):
    from refdec.config import PRESETS
    from refdec.load import DEFAULT_MODEL_DIR, not_a_model

    name = str(name_or_path)
    if name not in PRESETS and name != "default" and not Path(name).is_dir():
        raise not_a_model(name)  # load_model's words: "default" is a name too
    return DEFAULT_MODEL_DIR if name == "default" else name_or_path
