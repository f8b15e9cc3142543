"""The kernel audit: a launch checked against its oracle on host copies of the same inputs."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.kernels import reward
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.reference.reward import block_sums, decomp_cols

DIAGNOSTICS = reward.DIAGNOSTICS.name
ISV = [a.name for a in reward.DIAGNOSTICS.args].index("isv")  # its place in the launch values


def _diagnostics_case(runtime: KernelRuntime) -> tuple:
    """reward_diagnostics over 4 envs at stride 7 (alpha 0.5 in isv[26]): the bound kernel and
    its arguments. The audit compares every OUT array, the scratch (partial, done) too: here the
    launch is the oracle, which leaves the scratch alone, so it matches; a device launch writes
    partial, which the oracle does not."""
    be = runtime.backend
    rc = be.upload(np.arange(4 * 7, dtype=np.float32))
    isv = be.upload(np.zeros(64, np.float32))
    be.write(isv[26:27], np.array([0.5], np.float32))
    args = {
        "rc": rc, "reward": be.upload(np.array([1, -2, 0.5, 3], np.float32)),
        "prev_dir": be.upload(np.array([0, 1, -1, 1], np.int32)), "isv": isv,
        "diag": be.zeros(3 * decomp_cols(7), np.float32),
        "partial": be.zeros(block_sums(7), np.float32), "done": be.zeros(1, np.uint64), "n": 4,
        "ema_idx": 32, "aux_ema_idx": 38, "abs_idx": 40, "ratio_idx": 46, "alpha_idx": 26,
    }  # fmt: skip
    return runtime.bind(reward.DIAGNOSTICS), args


def test_audit_counts_nothing_when_the_launch_matches_its_oracle() -> None:
    runtime = KernelRuntime(NumpyBackend(), {"RC_STRIDE": 7})
    diagnostics, args = _diagnostics_case(runtime)
    with runtime.auditing([DIAGNOSTICS]) as audit:
        diagnostics(**args)
    assert audit.launches == {DIAGNOSTICS: 1}
    assert audit.total == 0
    isv = runtime.backend.download(args["isv"])
    assert isv[32:38].any() and isv[38] and isv[40:52].all()  # the launch itself still happened
    assert runtime.backend.download(args["diag"]).any()


def test_audit_names_the_kernel_array_and_index_of_a_wrong_launch() -> None:
    runtime = KernelRuntime(NumpyBackend(), {"RC_STRIDE": 7})
    diagnostics, args = _diagnostics_case(runtime)
    honest = diagnostics._launch

    def off_by_one_slot(grid, values, stream, axis):  # a "device" that corrupts slot 33
        honest(grid, values, stream, axis)
        values[ISV][33] += 1.0

    diagnostics._launch = off_by_one_slot
    with runtime.auditing([DIAGNOSTICS]) as audit:
        diagnostics(**args)
        diagnostics(**args)
    assert audit.mismatches == {DIAGNOSTICS: 2}
    assert audit.first == ["reward_diagnostics.isv[33]"] * 2  # nothing in diag or the scratch
    with ThreadPoolExecutor(1) as judges:  # a pack's: the oracles and comparisons in threads
        judges.submit(time.sleep, 0.3)  # busy: the judgements wait behind it
        with runtime.auditing([DIAGNOSTICS], judges) as threaded:
            diagnostics(**args)
            diagnostics(**args)
        assert not threaded.ready() and threaded.waiting() is not None
        while not threaded.ready():
            time.sleep(0.01)
    assert threaded.launches == {DIAGNOSTICS: 2}
    assert threaded.mismatches == {DIAGNOSTICS: 2}
    assert threaded.first == ["reward_diagnostics.isv[33]"] * 2
    diagnostics(**args)  # outside the block: no audit
    assert audit.launches[DIAGNOSTICS] == 2 and diagnostics.audit is None


def _tf32_case(runtime: KernelRuntime) -> tuple:
    """mlp_gemm_tf32 over 40 x 24 outputs, K = 300 (a bias and a ReLU): the kernel, its args."""
    from alpha_rl.kernels import mlp

    gen = np.random.default_rng(3)
    be = runtime.backend
    M, N, K = 40, 24, 300
    args = {"A": be.upload(gen.normal(size=M * K).astype(np.float32)),
            "B": be.upload(gen.normal(size=N * K).astype(np.float32)),
            "bias": be.upload(gen.normal(size=N).astype(np.float32)), "mask": None,
            "C": be.zeros(M * N, np.float32), "M": M, "N": N, "K": K, "trans_a": 0,
            "trans_b": 1, "relu": 1}  # fmt: skip
    return runtime.bind(mlp.GEMM_TF32), args


def test_a_tf32_product_is_held_to_its_bound_not_to_the_bit() -> None:
    """Another order of float32 sums (here: the rows' products added in reverse) passes; an
    output moved by 100 times its bound (~1% of sum |a||b| at K = 300) does not, and is named."""
    from alpha_rl.reference import mlp as ref

    runtime = KernelRuntime(NumpyBackend(), {})
    gemm, args = _tf32_case(runtime)
    M, N, K = args["M"], args["N"], args["K"]

    def reversed_sums(
        grid, values, stream, axis=None
    ):  # the same TF32 products, another float32 order
        A, B, bias, C = values[0], values[1], values[2], values[4]
        a = ref.tf32(A).reshape(M, K)[:, ::-1]
        b = ref.tf32(B).reshape(N, K)[:, ::-1]
        out = np.zeros((M, N), np.float32)
        for k in range(K):
            out += a[:, k : k + 1] * b[:, k]
        C[:] = np.maximum(out + bias, 0).ravel()

    gemm._launch = reversed_sums
    with runtime.auditing([gemm.decl.name]) as audit:
        gemm(**args)
    want = np.zeros(M * N, np.float32)
    A, B, bias = (runtime.backend.download(args[k]) for k in ("A", "B", "bias"))
    ref.mlp_gemm_tf32(A, B, bias, None, want, M, N, K, 0, 1, 1)
    got = runtime.backend.download(args["C"])
    assert (got != want).any()  # not the oracle's bits ...
    assert audit.total == 0  # ... within its bound

    bound = ref.tf32_bound(A, B, bias, M, N, K, 0, 1)

    def one_off(grid, values, stream, axis):
        reversed_sums(grid, values, stream)
        values[4][7] += 100 * bound[7]

    gemm._launch = one_off
    with runtime.auditing([gemm.decl.name]) as audit:
        gemm(**args)
    assert audit.mismatches == {"mlp_gemm_tf32": 1} and audit.first == ["mlp_gemm_tf32.C[7]"]


def test_a_bound_counts_equal_infinities_as_equal_and_an_inf_bound_as_no_licence() -> None:
    """Both sides inf: equal; a finite value where the oracle gives inf (its bound inf): not."""
    from alpha_rl.kernels.audit import count_mismatches

    want = np.array([np.inf, -np.inf, np.inf, 1.0], np.float32)
    got = np.array([np.inf, -np.inf, 3.0, 1.5], np.float32)
    bound = np.array([1.0, 1.0, np.inf, 0.25])
    assert count_mismatches("C", got, want, bound).tolist() == [2, 3]


def _count_everywhere(name, got, want, bound=None) -> np.ndarray:
    """count_mismatches' rule written plainly, over every element."""
    from alpha_rl.kernels.audit import RTOL

    got, want = got.reshape(-1), want.reshape(-1)
    if got.dtype.kind != "f":
        return np.flatnonzero(got != want)
    both_nan = np.isnan(got) & np.isnan(want)
    if bound is not None:
        n = bound.size
        g, w = got[:n].astype(np.float64), want[:n].astype(np.float64)
        with np.errstate(invalid="ignore"):
            within = np.isfinite(bound) & (np.abs(g - w) <= bound)
        close = np.concatenate([(g == w) | within, got[n:] == want[n:]])
    elif name in RTOL:
        close = np.isclose(got, want, rtol=RTOL[name], atol=0)
    else:
        close = got == want
    return np.flatnonzero(~(close | both_nan))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8])
@pytest.mark.parametrize("name", ["C", "leaves"])
def test_counting_only_where_the_bits_differ_finds_what_every_element_compared_finds(
    dtype, name
) -> None:
    """NaNs of other payloads, -0.0 against 0.0, infinities, values within and beyond a bound or
    a relative tolerance, 2-D arrays: the same indices as the plain rule."""
    from alpha_rl.kernels.audit import count_mismatches

    rng = np.random.default_rng(7)
    want = rng.normal(size=(40, 25)).astype(dtype) if dtype in (np.float32, np.float64) else (
        rng.integers(0, 200, size=(40, 25)).astype(dtype))  # fmt: skip
    got = want.copy()
    flat = got.reshape(-1)
    picks = rng.choice(flat.size, 120, replace=False)
    if flat.dtype.kind == "f":
        bits = flat.view(np.dtype(f"u{flat.dtype.itemsize}"))
        flat[picks[:10]] += 1e-7 * flat[picks[:10]]  # within a relative tolerance
        flat[picks[10:20]] += 1.0
        flat[picks[20:30]] = np.nan
        want.reshape(-1)[picks[20:25]] = np.nan
        bits[picks[25:30]] |= 1  # another NaN payload where the oracle has one too
        want.reshape(-1)[picks[25:30]] = np.nan
        flat[picks[30:40]] = -0.0
        want.reshape(-1)[picks[30:40]] = 0.0
        flat[picks[40:50]] = np.inf
        want.reshape(-1)[picks[40:45]] = np.inf
    else:
        flat[picks[:20]] += 1
    for bound in (None, np.full(500, 1e-3), np.full(0, 1e-3), rng.uniform(0, 2, 1000)):
        if bound is not None and flat.dtype.kind != "f":
            continue
        np.testing.assert_array_equal(count_mismatches(name, got, want, bound),
                                      _count_everywhere(name, got, want, bound))  # fmt: skip
