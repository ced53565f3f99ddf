"""The one table of float tolerances for tests, keyed by dtype (xformers-style).

Use it wherever two float results are compared after a reduction (sum, matmul, softmax, ...):
such results depend on the kernel the CPU dispatches to (ATEN_CPU_CAPABILITY default / avx2 /
avx512 sum in different orders), so `==` is kept only where bitwise equality is the claim
under test (both sides run the same kernels at the same width, e.g. fastdec's fixed-width mode).

The bounds are a few hundred ulps at the sizes the tests use (vocab <= 256, d_model <= 64);
`scale` widens them for longer reductions (xformers grows its tolerances with size too).
"""

from __future__ import annotations

import math

import torch

# dtype -> (rtol, atol): a few hundred ulps for float64/float32, a few ulps for the 16-bit types.
TOL: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-12, 1e-12),
    torch.float32: (1e-5, 1e-6),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16: (2e-3, 1e-3),
}


def tol(dtype: torch.dtype = torch.float64, scale: float = 1.0) -> dict[str, float]:
    """{"rtol", "atol"} for `dtype`, times `scale` (for reductions longer than the suite's usual)."""
    rtol, atol = TOL[dtype]
    return {"rtol": rtol * scale, "atol": atol * scale}


def approx(expected, dtype: torch.dtype = torch.float64, scale: float = 1.0):
    """pytest.approx with the table's tolerances (Python floats are float64)."""
    import pytest

    t = tol(dtype, scale)
    return pytest.approx(expected, rel=t["rtol"], abs=t["atol"])


def assert_close(actual: torch.Tensor, expected, scale: float = 1.0, msg: str = "") -> None:
    """`actual` equals `expected` within the table's tolerance for actual.dtype; on failure the
    message names the worst element, its index and the share of elements out of tolerance."""
    actual = torch.as_tensor(actual)
    expected = torch.as_tensor(expected, dtype=actual.dtype).expand_as(actual)
    t = tol(actual.dtype, scale)
    a, e = actual.double(), expected.double()
    err = (a - e).abs()
    bound = t["atol"] + t["rtol"] * e.abs()
    bad = ~(err <= bound)  # NaN counts as bad
    if bool(bad.any()):
        worst = int(torch.argmax(torch.where(bad, err.nan_to_num(math.inf), -1.0)))
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), a.shape)) if a.dim() else ()
        raise AssertionError(
            f"{msg + ': ' if msg else ''}{int(bad.sum())}/{bad.numel()} elements out of tolerance "
            f"({actual.dtype}: rtol={t['rtol']:g}, atol={t['atol']:g}); worst at {idx}: "
            f"{float(a.flatten()[worst])!r} vs {float(e.flatten()[worst])!r}"
        )
