"""tests/tolerances.py: the dtype-keyed table and assert_close, with negative controls."""

import pytest
import torch
from tolerances import TOL, approx, assert_close


def test_every_dtype_the_suite_uses_has_a_row():
    assert set(TOL) == {torch.float64, torch.float32, torch.bfloat16, torch.float16}
    assert TOL[torch.float64] < TOL[torch.float32] < TOL[torch.float16] < TOL[torch.bfloat16]


def test_reordered_sum_is_close_but_a_real_difference_is_named():
    x = torch.rand(1000, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert_close(x.sum(), x.flip(0).cumsum(0)[-1])  # another summation order
    assert float(x.sum()) == approx(float(x.double().numpy().sum()))
    y = x.clone()
    y[417] += 1e-9
    with pytest.raises(AssertionError, match=r"1/1000 elements .* worst at \(417,\)"):
        assert_close(y, x)
    with pytest.raises(AssertionError, match="nan"):
        assert_close(torch.tensor([float("nan")]), 0.0)
    with pytest.raises(AssertionError):
        assert 1.0 + 1e-9 == approx(1.0)
