"""The cuda backend: GPUArrays in the device's primary context, cubins loaded through PyCUDA.

PyCUDA is imported here and in `alpha_rl.kernels` only, and only when a cuda backend is created,
so the package imports and runs on machines without a GPU or without pycuda installed.

One CUDA context per process: the backend retains the device's primary context (the one the
driver API, cuda-bindings and other libraries share), pushes it, and on `close()` frees every
array it allocated, pops and releases the context. A second open backend in the same process is
refused; jobs of a Hydra multirun that run in one process open and close one each in turn.
"""

from __future__ import annotations

import atexit
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from alpha_rl.backend.base import Backend, check_same
from alpha_rl.errors import BackendError

_open_backend: CudaBackend | None = None


def import_pycuda():
    """pycuda.driver, initialised; BackendError with what to do when it cannot be used."""
    try:
        import pycuda.driver as drv
    except ImportError as exc:
        raise BackendError(
            "pycuda is not installed (it needs a CUDA driver to build): "
            "pip install -e '.[gpu]' on a GPU machine, or use backend=numpy"
        ) from exc
    try:
        drv.init()
    except drv.Error as exc:
        raise BackendError(
            f"the CUDA driver did not initialise ({exc}); use backend=numpy"
        ) from exc
    return drv


def free_device_memory(device: int = 0) -> int:
    """Bytes free on CUDA device `device` (cuMemGetInfo), asked before the backend opens: its
    primary context (the one CudaBackend uses) is retained for the query and released after."""
    drv = import_pycuda()
    count = drv.Device.count()
    if not 0 <= device < count:
        raise BackendError(f"CUDA device {device} requested, {count} present")
    ctx = drv.Device(device).retain_primary_context()
    ctx.push()
    try:
        free, _total = drv.mem_get_info()
    finally:
        drv.Context.pop()
        ctx.detach()
    return int(free)


def mps_enabled(device: int = 0) -> bool:
    """Whether this process's CUDA contexts on `device` are CUDA MPS clients
    (CU_DEVICE_ATTRIBUTE_MPS_ENABLED). The driver decides once, when it initialises: it connects
    to the MPS control daemon named by CUDA_MPS_PIPE_DIRECTORY, and where it cannot, it runs
    without MPS and says nothing; this is how to find out."""
    import_pycuda()  # cuInit, with its errors
    try:
        from cuda.bindings import driver as cu
    except ImportError as exc:
        raise BackendError(
            "cuda-bindings is not installed (pip install -e '.[gpu]'): it asks the driver "
            "whether a device runs under MPS"
        ) from exc
    err, value = cu.cuDeviceGetAttribute(
        cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MPS_ENABLED, cu.CUdevice(device)
    )
    if err != cu.CUresult.CUDA_SUCCESS:
        raise BackendError(f"CUDA device {device}: cannot ask whether it runs under MPS ({err})")
    return bool(value)


class CudaBackend(Backend):
    """Device arrays are pycuda GPUArrays on GPU `device`."""

    name = "cuda"

    def __init__(self, device: int = 0) -> None:
        global _open_backend
        if _open_backend is not None:
            raise BackendError(
                "a cuda backend is already open in this process (one CUDA context per process); "
                "close it before opening another"
            )
        drv = import_pycuda()
        count = drv.Device.count()
        if not 0 <= device < count:
            raise BackendError(f"CUDA device {device} requested, {count} present")
        self._drv = drv
        self._device = drv.Device(device)
        self._ctx = self._device.retain_primary_context()
        self._ctx.push()
        import pycuda.gpuarray as gpuarray

        self._gpuarray = gpuarray
        self._arrays: list[weakref.ref] = []
        self._modules: list[Any] = []
        self._closed = False
        major, minor = self._device.compute_capability()
        self.arch = f"{major}{minor}"
        _open_backend = self
        atexit.register(self.close)

    # --- arrays ---
    def _track(self, arr: Any) -> Any:
        self._arrays.append(weakref.ref(arr))
        if len(self._arrays) > 4096:
            self._arrays = [r for r in self._arrays if r() is not None]
        return arr

    def alloc(self, shape: int | tuple[int, ...], dtype: Any) -> Any:
        return self._track(self._gpuarray.empty(shape, dtype=np.dtype(dtype)))

    def upload(self, host: np.ndarray) -> Any:
        return self._track(self._gpuarray.to_gpu(np.ascontiguousarray(host)))

    def download(self, arr: Any, stream: Any = None) -> np.ndarray:
        if stream is None:
            return arr.get()  # the legacy default stream: after all work of every stream
        out = arr.get_async(stream=stream)  # into pageable memory: returns once copied
        stream.synchronize()
        return out

    def write(self, arr: Any, host: np.ndarray) -> None:
        arr.set(np.ascontiguousarray(host, dtype=arr.dtype).reshape(arr.shape))

    def fill(self, arr: Any, value: float | int, stream: Any = None) -> None:
        if arr.size == 0:
            return
        pattern = np.array([value], dtype=arr.dtype).view(np.uint8)
        size, drv = arr.dtype.itemsize, self._drv
        if size in (4, 2, 1):
            word = int(pattern.view({4: np.uint32, 2: np.uint16, 1: np.uint8}[size])[0])
            if stream is None:
                getattr(drv, f"memset_d{8 * size}")(arr.gpudata, word, arr.size)
            else:
                getattr(drv, f"memset_d{8 * size}_async")(arr.gpudata, word, arr.size, stream)
        elif stream is not None:
            raise BackendError(
                f"a fill of {arr.dtype} cannot be queued on a stream: the driver has no 8-byte "
                "memset (fill it without a stream)"
            )
        else:  # no 8-byte memset in the driver API: copy a host-filled array
            self._drv.memcpy_htod(arr.gpudata, np.full(arr.shape, value, dtype=arr.dtype))

    def copy(self, dst: Any, src: Any, stream: Any = None) -> None:
        check_same(dst, src)
        if src.size:
            self._drv.memcpy_dtod_async(dst.gpudata, src.gpudata, src.nbytes, stream)

    def is_array(self, obj: object) -> bool:
        return isinstance(obj, self._gpuarray.GPUArray)

    # --- modules ---
    def load_module(self, path: Path) -> Any:
        """Load a cubin into this context."""
        try:
            module = self._drv.module_from_file(str(path))
        except self._drv.Error as exc:
            raise BackendError(f"cannot load {path} on this GPU (sm_{self.arch}): {exc}") from exc
        self._modules.append(module)
        return module

    def module_constant_i32(self, module: Any, symbol: str) -> int | None:
        """Value of a 4-byte `__constant__` of a loaded module, or None when it has none."""
        try:
            ptr, size = module.get_global(symbol)
        except self._drv.LogicError:
            return None
        if size != 4:
            return None
        out = np.empty(1, dtype=np.int32)
        self._drv.memcpy_dtoh(out, ptr)
        return int(out[0])

    # --- lifecycle ---
    def new_stream(self) -> Any:
        return self._drv.Stream()

    def synchronize(self) -> None:
        self._drv.Context.synchronize()

    def describe(self) -> dict[str, str]:
        major, minor = self._device.compute_capability()
        return {
            "backend": self.name,
            "gpu": self._device.name(),
            "compute_capability": f"{major}.{minor}",
            "cuda_driver": str(self._drv.get_driver_version()),
        }

    def close(self) -> None:
        global _open_backend
        if self._closed:
            return
        self._closed = True
        try:
            self._drv.Context.synchronize()
            for ref in self._arrays:
                arr = ref()
                if arr is not None and hasattr(arr.gpudata, "free"):
                    arr.gpudata.free()
            self._arrays.clear()
            self._modules.clear()
        finally:
            self._drv.Context.pop()
            self._ctx.detach()
            if _open_backend is self:
                _open_backend = None
