"""Binding kernels on the numpy backend: dispatch to the oracle and argument checking."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.errors import KernelCallError
from alpha_rl.kernels import her, reward, rng
from alpha_rl.kernels.runtime import KernelRuntime, arguments
from alpha_rl.reference.reward import block_sums
from alpha_rl.reference.rng import Stream, rng_u32


@pytest.fixture
def runtime() -> KernelRuntime:
    return KernelRuntime(NumpyBackend(), {"RC_STRIDE": 7})


def test_bound_kernel_runs_the_oracle(runtime: KernelRuntime) -> None:
    fill = runtime.bind(rng.FILL)
    out_u32, out_u = np.zeros(33, np.uint32), np.zeros(33, np.float32)
    fill(out_u32=out_u32, out_uniform=out_u, n=33, seed=9, rng_stream=Stream.TEST, offset=2**33)
    np.testing.assert_array_equal(out_u32, rng_u32(9, Stream.TEST, np.arange(33) + 2**33))


def _diagnostics_args(n: int, stride: int, isv: np.ndarray | None, rc: np.ndarray) -> dict:
    """reward_diagnostics' arguments over n envs (all flat, reward 1) of `rc`: component EMAs into
    isv[1:7], the aux-align EMA into isv[7], alpha isv[0], no magnitude slots; scratch for one
    block (n <= REWARD_ROWS)."""
    return {
        "rc": rc, "reward": np.ones(n, np.float32), "prev_dir": np.zeros(n, np.int32), "isv": isv,
        "diag": np.zeros(3 * (4 + stride), np.float32),
        "partial": np.zeros(block_sums(stride), np.float32), "done": np.zeros(1, np.uint64),
        "n": n, "ema_idx": 1, "aux_ema_idx": 7, "abs_idx": -1, "ratio_idx": -1, "alpha_idx": 0,
    }  # fmt: skip


def test_variant_define_reaches_the_oracle() -> None:
    for stride in (6, 7):
        diagnostics = KernelRuntime(NumpyBackend(), {"RC_STRIDE": stride}).bind(reward.DIAGNOSTICS)
        isv = np.zeros(9, np.float32)
        isv[0] = 1.0
        args = _diagnostics_args(3, stride, isv, np.tile(np.arange(stride, dtype=np.float32), 3))
        diagnostics(**args)
        assert isv[1:7].tolist() == [0, 1, 2, 3, 4, 5]
        assert isv[7] == (6.0 if stride == 7 else 0.0)  # c6 only in the stride-7 layout
        assert args["diag"][: 4 + stride].tolist() == [3, 1, 1, sum(range(stride)), *range(stride)]


GOOD = {
    "out_u32": np.zeros(4, np.uint32),
    "out_uniform": np.zeros(4, np.float32),
    "n": 4,
    "seed": 1,
    "rng_stream": 0,
    "offset": 0,
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"out_u32": np.zeros(4, np.int32)}, "out_u32 must be uint32, got int32"),
        ({"out_uniform": [0.0] * 4}, "out_uniform must be a numpy device array"),
        ({"n": 2**31}, "n=2147483648 does not fit int32"),
        ({"n": 4.0}, "n must be an integer"),
        ({"seed": -1}, "seed=-1 does not fit uint64"),
        ({"n": True}, "n must be a int32 number"),
        ({"out_u32": None}, "out_u32 may not be None"),
        ({"n": np.int64(2**40)}, "does not fit int32"),
        ({"rng_stream": "0"}, "rng_stream must be a uint32 number"),
    ],
)  # fmt: skip
def test_bad_arguments_are_refused_by_name(
    runtime: KernelRuntime, change: dict, message: str
) -> None:
    with pytest.raises(KernelCallError, match=message):
        runtime.bind(rng.FILL)(**(GOOD | change))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda k: k(**{n: v for n, v in GOOD.items() if n != "offset"}),
         r"rng_fill: missing offset \(its arguments: out_u32, out_uniform, n, seed, rng_stream, "
         r"offset\)"),
        (lambda k: k(**GOOD, offst=0), r"rng_fill: unknown offst"),
        (lambda k: k(**{n: v for n, v in GOOD.items() if n != "offset"}, offst=0),
         r"missing offset; unknown offst"),
        (lambda k: k(*GOOD.values()), r"pass the arguments by name .* got 6 positional"),
    ],
)  # fmt: skip
def test_a_call_must_name_every_argument_exactly_once(
    runtime: KernelRuntime, call, message: str
) -> None:
    kernel = runtime.bind(rng.FILL)
    with pytest.raises(KernelCallError, match=message):
        call(kernel)
    assert kernel.launches == 0


def test_two_swapped_names_reach_the_oracle_as_named() -> None:
    """A call that names its arguments in another order launches them by name, not position."""
    out_u32, out_u = np.zeros(4, np.uint32), np.zeros(4, np.float32)
    kernel = KernelRuntime(NumpyBackend(), {}).bind(rng.FILL)
    kernel(offset=7, rng_stream=Stream.TEST, seed=3, n=4, out_uniform=out_u, out_u32=out_u32)
    np.testing.assert_array_equal(out_u32, rng_u32(3, Stream.TEST, np.arange(4) + 7))


def test_nullable_pointer_accepts_none(runtime: KernelRuntime) -> None:
    """A NULL ISV reaches the oracle as None: it launches, reads rc, writes only diag."""
    diagnostics, rc = runtime.bind(reward.DIAGNOSTICS), np.ones(14, np.float32)
    args = _diagnostics_args(2, 7, None, rc)
    diagnostics(**args)
    assert diagnostics.launches == 1 and rc.tolist() == [1.0] * 14
    assert args["diag"][:4].tolist() == [2, 1, 1, 7]  # the flat row: count, reward, |reward|, sum


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
        rng.FILL, NumpyBackend(), lambda grid, args, _, axis: seen.update(grid=grid, args=args)
    )
    kernel(out_u32=np.zeros(600, np.uint32), out_uniform=np.zeros(600, np.float32), n=600,
           seed=np.uint32(5), rng_stream=2, offset=np.int64(3))  # fmt: skip
    assert [type(v) for v in seen["args"][2:]] == [np.int32, np.uint64, np.uint32, np.uint64]
    assert seen["grid"] == (3, 1, 1)


def fixture_kernel():
    """A kernel of two differently shaped arrays: x [n] in, y [n * H] out."""
    from alpha_rl.kernels.decl import Grid1D, In, Out, Scalar, Stem
    from alpha_rl.kernels.runtime import BoundKernel

    decl = Stem("fixture").kernel(
        "fixture_spread", In("x", np.float32, "n"), Out("y", np.float32, "n*H"),
        Scalar("n", np.int32), Scalar("H", np.int32), launch=Grid1D("n"),
    )  # fmt: skip
    return BoundKernel(decl, NumpyBackend(), lambda grid, args, stream, axis: None)


def test_a_mislabelled_call_is_refused_at_bind_naming_the_argument_and_its_shape() -> None:
    kernel = fixture_kernel()
    x, y = np.zeros(8, np.float32), np.zeros(8 * 4, np.float32)
    kernel(x=x, y=y, n=8, H=4)  # right
    with pytest.raises(KernelCallError, match=r"fixture_spread: y has 8 elements, fewer than its "
                       r"shape n\*H = 32 \(n=8, H=4\)"):  # fmt: skip
        kernel(x=y, y=x, n=8, H=4)  # the two swapped by name
    with pytest.raises(KernelCallError, match=r"fixture_spread: x has 7 elements, fewer than its "
                       r"shape n = 8 \(n=8\)"):  # fmt: skip
        kernel(x=x[:7], y=y, n=8, H=4)  # one element short
    assert kernel.launches == 1


def test_the_declared_shapes_are_checked_on_a_real_kernel(runtime: KernelRuntime) -> None:
    diagnostics = runtime.bind(reward.DIAGNOSTICS)  # rc [n * RC_STRIDE], RC_STRIDE = 7 here
    with pytest.raises(KernelCallError, match=r"rc has 14 elements, fewer than its shape "
                       r"n\*RC_STRIDE = 21 \(n=3, RC_STRIDE=7\)"):  # fmt: skip
        diagnostics(**_diagnostics_args(3, 7, None, np.ones(14, np.float32)))
    # scratch for one block (46 sums at stride 7) where 513 envs take two of REWARD_ROWS = 512
    args = _diagnostics_args(513, 7, None, np.ones(513 * 7, np.float32))
    with pytest.raises(KernelCallError, match=r"partial has 46 elements, fewer than its shape "
                       r".* = 92 \(n=513, REWARD_ROWS=512, RC_CORE=6, RC_STRIDE=7, "
                       r"DECOMP_ROWS=3, DECOMP_LEAD=4\)"):  # fmt: skip
        diagnostics(**args)
    assert diagnostics.launches == 0
    diagnostics(**args | {"partial": np.zeros(2 * block_sums(7), np.float32)})
    assert diagnostics.launches == 1


# --- a kernel's arrays gathered from the parts that own them ---


def test_arguments_take_each_array_from_the_one_part_that_offers_it() -> None:
    be = NumpyBackend()
    arrays = {a.name: be.zeros(4, a.dtype) for a in her.TRACK.args if a.is_pointer}
    env = {k: arrays[k] for k in ("opened", "closed", "pos", "episode", "fill_mid", "post_mid")}
    own = {k: v for k, v in arrays.items() if k not in env}
    got = arguments(her.TRACK, env=env, her=own | {"ring_state": None})  # one it does not take
    assert set(got) == set(arrays) and all(got[k] is arrays[k] for k in arrays)


def test_a_misspelt_kernel_argument_is_refused_naming_it() -> None:
    be = NumpyBackend()
    arrays = {a.name: be.zeros(4, a.dtype) for a in her.TRACK.args if a.is_pointer}
    arrays["post_mids"] = arrays.pop("post_mid")  # a misspelling would have passed NULL
    with pytest.raises(KernelCallError, match="her_track: the argument 'post_mid' is offered by "
                       "none of env, her: a misspelt or missing name"):  # fmt: skip
        arguments(her.TRACK, env=arrays, her={})


def test_an_array_two_parts_offer_is_refused_as_shadowed() -> None:
    be = NumpyBackend()
    arrays = {a.name: be.zeros(4, a.dtype) for a in her.TRACK.args if a.is_pointer}
    with pytest.raises(KernelCallError, match="'entry_mid' is offered by env and her: one would "
                       "shadow the other"):  # fmt: skip
        arguments(her.TRACK, env=arrays, her={"entry_mid": arrays["entry_mid"]})
