"""Oracle of cuda/mlp.cu: dense layers of the Q-network. Works in the arrays' own dtype, so the
same functions run the float32 numpy backend and float64 gradient checks. A float32 product is
alpha_rl.portable.matmul's: each element the float32 rounding of its float64 sum that every
order of additions agrees on, the same with any BLAS (the kernels add in k order in float32, so
a GPU test holds them to a bound, not bits)."""

from __future__ import annotations

import numpy as np

from alpha_rl.abi import MLP
from alpha_rl.portable import matmul, mean, total


def _op(X: np.ndarray, rows: int, cols: int, transposed: int) -> np.ndarray:
    """The [rows, cols] matrix op(X) of a flat buffer (stored [cols, rows] when transposed)."""
    flat = X[: rows * cols]
    return flat.reshape(cols, rows).T if transposed else flat.reshape(rows, cols)


def mlp_gemm(A, B, bias, mask, C, M, N, K, trans_a, trans_b, relu) -> None:
    """C[M, N] = op(A) @ op(B) (+ bias) (ReLU if relu) (* (mask > 0))."""
    M, N, K = int(M), int(N), int(K)
    out = C[: M * N].reshape(M, N)
    matmul(_op(A, M, K, trans_a), _op(B, K, N, trans_b), out=out)
    if bias is not None:
        np.add(out, bias[:N], out=out)
    if relu:
        np.fmax(out, 0, out=out)  # as the kernels' fmaxf: a NaN becomes 0
    if mask is not None:
        out[mask[: M * N].reshape(M, N) <= 0] = 0


mlp_gemm_64 = mlp_gemm  # the same product on larger tiles (same order of additions)
mlp_gemm_128 = mlp_gemm


def tf32(x: np.ndarray) -> np.ndarray:
    """float32 `x` rounded to TF32 as cvt.rna.tf32.f32 rounds it: 10 mantissa bits, to nearest,
    ties away from zero (the magnitude's bits + half an ulp, then the 13 low bits cleared; a
    finite value may round up to inf); inf kept. NaN: the low 13 bits cleared alike (a NaN whose
    payload lies only there would become inf; the device's conversion of such NaNs is not
    tested)."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    finite = (bits & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    rounded = np.where(finite, bits + np.uint32(0x1000), bits) & np.uint32(0xFFFFE000)
    return rounded.view(np.float32)


def mlp_gemm_tf32(A, B, bias, mask, C, M, N, K, trans_a, trans_b, relu) -> None:
    """mlp_gemm of the operands rounded to TF32, the products added in the arrays' dtype (the
    tensor cores' float32 order of additions is theirs: a kernel is held to a bound, not bits)."""
    M, N, K = int(M), int(N), int(K)
    a = tf32(A[: M * K]).astype(A.dtype)
    b = tf32(B[: K * N]).astype(B.dtype)
    mlp_gemm(a, b, bias, mask, C, M, N, K, trans_a, trans_b, relu)


mlp_gemm_tf32_64 = mlp_gemm_tf32  # the same rounding on smaller tiles
mlp_gemm_tf32_32 = mlp_gemm_tf32


def tf32_bound(A, B, bias, M, N, K, trans_a, trans_b) -> np.ndarray:
    """How far a TF32 product's outputs [M * N] may lie from its oracle's when both add the same
    TF32-rounded (exact) products in float32, each in its own order: (K + 1) x 2^-21 x
    (sum_k |a_k b_k| + |bias|), plus (K + 1) x 2^-149 for flushed subnormals. A tensor core that
    aligns an mma's eight products to the largest and truncates loses ~9 x 2^-23 of their size an
    mma, ~1.1 K x 2^-23 over K; the float32 oracle K x 2^-24; the bound is ~2.4 times their sum.
    At K = 256 it is ~2^-13 of sum |a||b| and a wrong element is off by about its whole size:
    the audit catches wrong products, not whether the operands were rounded (a GPU test
    does)."""
    M, N, K = int(M), int(N), int(K)
    size = np.abs(_op(tf32(A[: M * K]), M, K, trans_a)).astype(np.float64) @ np.abs(
        _op(tf32(B[: K * N]), K, N, trans_b)
    ).astype(np.float64)
    if bias is not None:
        size = size + np.abs(bias[:N]).astype(np.float64)
    return ((K + 1) * (2.0**-21 * size + 2.0**-149)).ravel()


def _gemm_tolerance(A, B, bias, mask, C, M, N, K, trans_a, trans_b, relu) -> dict:
    return {"C": tf32_bound(A, B, bias, M, N, K, trans_a, trans_b)}


def _pair_tolerance(X1, W1, bias1, X2, W2, bias2, Y1, Y2, M1, M2, N, K, relu) -> dict:
    return {"Y1": tf32_bound(X1, W1, bias1, M1, N, K, 0, 1),
            "Y2": tf32_bound(X2, W2, bias2, M2, N, K, 0, 1)}  # fmt: skip


def mlp_gemm_rows(X, W, bias, Y, M, N, K, relu) -> None:
    """Y[M, N] = X[M, K] @ W[N, K]^T (+ bias) (ReLU if relu)."""
    mlp_gemm(X, W, bias, None, Y, M, N, K, 0, 1, relu)


BK = MLP["MLP_BK"]  # split-K chunks are multiples of it


def split_chunk(K: int, splits: int) -> int:
    """Rows of K per split: ceil(K / splits) rounded up to a multiple of BK."""
    per_split = -(-K // splits)
    return -(-per_split // BK) * BK


def mlp_gemm_partial(A, B, P, M, N, K, trans_a, trans_b, splits) -> None:
    """P[s] = op(A)[:, Ks] @ op(B)[Ks, :] for the chunks Ks of K (empty chunks give zeros),
    as one stack of products (a short last chunk padded with zeros: they add nothing)."""
    M, N, K, splits = int(M), int(N), int(K), int(splits)
    a, b, chunk = _op(A, M, K, trans_a), _op(B, K, N, trans_b), split_chunk(K, splits)
    a_s, b_s = np.zeros((splits, M, chunk), A.dtype), np.zeros((splits, chunk, N), B.dtype)
    for s in range(splits):
        lo, hi = min(K, s * chunk), min(K, (s + 1) * chunk)
        a_s[s, :, : hi - lo], b_s[s, : hi - lo] = a[:, lo:hi], b[lo:hi]
    matmul(a_s, b_s, out=P[: splits * M * N].reshape(splits, M, N))


def mlp_gemm_pair(X1, W1, bias1, X2, W2, bias2, Y1, Y2, M1, M2, N, K, relu) -> None:
    """Y1 = X1 W1^T (+ bias1), Y2 = X2 W2^T (+ bias2), ReLU if relu: two forward products."""
    mlp_gemm(X1, W1, bias1, None, Y1, M1, N, K, 0, 1, relu)
    mlp_gemm(X2, W2, bias2, None, Y2, M2, N, K, 0, 1, relu)


mlp_gemm_rows_pair = mlp_gemm_pair  # the same products, a warp per row


def mlp_gemm_tf32_pair(X1, W1, bias1, X2, W2, bias2, Y1, Y2, M1, M2, N, K, relu) -> None:
    """mlp_gemm_pair's two products, each as mlp_gemm_tf32."""
    mlp_gemm_tf32(X1, W1, bias1, None, Y1, M1, N, K, 0, 1, relu)
    mlp_gemm_tf32(X2, W2, bias2, None, Y2, M2, N, K, 0, 1, relu)


# the audit's bound per written array of each TF32 kernel (its arguments by name -> {array:
# bound per element}); the other mlp kernels are compared element for element
TOLERANCES = {
    "mlp_gemm_tf32": _gemm_tolerance,
    "mlp_gemm_tf32_64": _gemm_tolerance,
    "mlp_gemm_tf32_32": _gemm_tolerance,
    "mlp_gemm_tf32_pair": _pair_tolerance,
}


def mlp_sum_splits(P, dY, C, db, MN, splits, M, N) -> None:
    """C[i] = sum_s P[s, i], adding the splits in order; with N > 0 the bias gradient of dY
    [M, N] into db as well."""
    MN, splits = int(MN), int(splits)
    acc = P[:MN].copy()
    for s in range(1, splits):
        acc = acc + P[s * MN : (s + 1) * MN]
    C[:MN] = acc
    if int(N) > 0:
        mlp_bias_grad(dY, db, M, N)


def mlp_gemm_splitk(
    A, B, dY, P, C, db, counters, M, N, K, trans_a, trans_b, splits, with_bias
) -> None:
    """mlp_gemm_partial, then mlp_sum_splits of its partials into C, then (with_bias) the bias
    gradient of dY [K, M] into db; the counters stay zero."""
    M, N, K = int(M), int(N), int(K)
    mlp_gemm_partial(A, B, P, M, N, K, trans_a, trans_b, splits)
    mlp_sum_splits(P, None, C, None, M * N, splits, 0, 0)
    if with_bias:
        mlp_bias_grad(dY, db, K, M)


def mlp_bias_grad(dY, db, M, N) -> None:
    """db[n] = sum_m dY[m, n]."""
    db[: int(N)] = total(dY[: int(M) * int(N)].reshape(int(M), int(N)), axis=0)


def mlp_dueling_forward(VA, Q, M, A) -> None:
    """Q[m, a] = V[m] + Adv[m, a] - mean_a Adv[m, a], VA [M, A+1] = (Adv, V)."""
    M, A = int(M), int(A)
    va = VA[: M * (A + 1)].reshape(M, A + 1)
    adv = va[:, :A]
    Q[: M * A] = (va[:, A:] + adv - mean(adv, axis=1, keepdims=True)).ravel()


def mlp_dueling_backward(dQ, dVA, M, A) -> None:
    """dAdv = dQ - mean_a dQ, dV = sum_a dQ."""
    M, A = int(M), int(A)
    dq = dQ[: M * A].reshape(M, A)
    out = dVA[: M * (A + 1)].reshape(M, A + 1)
    out[:, :A] = dq - mean(dq, axis=1, keepdims=True)
    out[:, A] = total(dq, axis=1)
