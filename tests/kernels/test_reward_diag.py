"""reward_aux_align_ema, reward_mag_ratio, reward_decomp_diag on the GPU against their oracles."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.kernels import reward
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.reference import reward as ref
from tests.helpers import by_name

pytestmark = pytest.mark.gpu

SIZES = (1, 31, 32, 33, 1000, 4097)


def _data(n: int, stride: int, seed: int):
    gen = np.random.default_rng(seed)
    rc = gen.normal(0, 2, size=n * stride).astype(np.float32)
    rc[::5] = 0.0
    isv = gen.uniform(0.1, 1.0, size=80).astype(np.float32)
    return gen, rc, isv


def _run(cuda_backend, stride, decl, *host_args):
    kernel = KernelRuntime(cuda_backend, {"RC_STRIDE": stride}).bind(decl)
    dev = [cuda_backend.upload(a) if isinstance(a, np.ndarray) else a for a in host_args]
    kernel(**by_name(decl, *dev))
    return [
        cuda_backend.download(d)
        for d, a in zip(dev, host_args, strict=True)
        if isinstance(a, np.ndarray)
    ]


@pytest.mark.parametrize("stride", [6, 7])
@pytest.mark.parametrize("n", SIZES)
def test_reward_aux_align_ema_matches_reference(cuda_backend, stride: int, n: int) -> None:
    _, rc, isv = _data(n, stride, n)
    want = isv.copy()
    ref.reward_aux_align_ema(rc, want, n, 50, 3, rc_stride=stride)
    _, got = _run(cuda_backend, stride, reward.AUX_ALIGN_EMA, rc, isv, n, 50, 3)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=3e-6)
    if stride == 6:
        np.testing.assert_array_equal(got, isv)


@pytest.mark.parametrize("stride", [6, 7])
@pytest.mark.parametrize("n", SIZES)
def test_reward_mag_ratio_matches_reference(cuda_backend, stride: int, n: int) -> None:
    _, rc, isv = _data(n, stride, n + 1)
    want = isv.copy()
    ref.reward_mag_ratio(rc, want, n, 40, 64, 3, rc_stride=stride)
    _, got = _run(cuda_backend, stride, reward.MAG_RATIO, rc, isv, n, 40, 64, 3)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=3e-6)


@pytest.mark.parametrize("stride", [6, 7])
@pytest.mark.parametrize("n", SIZES)
def test_reward_decomp_diag_matches_reference(cuda_backend, stride: int, n: int) -> None:
    gen, rc, _ = _data(n, stride, n + 2)
    rew = gen.normal(size=n).astype(np.float32)
    prev = gen.integers(-1, 2, size=n).astype(np.int32)
    if n > 100:
        prev[prev == -1] = 0  # an empty row must come back as zeros
    want = np.full(3 * (4 + stride), np.nan, np.float32)
    ref.reward_decomp_diag(rc, rew, prev, want, n, rc_stride=stride)
    *_, got = _run(cuda_backend, stride, reward.DECOMP_DIAG, rc, rew, prev,
                   np.full_like(want, np.nan), n)  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=3e-6)
