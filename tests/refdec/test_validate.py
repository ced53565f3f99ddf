"""refdec.validate: the one integer check and the one number-in-a-range check (bools refused, numpy
integers and floats accepted, NaN and infinities never in range)."""

import numpy as np
import pytest

from refdec.errors import LoopcertError
from refdec.validate import check_int, check_number, is_int, is_number


@pytest.mark.parametrize(
    "value,minimum,ok",
    [
        (0, None, True),
        (-3, None, True),
        (3, 1, True),
        (1, 1, True),
        (0, 1, False),
        (np.int64(4), 2, True),
        (True, None, False),
        (False, 0, False),
        (1.0, None, False),
        ("1", None, False),
        (None, None, False),
        (np.float64(2), None, False),
    ],
)
def test_is_int(value, minimum, ok):
    assert is_int(value, minimum) is ok


def test_check_int_returns_a_plain_int_or_names_the_value():
    v = check_int("n", np.int32(5), 1)
    assert v == 5 and type(v) is int
    with pytest.raises(LoopcertError, match=r"depth must be an integer >= 1, got 0"):
        check_int("depth", 0, 1)
    with pytest.raises(LoopcertError, match=r"seed must be an integer, got True"):
        check_int("seed", True)


# (value, low, high, low_open, high_open, accepted): each bound closed and open, on and beside it
NUMBERS = [
    (0.5, 0, 1, True, True, True),
    (0, 0, 1, False, False, True),
    (0, 0, 1, True, False, False),
    (1, 0, 1, False, False, True),
    (1, 0, 1, False, True, False),
    (1.0000001, 0, 1, False, False, False),
    (-1e-300, 0, None, False, False, False),
    (1e300, 0, None, False, False, True),
    (-5.0, None, None, False, False, True),
    (np.float32(0.25), 0, 1, True, True, True),
    (np.int64(3), 1, None, False, False, True),
    (float("nan"), None, None, False, False, False),
    (float("inf"), 0, None, False, False, False),
    (-float("inf"), None, 0, False, False, False),
    (True, 0, 1, False, False, False),
    ("0.5", 0, 1, False, False, False),
    (None, None, None, False, False, False),
    (complex(0.5, 0), 0, 1, False, False, False),
]


@pytest.mark.parametrize("value,low,high,low_open,high_open,ok", NUMBERS)
def test_is_number(value, low, high, low_open, high_open, ok):
    assert is_number(value, low, high, low_open=low_open, high_open=high_open) is ok


def test_check_number_returns_a_plain_float_or_names_the_range_and_value():
    v = check_number("top_p", np.float32(0.5), 0, 1, low_open=True)
    assert v == 0.5 and type(v) is float
    with pytest.raises(LoopcertError, match=r"top_p must be a finite number in \(0, 1\], got 0"):
        check_number("top_p", 0, 0, 1, low_open=True)
    with pytest.raises(LoopcertError, match=r"alpha must be a finite number in \(0, 1\), got 1"):
        check_number("alpha", 1, 0, 1, low_open=True, high_open=True)
    with pytest.raises(LoopcertError, match=r"temperature must be a finite number >= 0, got nan"):
        check_number("temperature", float("nan"), 0)
    with pytest.raises(LoopcertError, match=r"x must be a finite number < 2, got True"):
        check_number("x", True, high=2, high_open=True)
