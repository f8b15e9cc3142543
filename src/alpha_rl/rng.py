"""The device's counter-based RNG on the host, for what the run draws outside the kernels: initial
network parameters, the projection of the observation, episode starts, the synthetic market,
the probe.

Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", 2011) keyed by the
64-bit seed, counting over (index, stream): draw i of stream s is word 0 of
Philox((i mod 2^32, i div 2^32, s, 0), (seed mod 2^32, seed div 2^32)), and its uniform is the
top 24 bits times 2^-24, a float32 in [0, 1) that float32 holds exactly: the draws of
cuda/rng.cuh. Its oracle (alpha_rl.reference.rng) states the same independently; a test holds
the two to the same bits.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from alpha_rl.abi import RNG_STREAMS

U32, U64 = np.uint32, np.uint64
MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)  # Philox4x32's round multipliers
WEYL = (0x9E3779B9, 0xBB67AE85)  # the key schedule's increments (golden ratio, sqrt(3) - 1)
ROUNDS = 10


Stream = enum.IntEnum("Stream", RNG_STREAMS)  # the stream ids of cuda/rng.cuh, one per use


def seed_on_device(backend: Any, seed: int) -> Any:
    """The run's seed as the one-element uint64 device array a drawing kernel reads (`run_seed`:
    each agent of a session its own, at its own slice)."""
    return backend.upload(np.array([seed], dtype=U64))


def _round(words: list[np.ndarray], key: tuple[int, int]) -> list[np.ndarray]:
    """One Philox round: two 32x32 -> 64-bit products, the halves crossed with the key."""
    p0 = words[0].astype(U64) * U64(MULTIPLIERS[0])
    p1 = words[2].astype(U64) * U64(MULTIPLIERS[1])
    hi0, lo0 = (p0 >> U64(32)).astype(U32), p0.astype(U32)
    hi1, lo1 = (p1 >> U64(32)).astype(U32), p1.astype(U32)
    return [hi1 ^ words[1] ^ U32(key[0]), lo1, hi0 ^ words[3] ^ U32(key[1]), lo0]


def draw_u32(seed: int, stream: int, index: np.ndarray | int) -> np.ndarray:
    """uint32 draws (any shape of `index`, non-negative integers below 2^64)."""
    i = np.asarray(index, dtype=U64)
    words = [i.astype(U32), (i >> U64(32)).astype(U32), np.full(i.shape, int(stream), U32),
             np.zeros(i.shape, U32)]  # fmt: skip
    key = (int(seed) & 0xFFFFFFFF, (int(seed) >> 32) & 0xFFFFFFFF)
    for _ in range(ROUNDS):
        words = _round(words, key)
        key = ((key[0] + WEYL[0]) & 0xFFFFFFFF, (key[1] + WEYL[1]) & 0xFFFFFFFF)
    return words[0]


def draw_uniform(seed: int, stream: int, index: np.ndarray | int) -> np.ndarray:
    """float32 uniforms in [0, 1): the top 24 bits of each draw times 2^-24."""
    return (draw_u32(seed, stream, index) >> U32(8)).astype(np.float32) * np.float32(2.0**-24)
