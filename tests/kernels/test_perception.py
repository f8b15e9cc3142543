"""perception_observe on the GPU against its oracle, with and without the projection."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.kernels import perception
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.reference.perception import feature_count, projection_weights
from alpha_rl.reference.perception import perception_observe as oracle
from tests.helpers import by_name

pytestmark = pytest.mark.gpu

SIZES = (1, 31, 32, 33, 1000, 4097)
T, L = 300, 4
HORIZONS = np.array([1, 4, 16, 64], np.int32)


def inputs(n: int, seed: int) -> dict:
    gen = np.random.default_rng(seed)
    mids = np.cumsum(gen.integers(-3, 4, size=T)) * 0.01
    spread = gen.integers(1, 4, size=T) * 0.01
    levels = np.arange(L) * 0.01
    sizes = gen.integers(0, 30, size=(2, T, L)).astype(np.float32)
    sizes[:, :5] = 0  # zero total size: imbalance 0
    return {
        "bid_px": (mids[:, None] - spread[:, None] / 2 - levels).astype(np.float32).ravel(),
        "ask_px": (mids[:, None] + spread[:, None] / 2 + levels).astype(np.float32).ravel(),
        "bid_sz": sizes[0].ravel(), "ask_sz": sizes[1].ravel(),
        # sessions from ticks 0, 40, 41 (one tick long) and 150: returns stop at their first ticks
        "session_first": np.repeat(np.array([0, 40, 41, 150], np.int32), [40, 1, 109, T - 150]),
        "cursor": gen.integers(0, T, size=n).astype(np.int32),
        "pos": gen.integers(-1, 2, size=n).astype(np.int32),
        "trade_len": gen.integers(0, 300, size=n).astype(np.int32),
        "entry_px": gen.normal(0, 0.05, size=n).astype(np.float32),
        "peak_mid": gen.normal(0, 0.05, size=n).astype(np.float32),
        "horizons": HORIZONS,
    }  # fmt: skip


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("projection", [False, True])
def test_perception_observe_matches_reference(cuda_backend, n: int, projection: bool) -> None:
    host = inputs(n, seed=n)
    F = feature_count(len(HORIZONS))
    H = 32 if projection else F
    w, b = projection_weights(5, F, H) if projection else (None, None)
    scalars = [n, T, L, len(HORIZONS), H, 0.01, 2]  # the tick; the scales at isv[2:4]
    scales = np.array([7.0, 7.0, 0.1, 0.01], np.float32)
    want = np.full(n * H, np.nan, np.float32)
    oracle(*host.values(), w, b, scales, want, *scalars)

    observe = KernelRuntime(cuda_backend, {}).bind(perception.OBSERVE)
    h = cuda_backend.upload(np.full(n * H, np.nan, np.float32))
    up = lambda x: None if x is None else cuda_backend.upload(x)  # noqa: E731
    observe(**by_name(perception.OBSERVE, *(up(v) for v in host.values()), up(w), up(b),
                      up(scales), h, *scalars))  # fmt: skip
    got = cuda_backend.download(h)
    assert not np.isnan(got).any(), "every element of h must be written"
    if projection:  # tanhf vs numpy's tanh: a few ulp
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-7)
    else:  # IEEE division and sqrt in the same order: exact
        np.testing.assert_array_equal(got, want)
