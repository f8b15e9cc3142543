"""Numbers as the kill check's table prints them."""

from __future__ import annotations

import numpy as np


def fmt(x: float) -> str:
    """A number for the table: thousands separated from 1000 on, 4 significant digits below."""
    if not np.isfinite(x):
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def fmt_interval(est: float, lo: float, hi: float, sign: bool = False) -> str:
    """`est [lo, hi]`, `est [no interval]` without bounds."""

    def f(x: float) -> str:
        return ("+" if sign and x >= 0 else "") + fmt(x)

    bounds = f"[{f(lo)}, {f(hi)}]" if np.isfinite(lo) and np.isfinite(hi) else "[no interval]"
    return f"{f(est)} {bounds}"


def fmt_p(p: float) -> str:
    """`p 0.0031`, `p < 1e-6`."""
    return "p < 1e-6" if p < 1e-6 else f"p {p:.2g}"
