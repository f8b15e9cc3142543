"""CUDA graphs on PyCUDA streams, through cuda-bindings (PyCUDA has no graph API of its own).

`Graph(stream, issue)` captures the launches `issue()` makes on `stream` (nothing runs while it
captures); `launch()` replays them on the same stream at about a microsecond per kernel instead
of the several microseconds of host time each checked launch costs. The captured launches keep
their device pointers and scalar arguments: anything that changes from one replay to the next
must live on the device (counters, ISV slots).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from alpha_rl.errors import BackendError


def graphs_available() -> bool:
    """Whether cuda-bindings (cuda.bindings.driver) can be imported."""
    try:
        from cuda.bindings import driver  # noqa: F401
    except ImportError:
        return False
    return True


class Graph:
    """Launches issued by `issue()` on `stream`, captured once; `launch()` replays them."""

    def __init__(self, stream: Any, issue: Callable[[], None]) -> None:
        try:
            from cuda.bindings import driver as cu
        except ImportError as exc:
            raise BackendError(
                "CUDA graphs need cuda-bindings (pip install cuda-bindings); or set "
                "backend.graph=false to launch every kernel one by one"
            ) from exc
        self.cu, self.handle = cu, cu.CUstream(stream.handle)
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        self._check(cu.cuStreamBeginCapture(self.handle, mode), "begin capture")
        try:
            issue()
        finally:
            (self.graph,) = self._check(cu.cuStreamEndCapture(self.handle), "end capture")
        (self.exe,) = self._check(cu.cuGraphInstantiate(self.graph, 0), "instantiate")
        self.closed = False

    def _check(self, result: tuple, what: str) -> tuple:
        if result[0] != self.cu.CUresult.CUDA_SUCCESS:
            raise BackendError(f"CUDA graph {what} failed: {result[0]}")
        return result[1:]

    def launch(self) -> None:
        """Replay the captured launches on the stream."""
        self._check(self.cu.cuGraphLaunch(self.exe, self.handle), "launch")

    def close(self) -> None:
        """Free the graph (before the context goes)."""
        if not self.closed:
            self.closed = True
            self._check(self.cu.cuGraphExecDestroy(self.exe), "destroy")
            self._check(self.cu.cuGraphDestroy(self.graph), "destroy")
