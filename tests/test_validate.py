"""refdec.validate: the one integer check (bools refused, numpy integers accepted)."""

import numpy as np
import pytest

from refdec.errors import LoopcertError
from refdec.validate import check_int, is_int


@pytest.mark.parametrize("value,minimum,ok", [(0, None, True), (-3, None, True), (3, 1, True), (1, 1, True),
                                              (0, 1, False), (np.int64(4), 2, True), (True, None, False),
                                              (False, 0, False), (1.0, None, False), ("1", None, False),
                                              (None, None, False), (np.float64(2), None, False)])
def test_is_int(value, minimum, ok):
    assert is_int(value, minimum) is ok


def test_check_int_returns_a_plain_int_or_names_the_value():
    v = check_int("n", np.int32(5), 1)
    assert v == 5 and type(v) is int
    with pytest.raises(LoopcertError, match=r"depth must be an integer >= 1, got 0"):
        check_int("depth", 0, 1)
    with pytest.raises(LoopcertError, match=r"seed must be an integer, got True"):
        check_int("seed", True)
