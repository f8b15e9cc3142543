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
from concurrent.futures import Executor, Future, wait
from typing import Any

import numpy as np

from alpha_rl.kernels.decl import Role

RTOL = {"leaves": 1e-6, "max_leaf": 1e-6}  # powf on both sides: an ulp or two apart
FIRST = 3  # differing elements remembered per kernel and array


def count_mismatches(
    name: str, got: np.ndarray, want: np.ndarray, bound: np.ndarray | None = None
) -> np.ndarray:
    """Indices where `got` and `want` (same shape and dtype) differ beyond the array's tolerance
    (`bound`: by more than it, element by element, over its length; the rest exactly). The
    elements whose bits are equal agree whatever the tolerance; only those whose bits differ are
    compared as floats (one pass over the array, not four: an audit compares whole replays)."""
    got, want = got.reshape(-1), want.reshape(-1)
    if got.dtype.kind != "f":
        return np.flatnonzero(got != want)
    bits = np.dtype(f"u{got.dtype.itemsize}")
    at = np.flatnonzero(got.view(bits) != want.view(bits))
    if at.size == 0:
        return at
    g, w = got[at], want[at]
    both_nan = np.isnan(g) & np.isnan(w)
    if bound is not None:
        inside = at < bound.size
        b = bound[np.minimum(at, bound.size - 1)] if bound.size else np.zeros(at.size)
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        with np.errstate(invalid="ignore"):  # inf - inf: equal infinities are caught first
            within = inside & np.isfinite(b) & (np.abs(g64 - w64) <= b)
        close = (g == w) | within
    elif name in RTOL:
        close = np.isclose(g, w, rtol=RTOL[name], atol=0)
    else:
        close = g == w
    return at[~(close | both_nan)]


class KernelAudit:
    """Mismatch counts of the audited launches of one `auditing` block. With `judges` (a thread
    pool: a pack's) each launch's oracle and comparison run there once its arrays are on the
    host, and `ready()` tells when all are done; the counts wait for them."""

    def __init__(self, runtime: Any, judges: Executor | None = None) -> None:
        self.runtime, self.judges = runtime, judges
        self._mismatches: dict[str, int] = {}
        self._first: list[str] = []
        self._pending: list[tuple[str, Future]] = []
        self.launches: dict[str, int] = {}

    @property
    def total(self) -> int:
        """Differing elements over every audited launch."""
        return sum(self.mismatches.values())

    @property
    def mismatches(self) -> dict[str, int]:
        """Differing elements per kernel."""
        self._settle()
        return self._mismatches

    @property
    def first(self) -> list[str]:
        """The first differing elements, as `kernel.array[i, j, k]`."""
        self._settle()
        return self._first

    def waiting(self) -> Future | None:
        """A judgement still running (None once every launch has been judged; always None
        without `judges`)."""
        return next((done for _, done in self._pending if not done.done()), None)

    def ready(self) -> bool:
        """Whether every launch has been judged (always, without `judges`)."""
        return self.waiting() is None

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
        # what the launch wrote, read now: the step's next kernels may change it
        got = {arg.name: be.download(raw) for arg, raw in zip(decl.args, args, strict=True)
               if arg.role == Role.OUT and raw is not None}  # fmt: skip
        self.judge(decl, host_values, got)

    def judge(self, decl: Any, host_values: list, got: dict[str, np.ndarray]) -> Future | None:
        """Count one launch of `decl`: its oracle on `host_values` (the launch's inputs, host
        copies of its arrays, written in place) against `got` (what the device wrote, by array),
        here or in `judges` (its Future)."""
        self.launches[decl.name] = self.launches.get(decl.name, 0) + 1
        if self.judges is None:
            self._count(decl.name, self._judge(decl, host_values, got))
            return None
        done = self.judges.submit(self._judge, decl, host_values, got)
        self._pending.append((decl.name, done))
        return done

    def _judge(self, decl: Any, host_values: list, got: dict[str, np.ndarray]) -> list:
        """The oracle on the host inputs, then each written array against it: [(array, indices
        that differ)]."""
        tolerance = self.runtime.tolerance(decl)
        bounds = {} if tolerance is None else tolerance(*host_values)  # from the inputs
        self.runtime.oracle(decl)(*host_values)
        written = [(arg.name, want) for arg, want in zip(decl.args, host_values, strict=True)
                   if arg.name in got]  # fmt: skip
        return [(name, count_mismatches(name, got[name], want, bounds.get(name)))
                for name, want in written]  # fmt: skip

    def _count(self, name: str, judged: list) -> None:
        bad = 0
        for array, diff in judged:
            bad += diff.size
            if diff.size and len(self._first) < FIRST * 4:
                self._first.append(f"{name}.{array}[{', '.join(map(str, diff[:FIRST]))}]")
        self._mismatches[name] = self._mismatches.get(name, 0) + bad

    def _settle(self) -> None:
        """Count the judged launches, in launch order (waiting for any still running)."""
        for name, done in self._pending:
            self._count(name, done.result())
        self._pending.clear()


def audit_agents(call: Any, launch: Callable[[], None]) -> None:
    """A merged call (kernels/tape.py's AgentCall) audited as one: each array read once for all
    agents (the stretch of its pool's block from agent 0's to the last agent's, where it has
    one), the kernel launched once for all (`launch`), and each agent whose run audits this step
    (its recorded call's `audit`) judged on its own slices, by its own runtime's oracle, into its
    own KernelAudit: what the agents' host copies cost together is one read per array, and their
    oracles run side by side in the judges' threads (waited for before it returns, so that the
    host holds one kernel's copies at a time)."""
    calls = call.calls
    first, agents = calls[0], len(calls)
    decl, be = first.kernel.decl, first.kernel.backend
    pool = getattr(be, "pool", None)
    strides = dict(zip([i for i, arg in enumerate(decl.args) if arg.is_pointer], call.axis,
                       strict=False))  # fmt: skip

    def read(i: int, cache: dict) -> list:
        """Argument i of every agent on the host (views of one read where the pool allows)."""
        arrays = [c.args[i] for c in calls]
        if arrays[0] is None:
            return [None] * agents
        key = tuple(map(id, arrays))  # an argument passed twice is one host copy, as alone
        if key in cache:
            return cache[key]
        stride = strides[i]
        region = pool.region(arrays[0], stride, agents) if pool is not None and stride else None
        if stride == 0:  # one array every agent reads (merge refuses one they all write)
            views = [be.download(arrays[0])] * agents
        elif region is None:
            views = [be.download(array) for array in arrays]
        else:
            whole, n, shape = be.download(region), arrays[0].size, arrays[0].shape
            views = [whole[a * stride : a * stride + n].reshape(shape) for a in range(agents)]
        cache[key] = views
        return views

    before: dict = {}
    inputs = [read(i, before) if arg.is_pointer else [c.values[i] for c in calls]
              for i, arg in enumerate(decl.args)]  # fmt: skip
    launch()
    after: dict = {}  # what the launch wrote, read now: the step's next kernels may change it
    written = {arg.name: read(i, after) for i, arg in enumerate(decl.args)
               if arg.role == Role.OUT and first.args[i] is not None}  # fmt: skip
    judging = [c.audit.judge(decl, [values[agent] for values in inputs],
                             {name: views[agent] for name, views in written.items()})
               for agent, c in enumerate(calls) if c.audit is not None]  # fmt: skip
    # the group's host copies of this kernel's arrays (the replay's storage among them: A times
    # a run's) are let go before the next kernel's are read
    wait([done for done in judging if done is not None])
