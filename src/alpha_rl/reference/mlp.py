"""Oracle of cuda/mlp.cu: dense layers of the Q-network. Works in the arrays' own dtype, so the
same functions run the float32 numpy backend and float64 gradient checks."""

from __future__ import annotations

import numpy as np

from alpha_rl.abi import MLP


def _op(X: np.ndarray, rows: int, cols: int, transposed: int) -> np.ndarray:
    """The [rows, cols] matrix op(X) of a flat buffer (stored [cols, rows] when transposed)."""
    flat = X[: rows * cols]
    return flat.reshape(cols, rows).T if transposed else flat.reshape(rows, cols)


def mlp_gemm(A, B, bias, mask, C, M, N, K, trans_a, trans_b, relu) -> None:
    """C[M, N] = op(A) @ op(B) (+ bias) (ReLU if relu) (* (mask > 0))."""
    M, N, K = int(M), int(N), int(K)
    out = _op(A, M, K, trans_a) @ _op(B, K, N, trans_b)
    if bias is not None:
        out = out + bias[:N]
    if relu:
        out = np.maximum(out, 0)
    if mask is not None:
        out = np.where(mask[: M * N].reshape(M, N) > 0, out, 0)
    C[: M * N] = out.ravel()


mlp_gemm_64 = mlp_gemm  # the same product on larger tiles (same order of additions)
mlp_gemm_128 = mlp_gemm


def mlp_gemm_rows(X, W, bias, Y, M, N, K, relu) -> None:
    """Y[M, N] = X[M, K] @ W[N, K]^T (+ bias) (ReLU if relu)."""
    mlp_gemm(X, W, bias, None, Y, M, N, K, 0, 1, relu)


BK = MLP["MLP_BK"]  # split-K chunks are multiples of it


def split_chunk(K: int, splits: int) -> int:
    """Rows of K per split: ceil(K / splits) rounded up to a multiple of BK."""
    per_split = -(-K // splits)
    return -(-per_split // BK) * BK


def mlp_gemm_partial(A, B, P, M, N, K, trans_a, trans_b, splits) -> None:
    """P[s] = op(A)[:, Ks] @ op(B)[Ks, :] for the chunks Ks of K (empty chunks give zeros)."""
    M, N, K, splits = int(M), int(N), int(K), int(splits)
    a, b, chunk = _op(A, M, K, trans_a), _op(B, K, N, trans_b), split_chunk(K, splits)
    for s in range(splits):
        lo, hi = min(K, s * chunk), min(K, (s + 1) * chunk)
        P[s * M * N : (s + 1) * M * N] = (a[:, lo:hi] @ b[lo:hi, :]).ravel()


def mlp_gemm_pair(X1, W1, bias1, X2, W2, bias2, Y1, Y2, M1, M2, N, K, relu) -> None:
    """Y1 = X1 W1^T (+ bias1), Y2 = X2 W2^T (+ bias2), ReLU if relu: two forward products."""
    mlp_gemm(X1, W1, bias1, None, Y1, M1, N, K, 0, 1, relu)
    mlp_gemm(X2, W2, bias2, None, Y2, M2, N, K, 0, 1, relu)


mlp_gemm_rows_pair = mlp_gemm_pair  # the same products, a warp per row


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


def mlp_bias_grad(dY, db, M, N) -> None:
    """db[n] = sum_m dY[m, n]."""
    db[: int(N)] = dY[: int(M) * int(N)].reshape(int(M), int(N)).sum(axis=0)


def mlp_dueling_forward(VA, Q, M, A) -> None:
    """Q[m, a] = V[m] + Adv[m, a] - mean_a Adv[m, a], VA [M, A+1] = (Adv, V)."""
    M, A = int(M), int(A)
    va = VA[: M * (A + 1)].reshape(M, A + 1)
    adv = va[:, :A]
    Q[: M * A] = (va[:, A:] + adv - adv.mean(axis=1, keepdims=True)).ravel()


def mlp_dueling_backward(dQ, dVA, M, A) -> None:
    """dAdv = dQ - mean_a dQ, dV = sum_a dQ."""
    M, A = int(M), int(A)
    dq = dQ[: M * A].reshape(M, A)
    out = dVA[: M * (A + 1)].reshape(M, A + 1)
    out[:, :A] = dq - dq.mean(axis=1, keepdims=True)
    out[:, A] = dq.sum(axis=1)
