"""Oracle of cuda/rng.cuh and cuda/rng.cu: the shared counter-based RNG, bit for bit.

Philox4x32-10 with key = (seed low 32 bits, seed high 32 bits) and
counter = (index low 32, index high 32, stream, 0); rng_u32 is output word 0 and
rng_uniform = (rng_u32 >> 8) * 2^-24, a float32 in [0, 1) that float32 represents exactly.
"""

from __future__ import annotations

import enum

import numpy as np

from alpha_rl.abi import RNG_STREAMS

_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK32 = 0xFFFFFFFF
_TWO_POW_M24 = np.float32(2.0**-24)


Stream = enum.IntEnum("Stream", RNG_STREAMS)  # the RNG_STREAM_* ids of cuda/rng.cuh


def _mulhilo(m: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    product = x.astype(np.uint64) * np.uint64(m)
    return (product >> np.uint64(32)).astype(np.uint32), (product & np.uint64(_MASK32)).astype(
        np.uint32
    )


def philox4x32_10(
    ctr: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], key: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Philox4x32 with 10 rounds on uint32 arrays (the four counter words), key as two ints."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint32) for c in ctr)
    k0, k1 = key[0] & _MASK32, key[1] & _MASK32
    for round_ in range(10):
        if round_ > 0:
            k0, k1 = (k0 + _W0) & _MASK32, (k1 + _W1) & _MASK32
        hi0, lo0 = _mulhilo(_M0, c0)
        hi1, lo1 = _mulhilo(_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint32(k0), lo1, hi0 ^ c3 ^ np.uint32(k1), lo0
    return c0, c1, c2, c3


def rng_u32(seed: int, stream: int, index: np.ndarray | int) -> np.ndarray:
    """uint32 draws for (seed, stream, index); `index` is any shape of non-negative integers."""
    idx = np.asarray(index, dtype=np.uint64)
    lo = (idx & np.uint64(_MASK32)).astype(np.uint32)
    hi = (idx >> np.uint64(32)).astype(np.uint32)
    stream_words = np.full(idx.shape, int(stream) & _MASK32, dtype=np.uint32)
    zeros = np.zeros(idx.shape, dtype=np.uint32)
    seed = int(seed)
    return philox4x32_10((lo, hi, stream_words, zeros), (seed & _MASK32, seed >> 32))[0]


def uniform_from_u32(bits: np.ndarray) -> np.ndarray:
    """float32 in [0, 1) from uint32 draws: (bits >> 8) * 2^-24, exactly as the device does."""
    return (np.asarray(bits, dtype=np.uint32) >> np.uint32(8)).astype(np.float32) * _TWO_POW_M24


def rng_uniform(seed: int, stream: int, index: np.ndarray | int) -> np.ndarray:
    """float32 uniforms in [0, 1) for (seed, stream, index)."""
    return uniform_from_u32(rng_u32(seed, stream, index))


def rng_fill(
    out_u32: np.ndarray,
    out_uniform: np.ndarray,
    n: int,
    seed: int,
    rng_stream: int,
    offset: int,
) -> None:
    """out_u32[i] = rng_u32(seed, rng_stream, offset + i); out_uniform[i] = its uniform; i < n."""
    index = np.uint64(offset) + np.arange(int(n), dtype=np.uint64)
    bits = rng_u32(int(seed), int(rng_stream), index)
    out_u32[:n] = bits
    out_uniform[:n] = uniform_from_u32(bits)
