"""Timing helpers shared by the benchmarks: CUDA events, and capturing launches into a CUDA graph
with cuda-bindings on a PyCUDA stream (PyCUDA has no graph API of its own)."""

from __future__ import annotations

import statistics
from collections.abc import Callable


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


class Graph:
    """Launches issued by `issue()` on `stream`, captured once; `launch()` replays them."""

    def __init__(self, stream, issue: Callable[[], None]) -> None:
        from cuda.bindings import driver as cu

        self.cu, self.handle = cu, cu.CUstream(stream.handle)
        self._check(
            cu.cuStreamBeginCapture(
                self.handle, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
            )
        )
        issue()
        (self.graph,) = self._check(cu.cuStreamEndCapture(self.handle))
        (self.exe,) = self._check(cu.cuGraphInstantiate(self.graph, 0))

    def _check(self, result: tuple) -> tuple:
        if result[0] != self.cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuda-bindings call failed: {result[0]}")
        return result[1:]

    def launch(self) -> None:
        self._check(self.cu.cuGraphLaunch(self.exe, self.handle))

    def close(self) -> None:
        self._check(self.cu.cuGraphExecDestroy(self.exe))
        self._check(self.cu.cuGraphDestroy(self.graph))


def graphs_available() -> bool:
    try:
        from cuda.bindings import driver  # noqa: F401
    except ImportError:
        return False
    return True
