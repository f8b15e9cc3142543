"""Kernel audit: a device launch checked against its NumPy oracle on the same inputs (DESIGN §10).

While `KernelRuntime.auditing(names)` is active, each launch of an audited kernel copies every
array argument to the host, launches the kernel as usual, runs the oracle on the host copies and
compares each written array element by element. Integers must match exactly; floats too, except
the PER leaves, whose `powf` may round differently on the device (one part in 10^6 allowed), and
the TF32 products (agent.precision=tf32), whose float32 sums the tensor cores add in their own
order: each output within the bound its oracle's module declares (`TOLERANCES`).
The counts land in `mismatches` per kernel, and the first differing elements in `first`, so a
report can name the kernel, the array and the index.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from alpha_rl.kernels.decl import Role

RTOL = {"leaves": 1e-6, "max_leaf": 1e-6}  # powf on both sides: an ulp or two apart
FIRST = 3  # differing elements remembered per kernel and array


def count_mismatches(
    name: str, got: np.ndarray, want: np.ndarray, bound: np.ndarray | None = None
) -> np.ndarray:
    """Indices where `got` and `want` (same shape and dtype) differ beyond the array's tolerance
    (`bound`: by more than it, element by element, over its length; the rest exactly)."""
    if got.dtype.kind != "f":
        return np.flatnonzero(got != want)
    both_nan = np.isnan(got) & np.isnan(want)
    if bound is not None:
        n = bound.size
        g, w = got[:n].astype(np.float64), want[:n].astype(np.float64)
        with np.errstate(invalid="ignore"):  # inf - inf: equal infinities are caught first
            within = np.isfinite(bound) & (np.abs(g - w) <= bound)
        close = np.concatenate([(g == w) | within, got[n:] == want[n:]])
    elif name in RTOL:
        close = np.isclose(got, want, rtol=RTOL[name], atol=0)
    else:
        close = got == want
    return np.flatnonzero(~(close | both_nan))


class KernelAudit:
    """Mismatch counts of the audited launches of one `auditing` block."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.mismatches: dict[str, int] = {}
        self.launches: dict[str, int] = {}
        self.first: list[str] = []

    @property
    def total(self) -> int:
        """Differing elements over every audited launch."""
        return sum(self.mismatches.values())

    def run(self, kernel: Any, args: tuple, values: list, launch: Callable[[], None]) -> None:
        """Launch `kernel` on the device, its oracle on host copies of `args`; count differences."""
        decl, be = kernel.decl, self.runtime.backend
        host: dict[int, np.ndarray] = {}  # one host copy per device array, aliases shared
        host_values = []
        for arg, raw, value in zip(decl.args, args, values, strict=True):
            if not arg.is_pointer:
                host_values.append(value)
            elif raw is None:
                host_values.append(None)
            else:
                host_values.append(host.setdefault(id(raw), be.download(raw)))
        launch()
        tolerance = self.runtime.tolerance(decl)
        bounds = {} if tolerance is None else tolerance(*host_values)  # from the inputs
        self.runtime.oracle(decl)(*host_values)
        bad = 0
        for arg, raw, want in zip(decl.args, args, host_values, strict=True):
            if arg.role != Role.OUT or raw is None:
                continue
            diff = count_mismatches(arg.name, be.download(raw), want, bounds.get(arg.name))
            bad += diff.size
            if diff.size and len(self.first) < FIRST * 4:
                self.first.append(f"{decl.name}.{arg.name}[{', '.join(map(str, diff[:FIRST]))}]")
        self.mismatches[decl.name] = self.mismatches.get(decl.name, 0) + bad
        self.launches[decl.name] = self.launches.get(decl.name, 0) + 1
