"""The shared counter-based RNG (NumPy side): known answers, pinned draws, the [0, 1) mapping."""

from __future__ import annotations

import re

import numpy as np
import pytest

from alpha_rl import paths
from alpha_rl.reference.rng import (
    Stream,
    philox4x32_10,
    rng_fill,
    rng_u32,
    rng_uniform,
    uniform_from_u32,
)


def _words(*values: int) -> tuple[np.ndarray, ...]:
    return tuple(np.array([v], dtype=np.uint32) for v in values)


@pytest.mark.parametrize(
    ("ctr", "key", "expected"),
    [  # Random123's published known-answer vectors for philox4x32_10
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        (
            (0xFFFFFFFF,) * 4,
            (0xFFFFFFFF, 0xFFFFFFFF),
            (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
        ),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ],
)
def test_philox_known_answers(ctr: tuple, key: tuple, expected: tuple) -> None:
    out = philox4x32_10(_words(*ctr), key)
    assert tuple(int(w[0]) for w in out) == expected


def test_pinned_draws() -> None:
    # (seed, stream, index) -> uint32; any change to the mapping changes these and breaks runs
    assert rng_u32(0, 0, np.arange(4)).tolist() == [0x6627E8D5, 0xF8E4CCA4, 0x04FAA329, 0xC990EF29]
    idx = np.array([0, 1, 2**32, 2**40 + 7], dtype=np.uint64)
    assert rng_u32(42, 1, idx).tolist() == [0x02933769, 0x20FF9139, 0x37AA0818, 0x9AF723D2]
    assert rng_u32(0x123456789ABCDEF0, 2, 5).tolist() == 0x636D33E0


def test_uniform_is_the_top_24_bits_exactly() -> None:
    bits = np.array([0, 0xFF, 0x100, 0xFFFFFFFF, 0x80000000], dtype=np.uint32)
    u = uniform_from_u32(bits)
    assert u.dtype == np.float32
    assert u.tolist() == [0.0, 0.0, 2.0**-24, 1.0 - 2.0**-24, 0.5]
    assert np.all(u < 1.0)


def test_draws_depend_on_seed_stream_and_index() -> None:
    idx = np.arange(1000)
    a = rng_u32(7, Stream.ACT, idx)
    assert not np.array_equal(a, rng_u32(8, Stream.ACT, idx))
    assert not np.array_equal(a, rng_u32(7, Stream.PER, idx))
    assert len(np.unique(a)) == 1000
    np.testing.assert_array_equal(a[500:], rng_u32(7, Stream.ACT, idx[500:]))


def test_uniform_moments_and_buckets() -> None:
    u = rng_uniform(123, Stream.TEST, np.arange(200_000)).astype(np.float64)
    assert abs(u.mean() - 0.5) < 0.005
    assert abs(u.var() - 1 / 12) < 0.002
    counts = np.bincount((u * 20).astype(int), minlength=20)
    chi2 = ((counts - 10_000) ** 2 / 10_000).sum()
    assert chi2 < 50.0  # 19 degrees of freedom: p < 1e-4 beyond 50


def test_fill_writes_n_draws_from_the_offset() -> None:
    out_u32 = np.full(10, 7, dtype=np.uint32)
    out_u = np.full(10, -1.0, dtype=np.float32)
    rng_fill(out_u32, out_u, 8, 5, Stream.TEST, 100)
    np.testing.assert_array_equal(out_u32[:8], rng_u32(5, Stream.TEST, np.arange(100, 108)))
    np.testing.assert_array_equal(out_u[:8], uniform_from_u32(out_u32[:8]))
    assert out_u32[8:].tolist() == [7, 7] and out_u[8:].tolist() == [-1.0, -1.0]


def test_stream_ids_match_the_cuda_header() -> None:
    text = (paths.cuda_dir() / "rng.cuh").read_text()
    defined = {m[0]: int(m[1]) for m in re.findall(r"#define RNG_STREAM_(\w+)\s+(\d+)u", text)}
    assert defined == {s.name: s.value for s in Stream}
