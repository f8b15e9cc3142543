"""Binding kernels on the numpy backend: dispatch to the oracle and argument checking."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.errors import KernelCallError
from alpha_rl.kernels import reward, rng
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.reference.rng import Stream, rng_u32


@pytest.fixture
def runtime() -> KernelRuntime:
    return KernelRuntime(NumpyBackend(), {"RC_STRIDE": 7})


def test_bound_kernel_runs_the_oracle(runtime: KernelRuntime) -> None:
    fill = runtime.bind(rng.FILL)
    out_u32, out_u = np.zeros(33, np.uint32), np.zeros(33, np.float32)
    fill(out_u32, out_u, 33, 9, Stream.TEST, 2**33)
    np.testing.assert_array_equal(out_u32, rng_u32(9, Stream.TEST, np.arange(33) + 2**33))


def test_variant_define_reaches_the_oracle() -> None:
    for stride in (6, 7):
        ema = KernelRuntime(NumpyBackend(), {"RC_STRIDE": stride}).bind(reward.COMPONENT_EMA)
        rc = np.tile(np.arange(stride, dtype=np.float32), 3)
        isv = np.zeros(8, np.float32)
        isv[0] = 1.0
        ema(rc, isv, 3, 1, 0)
        assert isv[1:7].tolist() == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((np.zeros(4, np.uint32), np.zeros(4, np.float32), 4, 1, 0), "takes 6 arguments, got 5"),
        (
            (np.zeros(4, np.int32), np.zeros(4, np.float32), 4, 1, 0, 0),
            "out_u32 must be uint32, got int32",
        ),
        (
            (np.zeros(4, np.uint32), [0.0] * 4, 4, 1, 0, 0),
            "out_uniform must be a numpy device array",
        ),
        (
            (np.zeros(4, np.uint32), np.zeros(4, np.float32), 2**31, 1, 0, 0),
            "n=2147483648 does not fit int32",
        ),
        ((np.zeros(4, np.uint32), np.zeros(4, np.float32), 4.0, 1, 0, 0), "n must be an integer"),
        (
            (np.zeros(4, np.uint32), np.zeros(4, np.float32), 4, -1, 0, 0),
            "seed=-1 does not fit uint64",
        ),
        (
            (np.zeros(4, np.uint32), np.zeros(4, np.float32), True, 1, 0, 0),
            "n must be a int32 number",
        ),
        ((None, np.zeros(4, np.float32), 4, 1, 0, 0), "out_u32 may not be None"),
        (
            (np.zeros(4, np.uint32), np.zeros(4, np.float32), np.int64(2**40), 1, 0, 0),
            "does not fit int32",
        ),
        (
            (np.zeros(4, np.uint32), np.zeros(4, np.float32), 4, 1, "0", 0),
            "stream must be a uint32 number",
        ),
    ],
)
def test_bad_arguments_are_refused_by_name(
    runtime: KernelRuntime, args: tuple, message: str
) -> None:
    with pytest.raises(KernelCallError, match=message):
        runtime.bind(rng.FILL)(*args)


def test_nullable_pointer_accepts_none(runtime: KernelRuntime) -> None:
    runtime.bind(reward.COMPONENT_EMA)(np.ones(14, np.float32), None, 2, 0, 1)


def test_unregistered_declaration_is_refused(runtime: KernelRuntime) -> None:
    from alpha_rl.kernels.decl import Grid1D, Out, Scalar, Stem

    stray = Stem("rng").kernel(
        "rng_stray", Out("x", np.float32), Scalar("n", np.int32), launch=Grid1D("n")
    )
    with pytest.raises(KernelCallError, match="not a registered kernel"):
        runtime.bind(stray)


def test_scalars_reach_the_oracle_as_declared_numpy_types() -> None:
    seen = {}
    from alpha_rl.kernels.runtime import BoundKernel

    kernel = BoundKernel(
        rng.FILL, NumpyBackend(), lambda grid, args, _: seen.update(grid=grid, args=args)
    )
    kernel(np.zeros(1, np.uint32), np.zeros(1, np.float32), 600, np.uint32(5), 2, np.int64(3))
    assert [type(v) for v in seen["args"][2:]] == [np.int32, np.uint64, np.uint32, np.uint64]
    assert seen["grid"] == (3, 1, 1)
