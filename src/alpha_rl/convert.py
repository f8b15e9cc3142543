"""Typed config values: (key, raw value) -> int, float or str, or the caller's error.

Each config section reports a bad value in its own words (`fail(key, value, what)`, where `what`
is "an integer", "a finite number" or "a string"); these converters only decide what is bad.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import numpy as np

F32_MAX = float(np.finfo(np.float32).max)  # the largest magnitude the kernels hold

Fail = Callable[[str, object, str], Exception]


def to_int(key: str, value: object, fail: Fail) -> int:
    """An integer (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise fail(key, value, "an integer")
    return int(value)


def to_float(key: str, value: object, fail: Fail) -> float:
    """A finite real number (not a bool) that float32, in which the kernels compute, can hold."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise fail(key, value, "a finite number")
    if abs(float(value)) > F32_MAX:
        raise fail(key, value, f"a number float32 can hold (|x| <= {F32_MAX:.4g})")
    return float(value)


def to_str(key: str, value: object, fail: Fail) -> str:
    """A string."""
    if not isinstance(value, str):
        raise fail(key, value, "a string")
    return value
