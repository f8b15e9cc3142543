"""mlp_* kernels on the GPU against float64 products, for the sizes of the learner."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.kernels import mlp
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.reference import mlp as ref

pytestmark = pytest.mark.gpu


def as64(x):
    """x in float64 (None stays None): the oracles' exact sums."""
    return None if x is None else x.astype(np.float64)


def _gemm(
    cuda_backend, A, B, bias, mask, M, N, K, ta, tb, relu, decl=mlp.GEMM
) -> tuple[np.ndarray, np.ndarray]:
    want = np.zeros(M * N)
    ref.mlp_gemm(as64(A), as64(B), as64(bias), as64(mask), want, M, N, K, ta, tb, relu)
    up = lambda x: None if x is None else cuda_backend.upload(x)  # noqa: E731
    C = cuda_backend.upload(np.full(M * N, np.nan, np.float32))
    KernelRuntime(cuda_backend, {}).bind(decl)(A=up(A), B=up(B), bias=up(bias), mask=up(mask),
                                               C=C, M=M, N=N, K=K, trans_a=ta, trans_b=tb,
                                               relu=relu)  # fmt: skip
    return cuda_backend.download(C), want


def learner_cases(f, rows: int, hidden: int, n_in: int) -> list[tuple]:
    """The learner's three products at these sizes: a forward with bias and ReLU, a weight
    gradient, an input gradient through a ReLU mask (`f(*shape)`: flat float32 inputs)."""
    return [
        (f(rows, n_in), f(hidden, n_in), f(hidden), None, rows, hidden, n_in, 0, 1, 1),
        (f(rows, hidden), f(rows, n_in), None, None, hidden, n_in, rows, 1, 0, 0),
        (f(rows, hidden), f(hidden, n_in), None, f(rows, n_in), rows, n_in, hidden, 0, 0, 0),
    ]


@pytest.mark.parametrize("rows", [1, 33, 512, 1000])
@pytest.mark.parametrize("hidden", [17, 256])
def test_mlp_gemm_matches_reference(cuda_backend, rows: int, hidden: int) -> None:
    gen = np.random.default_rng(rows * hidden)
    f = lambda *s: gen.normal(size=s).astype(np.float32).ravel()  # noqa: E731
    n_in = 32
    cases = [  # forward with bias + ReLU, weight gradient, input gradient through a ReLU mask
        (f(rows, n_in), f(hidden, n_in), f(hidden), None, rows, hidden, n_in, 0, 1, 1),
        (f(rows, hidden), f(rows, n_in), None, None, hidden, n_in, rows, 1, 0, 0),
        (f(rows, hidden), f(hidden, n_in), None, f(rows, n_in), rows, n_in, hidden, 0, 0, 0),
    ]
    for case in cases:
        got, want = _gemm(cuda_backend, *case)
        K = case[6]
        assert not np.isnan(got).any()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.sqrt(K) * 4)


@pytest.mark.parametrize("rows", [1, 33, 4096, 4100])
@pytest.mark.parametrize("decl", [mlp.GEMM_64, mlp.GEMM_128], ids=lambda d: d.name)
def test_wide_tiles_are_bit_identical_to_mlp_gemm(cuda_backend, rows: int, decl) -> None:
    """Every tile adds each output's products in k order: a wider tile may only change speed."""
    gen = np.random.default_rng(rows)
    f = lambda *s: gen.normal(size=s).astype(np.float32).ravel()  # noqa: E731
    for hidden, n_in in ((256, 32), (256, 256), (4, 256), (67, 45)):
        for case in learner_cases(f, rows, hidden, n_in):
            small, want = _gemm(cuda_backend, *case)
            wide, _ = _gemm(cuda_backend, *case, decl=decl)
            assert not np.isnan(wide).any()
            np.testing.assert_array_equal(wide, small)
            np.testing.assert_allclose(wide, want, rtol=1e-4, atol=1e-5 * np.sqrt(case[6]) * 4)
    # K % 32 == 16: sums that underflow to -0, plus a bias of -0, keep the sign mlp_gemm gives
    tiny = np.full(rows * 48, 1e-30, np.float32)
    case = (
        tiny,
        np.full(4 * 48, -1e-30, np.float32),
        np.full(4, -0.0, np.float32),
        None,
        rows,
        4,
        48,
        0,
        1,
        0,
    )
    small, _ = _gemm(cuda_backend, *case)
    wide, _ = _gemm(cuda_backend, *case, decl=decl)
    assert np.all(small == 0) and np.array_equal(np.signbit(wide), np.signbit(small))


@pytest.mark.parametrize("rows", [1, 9, 512, 4097])
def test_mlp_gemm_rows_matches_reference(cuda_backend, rows: int) -> None:
    gen = np.random.default_rng(rows + 7)
    up = cuda_backend.upload
    bind = KernelRuntime(cuda_backend, {}).bind
    for N, K, relu, with_bias in ((3, 256, 0, True), (4, 256, 1, True), (8, 33, 0, False),
                                  (1, 5, 1, True)):  # fmt: skip
        X = gen.normal(size=rows * K).astype(np.float32)
        W = gen.normal(size=N * K).astype(np.float32)
        bias = gen.normal(size=N).astype(np.float32) if with_bias else None
        Y = up(np.full(rows * N + 5, np.nan, np.float32))  # 5 guard values past the output
        bind(mlp.GEMM_ROWS)(X=up(X), W=up(W), bias=None if bias is None else up(bias), Y=Y,
                            M=rows, N=N, K=K, relu=relu)  # fmt: skip
        want = np.zeros(rows * N)
        ref.mlp_gemm_rows(X.astype(np.float64), W.astype(np.float64),
                          None if bias is None else bias.astype(np.float64), want, rows, N, K,
                          relu)  # fmt: skip
        got = cuda_backend.download(Y)
        assert np.isnan(got[rows * N :]).all(), "wrote past the output"
        np.testing.assert_allclose(got[: rows * N], want, rtol=1e-4, atol=1e-5 * np.sqrt(K) * 4)


@pytest.mark.parametrize("rows", [1, 33, 512, 1000])
def test_mlp_bias_grad_and_dueling_match_reference(cuda_backend, rows: int) -> None:
    gen = np.random.default_rng(rows)
    rt = KernelRuntime(cuda_backend, {})
    dY = gen.normal(size=rows * 17).astype(np.float32)
    db = cuda_backend.zeros(17, np.float32)
    rt.bind(mlp.BIAS_GRAD)(dY=cuda_backend.upload(dY), db=db, M=rows, N=17)
    np.testing.assert_allclose(cuda_backend.download(db), dY.reshape(rows, 17).sum(0),
                               rtol=1e-5, atol=1e-4)  # fmt: skip
    va = gen.normal(size=rows * 4).astype(np.float32)
    q, want_q = cuda_backend.zeros(rows * 3, np.float32), np.zeros(rows * 3, np.float32)
    rt.bind(mlp.DUELING_FORWARD)(VA=cuda_backend.upload(va), Q=q, M=rows, A=3)
    ref.mlp_dueling_forward(va, want_q, rows, 3)
    np.testing.assert_allclose(cuda_backend.download(q), want_q, rtol=1e-6, atol=1e-6)
    dq = gen.normal(size=rows * 3).astype(np.float32)
    dva, want_dva = cuda_backend.zeros(rows * 4, np.float32), np.zeros(rows * 4, np.float32)
    rt.bind(mlp.DUELING_BACKWARD)(dQ=cuda_backend.upload(dq), dVA=dva, M=rows, A=3)
    ref.mlp_dueling_backward(dq, want_dva, rows, 3)
    np.testing.assert_allclose(cuda_backend.download(dva), want_dva, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rows", [33, 512, 1000])
@pytest.mark.parametrize("splits", [1, 4, 8])
def test_mlp_split_k_matches_reference(cuda_backend, rows: int, splits: int) -> None:
    gen = np.random.default_rng(rows + splits)
    up = cuda_backend.upload
    runtime = KernelRuntime(cuda_backend, {})
    partial, total = runtime.bind(mlp.GEMM_PARTIAL), runtime.bind(mlp.SUM_SPLITS)
    for M, N in ((256, 256), (256, 32), (3, 256)):  # the weight gradients of 32 -> 256 -> 256 -> 3
        A = gen.normal(size=rows * M).astype(np.float32)  # dY [rows, M]: op(A) = dY^T
        B = gen.normal(size=rows * N).astype(np.float32)  # X [rows, N]
        P = up(np.full(splits * M * N, np.nan, np.float32))
        C = up(np.full(M * N, np.nan, np.float32))
        db = up(np.full(M, np.nan, np.float32))
        partial(A=up(A), B=up(B), P=P, M=M, N=N, K=rows, trans_a=1, trans_b=0, splits=splits)
        total(P=P, dY=up(A), C=C, db=db, MN=M * N, splits=splits, M=rows, N=M)
        want_db = np.zeros(M, np.float32)  # the bias gradient of the same launch: dY's row sums
        bias_grad = runtime.bind(mlp.BIAS_GRAD)
        db_alone = up(np.full(M, np.nan, np.float32))
        bias_grad(dY=up(A), db=db_alone, M=rows, N=M)
        ref.mlp_bias_grad(A, want_db, rows, M)
        np.testing.assert_array_equal(cuda_backend.download(db), cuda_backend.download(db_alone))
        np.testing.assert_allclose(cuda_backend.download(db), want_db, rtol=1e-5, atol=1e-4)
        want_p = np.full(splits * M * N, np.nan, np.float32)
        ref.mlp_gemm_partial(A, B, want_p, M, N, rows, 1, 0, splits)
        got_p = cuda_backend.download(P)
        np.testing.assert_allclose(got_p, want_p, rtol=1e-4, atol=1e-5 * np.sqrt(rows) * 4)
        want = np.zeros(M * N, np.float32)
        ref.mlp_gemm(A, B, None, None, want, M, N, rows, 1, 0, 0)
        got = cuda_backend.download(C)
        assert not np.isnan(got).any()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.sqrt(rows) * 4)


@pytest.mark.parametrize("tf32", [False, True], ids=["fp32", "tf32"])
@pytest.mark.parametrize("rows", [(512, 1024), (1, 33), (1000, 7)])
def test_pair_launches_are_bit_identical_to_two_launches(cuda_backend, rows, tf32: bool) -> None:
    """mlp_gemm_pair, mlp_gemm_tf32_pair and mlp_gemm_rows_pair: each of the two products
    exactly as its own mlp_gemm / mlp_gemm_tf32_32 / mlp_gemm_rows launch computes it, nothing
    written past either output."""
    M1, M2 = rows
    gen = np.random.default_rng(M1 + M2)
    up = cuda_backend.upload
    bind = KernelRuntime(cuda_backend, {}).bind
    f = lambda *s: gen.normal(size=s).astype(np.float32).ravel()  # noqa: E731
    for N, K, relu in ((256, 32, 1), (256, 256, 1), (3, 256, 0), (67, 45, 0)):
        X1, X2, W1, W2, b1, b2 = f(M1, K), f(M2, K), f(N, K), f(N, K), f(N), f(N)
        narrow = N <= mlp.ROWS_MAX_N
        outs = [up(np.full(M * N + 5, np.nan, np.float32)) for M in (M1, M2)]
        pair, single = (mlp.GEMM_TF32_PAIR, mlp.GEMM_TF32_32) if tf32 else (mlp.GEMM_PAIR, mlp.GEMM)
        decl = mlp.GEMM_ROWS_PAIR if narrow else pair
        bind(decl)(X1=up(X1), W1=up(W1), bias1=up(b1), X2=up(X2), W2=up(W2), bias2=up(b2),
                   Y1=outs[0], Y2=outs[1], M1=M1, M2=M2, N=N, K=K, relu=relu)  # fmt: skip
        for X, W, b, M, Y in ((X1, W1, b1, M1, outs[0]), (X2, W2, b2, M2, outs[1])):
            alone = up(np.full(M * N, np.nan, np.float32))
            if narrow:
                bind(mlp.GEMM_ROWS)(X=up(X), W=up(W), bias=up(b), Y=alone, M=M, N=N, K=K,
                                    relu=relu)  # fmt: skip
            else:
                bind(single)(A=up(X), B=up(W), bias=up(b), mask=None, C=alone, M=M, N=N,
                             K=K, trans_a=0, trans_b=1, relu=relu)  # fmt: skip
            got = cuda_backend.download(Y)
            assert np.isnan(got[M * N :]).all(), f"{decl.name} wrote past an output"
            np.testing.assert_array_equal(got[: M * N], cuda_backend.download(alone))


TF32_TILES = [mlp.GEMM_TF32, mlp.GEMM_TF32_64, mlp.GEMM_TF32_32]


@pytest.mark.parametrize("decl", TF32_TILES, ids=lambda d: d.name)
@pytest.mark.parametrize("rows", [1, 33, 512, 4100])
def test_the_tf32_product_is_the_tf32_rounded_operands_product_within_float32(
    cuda_backend, rows: int, decl
) -> None:
    """mlp_gemm_tf32 (each tile) against the product of its operands rounded to TF32 (its
    oracle, in float64): within a truncating float32 accumulation's bound, 2 K x 2^-23 x
    sum |a||b| per output; and not mlp_gemm's float32 product (~2^-11 apart)."""
    gen = np.random.default_rng(rows + 7)
    f = lambda *s: gen.normal(size=s).astype(np.float32).ravel()  # noqa: E731
    for hidden, n_in in ((256, 32), (256, 256), (67, 45), (3, 256)):
        for A, B, bias, mask, M, N, K, ta, tb, relu in learner_cases(f, rows, hidden, n_in):
            got, exact = _gemm(cuda_backend, A, B, bias, mask, M, N, K, ta, tb, relu, decl)
            want = np.zeros(M * N)
            ref.mlp_gemm_tf32(as64(A), as64(B), as64(bias), as64(mask), want, M, N, K, ta, tb,
                              relu)  # fmt: skip
            size = np.zeros(M * N)
            ref.mlp_gemm(np.abs(as64(A)), np.abs(as64(B)), None, None, size, M, N, K, ta, tb, 0)
            bound = 2 * K * 2.0**-23 * size + 2.0**-23 * np.abs(want) + 1e-30
            assert not np.isnan(got).any()
            assert (np.abs(got - want) <= bound).all(), np.max(np.abs(got - want) / bound)
            if K >= 32 and M * N >= 64:  # enough products that TF32's rounding shows
                assert np.abs(got - exact).max() > 2.0**-20 * np.abs(exact).max()


@pytest.mark.parametrize("decl", TF32_TILES, ids=lambda d: d.name)
@pytest.mark.parametrize("trans_a", [0, 1])
def test_the_device_rounds_operands_as_the_oracle(cuda_backend, decl, trans_a: int) -> None:
    """A @ I is tf32(A) exactly (products by 1, sums with zeros): the device's rounding of A is
    the oracle's, ties away from zero included; and of B through I @ B."""
    gen = np.random.default_rng(5)
    M, K = 70, 24
    ulp = 2.0**-10
    ties = (1 + np.arange(M * K) % 512 * ulp + ulp / 2) * np.where(np.arange(M * K) % 3, 1, -1)
    x = np.where(np.arange(M * K) % 2, ties, gen.normal(size=M * K)).astype(np.float32)
    eye = np.eye(K, dtype=np.float32).ravel()
    got, _ = _gemm(cuda_backend, x, eye, None, None, M, K, K, trans_a, 0, 0, decl)
    a = x.reshape(K, M).T if trans_a else x.reshape(M, K)
    np.testing.assert_array_equal(got.reshape(M, K), ref.tf32(np.ascontiguousarray(a)))
    got, _ = _gemm(cuda_backend, eye, x, None, None, K, M, K, 0, 1, 0, decl)  # I @ x^T
    np.testing.assert_array_equal(got.reshape(K, M), ref.tf32(x).reshape(M, K).T)


@pytest.mark.parametrize("splits", [2, 4, 8])
def test_split_k_in_one_launch_is_the_two_launches_bit_for_bit(cuda_backend, splits) -> None:
    """mlp_gemm_splitk: C and db exactly as mlp_gemm_partial + mlp_sum_splits compute them, at
    the learner's weight-gradient shapes (and odd ones), three launches each on one set of
    counters shared by every shape: left zero after each launch."""
    rows = 512
    gen = np.random.default_rng(splits)
    bind = KernelRuntime(cuda_backend, {}).bind
    up = cuda_backend.upload
    nan = lambda n: up(np.full(n, np.nan, np.float32))  # noqa: E731
    counters = up(np.zeros(mlp.tiles(256, 256), np.uint32))  # one set for every shape, as a net
    for n_out, n_in in ((3, 256), (256, 256), (256, 32), (67, 45), (256, 256)):
        d = up(gen.normal(size=rows * n_out).astype(np.float32))  # dY [rows, n_out]
        x = up(gen.normal(size=rows * n_in).astype(np.float32))  # X [rows, n_in]
        P, C, db = nan(splits * n_out * n_in), nan(n_out * n_in), nan(n_out)
        for _ in range(3):
            bind(mlp.GEMM_SPLITK)(A=d, B=x, dY=d, P=P, C=C, db=db, counters=counters, M=n_out,
                                  N=n_in, K=rows, trans_a=1, trans_b=0, splits=splits,
                                  with_bias=1)  # fmt: skip
            assert not cuda_backend.download(counters).any()
            P2, C2, db2 = nan(splits * n_out * n_in), nan(n_out * n_in), nan(n_out)
            bind(mlp.GEMM_PARTIAL)(A=d, B=x, P=P2, M=n_out, N=n_in, K=rows, trans_a=1,
                                   trans_b=0, splits=splits)  # fmt: skip
            bind(mlp.SUM_SPLITS)(P=P2, dY=d, C=C2, db=db2, MN=n_out * n_in, splits=splits,
                                 M=rows, N=n_out)  # fmt: skip
            np.testing.assert_array_equal(cuda_backend.download(C), cuda_backend.download(C2))
            np.testing.assert_array_equal(cuda_backend.download(db), cuda_backend.download(db2))
