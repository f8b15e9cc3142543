"""Timing helpers shared by the benchmarks: CUDA events; CUDA graphs come from the package."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from alpha_rl.backend.graph import Graph, graphs_available


def time_events(drv, stream, run: Callable[[], None], reps: int = 200, repeats: int = 7) -> float:
    """Median microseconds per call of `run()` between CUDA events recorded on `stream`."""
    for _ in range(20):
        run()
    samples = []
    for _ in range(repeats):
        start, end = drv.Event(), drv.Event()
        start.record(stream)
        for _ in range(reps):
            run()
        end.record(stream)
        end.synchronize()
        samples.append(start.time_till(end) * 1e3 / reps)
    return statistics.median(samples)


__all__ = ["Graph", "graphs_available", "time_events"]
