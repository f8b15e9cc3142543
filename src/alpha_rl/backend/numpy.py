"""The numpy backend: device arrays are ndarrays, kernels are their NumPy oracles."""

from __future__ import annotations

import platform
from typing import Any

import numpy as np

from alpha_rl.backend.base import Backend, check_same


class NumpyBackend(Backend):
    """Runs everything on the host CPU; the reference every cuda result is compared with."""

    name = "numpy"

    def alloc(self, shape: int | tuple[int, ...], dtype: Any) -> np.ndarray:
        return np.empty(shape, dtype=dtype)

    def zeros(self, shape: int | tuple[int, ...], dtype: Any) -> np.ndarray:
        return np.zeros(shape, dtype=dtype)

    def upload(self, host: np.ndarray) -> np.ndarray:
        return np.array(host, copy=True, order="C")

    def download(self, arr: np.ndarray, stream: Any = None) -> np.ndarray:
        return np.array(arr, copy=True)

    def write(self, arr: np.ndarray, host: np.ndarray) -> None:
        arr[...] = np.asarray(host, dtype=arr.dtype).reshape(arr.shape)

    def fill(self, arr: np.ndarray, value: float | int, stream: Any = None) -> None:
        arr.fill(value)

    def copy(self, dst: np.ndarray, src: np.ndarray, stream: Any = None) -> None:
        check_same(dst, src)
        np.copyto(dst, src)

    def is_array(self, obj: object) -> bool:
        return isinstance(obj, np.ndarray)

    def describe(self) -> dict[str, str]:
        return {"backend": self.name, "cpu": platform.processor() or platform.machine()}
