"""The small array interface both backends share: alloc, zeros, upload, download, fill, copy."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

DeviceArray = Any  # numpy.ndarray on the numpy backend, pycuda GPUArray on the cuda backend


def check_same(dst: Any, src: Any) -> None:
    """Refuse a copy between arrays of different sizes or dtypes (naming both)."""
    if dst.size != src.size or dst.dtype != src.dtype:
        raise ValueError(
            f"copy: destination {dst.size} x {dst.dtype} and source {src.size} x {src.dtype} differ"
        )


class Backend(ABC):
    """Owns device memory (and, for cuda, the process's CUDA context)."""

    name: str
    # while a step is recorded (kernels/tape.py), the launches, copies and fills it queues,
    # appended in order instead of run; None: they run at once
    tape: list | None = None

    @abstractmethod
    def alloc(self, shape: int | tuple[int, ...], dtype: Any) -> DeviceArray:
        """Uninitialised device array (its contents are unspecified)."""

    def zeros(self, shape: int | tuple[int, ...], dtype: Any) -> DeviceArray:
        """Device array of zeros."""
        arr = self.alloc(shape, dtype)
        self.fill(arr, 0)
        return arr

    @abstractmethod
    def upload(self, host: np.ndarray) -> DeviceArray:
        """Copy a host array to a new device array (later host changes do not affect it)."""

    @abstractmethod
    def download(self, arr: DeviceArray, stream: Any = None) -> np.ndarray:
        """Copy a device array to a new host ndarray once the device work queued before it is
        done: all of it, or, given `stream`, only that queued on `stream` (other streams go on)."""

    @abstractmethod
    def write(self, arr: DeviceArray, host: np.ndarray) -> None:
        """Copy a host array of the same size and dtype into an existing device array."""

    @abstractmethod
    def fill(self, arr: DeviceArray, value: float | int, stream: Any = None) -> None:
        """Set every element of a device array to `value` (queued on `stream` when given: a
        CUDA graph may capture it)."""

    @abstractmethod
    def copy(self, dst: DeviceArray, src: DeviceArray, stream: Any = None) -> None:
        """Copy device array `src` into `dst` (same size and dtype), queued on `stream`."""

    @abstractmethod
    def is_array(self, obj: object) -> bool:
        """Whether `obj` is a device array of this backend."""

    def new_stream(self) -> Any:
        """A stream to queue work on (None: the default stream, and always on numpy)."""
        return None

    def synchronize(self) -> None:
        """Wait until all queued device work is done (no-op on numpy)."""
        return None

    def close(self) -> None:
        """Release device memory and contexts (idempotent)."""
        return None

    def describe(self) -> dict[str, str]:
        """Facts worth recording with a run (backend, device name, ...)."""
        return {"backend": self.name}

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Copy:
    """A device-to-device copy a recorded step queued: `run` queues it on a stream."""

    backend: Backend
    dst: DeviceArray
    src: DeviceArray

    def run(self, stream: Any) -> None:
        self.backend.copy(self.dst, self.src, stream)


@dataclass(frozen=True)
class Fill:
    """A fill a recorded step queued: `run` queues it on a stream."""

    backend: Backend
    array: DeviceArray
    value: float | int

    def run(self, stream: Any) -> None:
        self.backend.fill(self.array, self.value, stream)


class RunBackend(Backend):
    """A run's view of a backend it may share with other runs (a pack's, one CUDA context):
    every call is the backend's, except that a `download`, `fill` or `copy` given no stream is
    ordered on this run's `stream` only. On the shared backend each goes to the legacy default
    stream, which waits for every run's queued work: each log point, probe and audit read of
    one run would drain the whole pack. All of a run's device work is queued on its stream (or
    on the legacy stream, which its stream waits for), so its reads see what they see alone.
    What a backend has beyond this interface (the cuda backend's modules, its arch) is the
    backend's own."""

    def __init__(self, backend: Backend, stream: Any) -> None:
        self.backend, self.stream = backend, stream
        self.name = backend.name

    def __getattr__(self, name: str) -> Any:
        if name == "backend":  # not yet set (a copy being built): never recurse
            raise AttributeError(name)
        return getattr(self.backend, name)

    def alloc(self, shape: int | tuple[int, ...], dtype: Any) -> DeviceArray:
        return self.backend.alloc(shape, dtype)

    def zeros(self, shape: int | tuple[int, ...], dtype: Any) -> DeviceArray:
        return self.backend.zeros(shape, dtype)

    def upload(self, host: np.ndarray) -> DeviceArray:
        return self.backend.upload(host)

    def download(self, arr: DeviceArray, stream: Any = None) -> np.ndarray:
        """`Backend.download`, after this run's stream when no other is given."""
        return self.backend.download(arr, self.stream if stream is None else stream)

    def write(self, arr: DeviceArray, host: np.ndarray) -> None:
        self.backend.write(arr, host)

    def fill(self, arr: DeviceArray, value: float | int, stream: Any = None) -> None:
        """`Backend.fill`, queued on this run's stream when no other is given (a fill on the
        legacy stream waits for every run's queued work, as a read there does); recorded
        instead while the run's step is (`tape`)."""
        if self.tape is not None:
            self.tape.append(Fill(self.backend, arr, value))
            return
        self.backend.fill(arr, value, self.stream if stream is None else stream)

    def copy(self, dst: DeviceArray, src: DeviceArray, stream: Any = None) -> None:
        """`Backend.copy`, queued on this run's stream when no other is given; recorded instead
        while the run's step is (`tape`)."""
        if self.tape is not None:
            check_same(dst, src)
            self.tape.append(Copy(self.backend, dst, src))
            return
        self.backend.copy(dst, src, self.stream if stream is None else stream)

    def is_array(self, obj: object) -> bool:
        return self.backend.is_array(obj)

    def new_stream(self) -> Any:
        return self.backend.new_stream()

    def synchronize(self) -> None:
        """All queued device work of every run done (the backend's)."""
        self.backend.synchronize()

    def close(self) -> None:
        self.backend.close()

    def describe(self) -> dict[str, str]:
        return self.backend.describe()
