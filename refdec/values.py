"""Small helpers every package shares: JSON-able plain values, dtype names, device checks.

One home each, so that a certificate, a speed report, a shard and a model card write the same
value the same way, and a bad `--device` gets the same message from every command.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from refdec.errors import LoopcertError


def jsonable(x: Any) -> Any:
    """`x` as plain JSON data: dict keys as strings, tuples as lists, tensors and numpy values
    through `tolist()`, non-finite floats as the strings "inf", "-inf", "nan" (strict JSON has
    no such numbers), anything else unknown as its str()."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, int):
        return x
    if hasattr(x, "tolist"):  # torch tensors, numpy arrays and numpy scalars
        return jsonable(x.tolist())
    if isinstance(x, float):
        return x if math.isfinite(x) else str(x)
    return str(x)


NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}  # how jsonable writes them


def numbers_back(x: Any) -> Any:
    """The inverse of jsonable's rule for non-finite floats, over data known to be numbers (a
    measurement's section read back from JSON): the strings "inf", "-inf", "nan" become floats
    again, everything else is kept. Not for data that may hold text."""
    if isinstance(x, dict):
        return {k: numbers_back(v) for k, v in x.items()}
    if isinstance(x, list):
        return [numbers_back(v) for v in x]
    return NON_FINITE.get(x, x) if isinstance(x, str) else x


def dtype_name(dtype: torch.dtype) -> str:
    """torch.float32 -> "float32": the name every artefact and message uses."""
    return str(dtype).removeprefix("torch.")


def check_device(device: str) -> str:
    """`device` if it names the CPU or a CUDA device that is available, else LoopcertError
    naming it."""
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError, ValueError):
        kind = None
    if kind not in ("cpu", "cuda"):
        raise LoopcertError(f"--device must be cpu or cuda[:N], got {device!r}")
    if kind == "cuda" and not torch.cuda.is_available():
        raise LoopcertError(f"--device {device!r} requested but CUDA is not available")
    return device
