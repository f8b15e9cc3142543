"""Host time per kernel launch: PyCUDA's prepared call vs alpha_rl's checked BoundKernel call.

    python3 benchmarks/launch_overhead.py [--calls 20000]

Launches rng_fill with n=1 (the device work is negligible), synchronising only at the end, and
reports the median over repeats of (wall time / calls). Needs a GPU, pycuda and `make cubins`.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from alpha_rl.backend.cuda import CudaBackend
from alpha_rl.kernels import rng
from alpha_rl.kernels.registry import stems
from alpha_rl.kernels.runtime import KernelRuntime


def _per_call_us(launch, calls: int, backend: CudaBackend, repeats: int = 5) -> float:
    samples = []
    for _ in range(repeats):
        backend.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            launch()
        backend.synchronize()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    with CudaBackend() as backend:
        out_u32, out_u = backend.alloc(1, np.uint32), backend.alloc(1, np.float32)
        runtime = KernelRuntime(backend, {})
        bound = runtime.bind(rng.FILL)
        function = runtime._module(stems()["rng"]).get_function(rng.FILL.name)
        function.prepare(rng.FILL.prepared_format())
        p_u32, p_u = int(out_u32.gpudata), int(out_u.gpudata)
        scalars = (np.int32(1), np.uint64(1), np.uint32(0), np.uint64(0))

        def prepared() -> None:
            function.prepared_async_call((1, 1, 1), (256, 1, 1), None, p_u32, p_u, *scalars)

        def checked() -> None:
            bound(out_u32=out_u32, out_uniform=out_u, n=1, seed=1, rng_stream=0, offset=0)

        rows = [
            ("pycuda prepared_async_call", _per_call_us(prepared, args.calls, backend)),
            ("alpha_rl BoundKernel (checked)", _per_call_us(checked, args.calls, backend)),
        ]
        gpu = backend.describe()["gpu"]
        print(f"{gpu}: host time per launch, median of 5 x {args.calls} calls")
        for name, us in rows:
            print(f"  {name:32s} {us:6.2f} us")


if __name__ == "__main__":
    main()
