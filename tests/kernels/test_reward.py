"""reward_component_ema on the GPU against its NumPy oracle, for both strides and odd sizes."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.kernels import reward
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.reference.reward import reward_component_ema as oracle

pytestmark = pytest.mark.gpu

SIZES = (1, 31, 32, 33, 1000, 65537)


@pytest.mark.parametrize("stride", [6, 7])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("seed", [0, 1])
def test_reward_component_ema_matches_reference(
    cuda_backend, stride: int, n: int, seed: int
) -> None:
    gen = np.random.default_rng(seed * 1000 + n)
    rc = gen.normal(0.0, 3.0, size=n * stride).astype(np.float32)
    isv = gen.normal(0.0, 1.0, size=64).astype(np.float32)
    isv[5] = np.float32(0.3)  # alpha
    want = isv.copy()
    oracle(rc, want, n, 40, 5, rc_stride=stride)

    ema = KernelRuntime(cuda_backend, {"RC_STRIDE": stride}).bind(reward.COMPONENT_EMA)
    isv_dev = cuda_backend.upload(isv)
    ema(rc=cuda_backend.upload(rc), isv=isv_dev, n=n, ema_idx=40, alpha_idx=5)
    got = cuda_backend.download(isv_dev)

    untouched = np.r_[0:40, 46:64]
    np.testing.assert_array_equal(got[untouched], isv[untouched])
    # float32 partial sums over n rows against a float64 mean: error ~ sqrt(n) * eps * |rc|
    np.testing.assert_allclose(got[40:46], want[40:46], rtol=1e-5, atol=3e-6)


def test_null_isv_is_a_no_op(cuda_backend) -> None:
    ema = KernelRuntime(cuda_backend, {"RC_STRIDE": 7}).bind(reward.COMPONENT_EMA)
    rc = cuda_backend.upload(np.ones(70, np.float32))
    ema(rc=rc, isv=None, n=10, ema_idx=0, alpha_idx=1)
    cuda_backend.synchronize()
    assert ema.launches == 1 and cuda_backend.download(rc).tolist() == [1.0] * 70
