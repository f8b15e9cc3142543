"""rng_fill on the GPU against the NumPy RNG: bit-identical draws."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.kernels import rng
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.reference.rng import Stream, rng_u32, uniform_from_u32

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    ("n", "seed", "stream", "offset"),
    [
        (1_000_000, 0, Stream.TEST, 0),
        (1_000_000, 0x123456789ABCDEF0, Stream.PER, 2**32 - 500_000),  # crosses the counter's word
        (33, 7, Stream.ACT, 2**40 + 3),
        (1, 2**64 - 1, Stream.MARKET, 0),
    ],
)
def test_rng_fill_matches_reference(
    cuda_backend, n: int, seed: int, stream: int, offset: int
) -> None:
    fill = KernelRuntime(cuda_backend, {}).bind(rng.FILL)
    out_u32 = cuda_backend.alloc(n + 1, np.uint32)
    out_u = cuda_backend.alloc(n + 1, np.float32)
    cuda_backend.fill(out_u32, 0xDEADBEEF)  # poison: every element must be overwritten
    cuda_backend.fill(out_u, np.nan)
    fill(out_u32=out_u32, out_uniform=out_u, n=n, seed=seed, rng_stream=stream, offset=offset)
    got_bits, got_u = cuda_backend.download(out_u32), cuda_backend.download(out_u)
    want = rng_u32(seed, stream, np.uint64(offset) + np.arange(n, dtype=np.uint64))
    bad = np.flatnonzero(got_bits[:n] != want)
    assert bad.size == 0, f"{bad.size} of {n} draws differ; first at index {bad[:5]}"
    np.testing.assert_array_equal(got_u[:n].view(np.uint32), uniform_from_u32(want).view(np.uint32))
    assert got_bits[n] == 0xDEADBEEF and np.isnan(got_u[n]), "wrote past n"
