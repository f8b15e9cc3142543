"""Float arithmetic whose results are the same on every CPU and with every BLAS NumPy may use.

NumPy hands a product of matrices to its BLAS, whose kernel for the CPU at hand (OpenBLAS picks
one of a dozen at start) adds the terms in an order of its own, and it computes exp, log, sin,
cos, tanh and power with SIMD code chosen for the CPU (SVML on AVX-512, its own on AVX2, the C
library's elsewhere), each rounding in its own way. Every numpy-backend result that went through
them would then depend on the machine. Here instead:

- `matmul(a, b)` of float32 operands: the BLAS multiplies in float64, where the products of
  float32 values are exact and any order of the additions lands within K 2^-53 sum|a_k b_k| of the
  exact sum. An element whose float32 rounding all such values share takes it (the float32
  nearest the exact sum's float64 rounding); the rare one lying near a float32 rounding boundary
  is added again here in the project's order (`_add_in_order`, `total`), which every BLAS's
  order would round alike wherever it rounds unambiguously, but an element all of whose products
  are 0, which is +0 in any order. No BLAS's order reaches the result.
- `exp`, `log`, `log1p`, `expm1`, `sin`, `cos`, `tanh` and `power` are fdlibm's algorithms
  written with +, -, *, / and NumPy's rint, frexp and ldexp, which IEEE 754 rounds the same on
  every CPU (NumPy does not fuse a multiply and an add across two ufunc calls), in float64, so
  they are within an ulp or two of the true value in float64. A float32 argument gives the float32
  nearest that float64 value.

Sums are the project's too: `total`, `mean` and `std` add pairwise by halves with elementwise
adds. NumPy's own reductions add in an order of its release's choosing (its pairwise blocks of
eight, its SIMD lanes; a whole-array float32 sum rounds differently in NumPy 2.2 and 2.4), so a
NumPy upgrade could move a run's figures. A cumulative sum (`np.cumsum`) adds one by one.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from alpha_rl.fdlibm import cos, exp, expm1, log, log1p, power, sin, tanh

# the elementwise functions are fdlibm's (alpha_rl/fdlibm.py), offered here beside the products
__all__ = ["cos", "exp", "expm1", "log", "log1p", "matmul", "mean", "power", "release", "sin",
           "std", "tanh", "total"]  # fmt: skip

F32, F64 = np.float32, np.float64

# ---------------------------------------------------------------- sums


def total(x, axis: int | None = None, keepdims: bool = False, dtype=None):
    """The sum of x's elements (along `axis`; all of them by default) in the project's order:
    pairwise by halves, element i of the first half added to element i of the second, again
    and again (a last odd element carried along), each addition an elementwise NumPy add,
    which rounds the same on every CPU. NumPy's own reductions add in an order of their
    release's choosing (blocks of eight, SIMD lanes): another NumPy could round otherwise.
    Integers and booleans, whose sums are exact, are NumPy's."""
    x = np.asarray(x) if dtype is None else np.asarray(x).astype(dtype)
    if x.dtype.kind not in "fc":
        return np.sum(x, axis=axis, keepdims=keepdims)
    v = x.reshape(-1) if axis is None else np.moveaxis(x, axis, 0)
    if v.shape[0] == 0:
        total = np.zeros(v.shape[1:], v.dtype)
    else:
        while v.shape[0] > 1:
            half = v.shape[0] // 2
            pairs = v[:half] + v[half : 2 * half]
            v = pairs if v.shape[0] % 2 == 0 else np.concatenate([pairs, v[2 * half :]])
        total = v[0]
    if keepdims:
        total = total.reshape((1,) * x.ndim) if axis is None else np.expand_dims(total, axis)
    return total[()] if np.ndim(total) == 0 else total


def mean(x, axis: int | None = None, keepdims: bool = False):
    """sum / count in the project's order (see `total`), in x's float dtype (float64 for
    integers)."""
    x = np.asarray(x)
    if x.dtype.kind not in "fc":
        x = x.astype(F64)
    count = x.size if axis is None else x.shape[axis]
    with np.errstate(invalid="ignore", divide="ignore"):
        return total(x, axis=axis, keepdims=keepdims) / x.dtype.type(count)


def std(x, ddof: int = 0) -> np.floating:
    """The standard deviation of all of x's elements, sqrt(sum (x - mean)^2 / (n - ddof)), in
    the project's order (see `total`)."""
    x = np.asarray(x)
    x = x.astype(F64) if x.dtype.kind not in "fc" else x
    centred = x - mean(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sqrt(total(centred * centred) / x.dtype.type(x.size - ddof))


# ---------------------------------------------------------------- products

_product = np.matmul  # the BLAS's float64 product, into `out` (its order of additions is its own)
# float64 elements of a product checked at once (512 KiB: a block's passes stay in the cache)
CHECK_BLOCK = 1 << 16
_work = threading.local()  # each thread's float64 operands, product and check blocks, reused


def _buffer(name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    """This thread's scratch array `name` of `shape`: grown to the largest asked for and kept,
    so a product's temporaries cost no fresh pages (a pack's judges run oracles in threads)."""
    buffers = _work.__dict__.setdefault("buffers", {})
    size = math.prod(shape)
    held = buffers.get((name, dtype))
    if held is None or held.size < size:
        held = buffers[(name, dtype)] = np.empty(size, dtype)
    return held[:size].reshape(shape)


def release() -> None:
    """Free this thread's scratch arrays (kept between products otherwise)."""
    _work.__dict__.pop("buffers", None)


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """a [..., M, K] @ b [..., K, N] (a or b 1-D as in `@`; a stack of S products as one) of
    float32 operands, in float32, the same on every CPU and BLAS (module docstring); into `out`
    (float32, C-contiguous, of the product's shape) when given. Float64 operands (the gradient
    checks' dtype; no run computes in float64) are multiplied as `@` does."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype == F64 or b.dtype == F64:
        return np.matmul(a, b, out=out)
    if a.dtype != F32 or b.dtype != F32:
        raise TypeError(f"matmul: float32 operands expected, got {a.dtype} and {b.dtype}")
    a3 = a.reshape(1, 1, -1) if a.ndim == 1 else a.reshape((math.prod(a.shape[:-2]), *a.shape[-2:]))
    b3 = b.reshape(1, -1, 1) if b.ndim == 1 else b.reshape((math.prod(b.shape[:-2]), *b.shape[-2:]))
    shape = (max(len(a3), len(b3)), a3.shape[1], b3.shape[2])
    stacks = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    final = stacks + a.shape[-2:-1] + (b.shape[-1:] if b.ndim > 1 else ())  # as np.matmul
    if out is not None and (out.dtype != F32 or out.shape != final or not out.flags.c_contiguous):
        raise ValueError(f"matmul: out must be C-contiguous float32 {final}, not {out.dtype} "
                         f"{out.shape}")  # fmt: skip
    if len(a3) != len(b3):  # one operand for the whole stack
        a3, b3 = (np.broadcast_to(x, shape[:1] + x.shape[1:]) for x in (a3, b3))
    into = np.empty(final, F32) if out is None else out
    _stack(a3, b3, into.reshape(shape))
    return into if final else into[()]


def _stack(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out [S, M, N] = the float32 products of float32 a [S, M, K] and b [S, K, N] (see
    `matmul`): one float64 product of the stack, checked as S M rows."""
    S, M, K = a.shape
    N = b.shape[2]
    if out.size == 0 or K == 0:
        out[...] = 0  # a sum of no products
        return
    a64, b64 = a.astype(F64), b.astype(F64)
    c = _product(a64, b64, out=_buffer("c", (S, M, N), F64)).reshape(S * M, N)
    flat = out.reshape(S * M, N)
    with np.errstate(invalid="ignore", over="ignore"):  # inf and NaN operands go on as such
        T, scale = _reach(a, b)
        near = _near_boundary(c, T, scale, flat)
    if near.size:
        finite = np.isfinite(c.reshape(-1)[near])  # inf and NaN are the same in any order
        flat.reshape(-1)[near[~finite]] = c.reshape(-1)[near[~finite]]
        flat.reshape(-1)[near[np.isnan(c.reshape(-1)[near])]] = np.nan  # one NaN, any order's
        rows, cols = a64.reshape(S * M, K), b64.transpose(0, 2, 1)  # the copies: out may be a, b
        near = _drop_exact_zeros(rows, cols, M, T, c, near[finite], flat)
        _add_in_order(rows, cols, M, near, flat)
    np.add(out, F32(0), out=out)  # a zero is +0, whichever sign any order's sum gave it


def _reach(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, float]:
    """(T [S M] float32, scale): how far two float64 sums of the products of an element of row
    (s, i), in any orders, may lie apart, the rounding of c +- reach included, is at most T_si
    scale: 2 (K + 2) 2^-53 sum_k |a_sik| max |b| >= 2 (K + 2) 2^-53 sum_k |a_sik b_skj| (products
    of float32 values are exact in float64, any order's sum lies within K 2^-53 of them: the 2 of
    K + 2 holds that). T's float32 sums lie within K 2^-24 of theirs: the scale is raised by
    that; T_si = 0 is a row of zeros. An inf or NaN operand makes a row's reach inf or NaN: each
    of its elements is checked again."""
    K = a.shape[2]
    largest = abs(max(float(b.max()), -float(b.min()))) if b.size else 0.0  # +0, not -0
    T = np.abs(a).reshape(-1, K) @ np.ones(K, F32)
    return T, largest * (1 + K * 2.0**-23) * 2 * (K + 2) * 2.0**-53


def _near_boundary(c: np.ndarray, T: np.ndarray, scale: float, out: np.ndarray) -> np.ndarray:
    """Flat indices of c [R, N] whose interval c_rj +- reach holds a float32 rounding boundary
    (or is not finite), reach = max T_r scale over a block of rows; elsewhere every value of
    the interval, each order's float64 sum of the element's products among them, rounds to the
    same float32 as c_rj, written to out (c + reach rounded: an exact zero is +0). Each block's
    passes stay in the cache."""
    R, N = c.shape
    rows = max(1, CHECK_BLOCK // N)
    lo = _buffer("lo", (min(rows, R), N), F32)
    differ = _buffer("differ", (min(rows, R), N), np.bool_)
    found = []
    for start in range(0, R, rows):
        stop = min(R, start + rows)
        n, block, into = stop - start, c[start:stop], out[start:stop]
        reach = float(T[start:stop].max()) * scale
        np.add(block, reach, out=into, casting="same_kind")
        np.subtract(block, reach, out=lo[:n], casting="same_kind")
        if np.not_equal(lo[:n], into, out=differ[:n]).any():  # NaN != NaN: found too
            found.append(np.flatnonzero(differ[:n]) + start * N)
    return np.concatenate(found) if found else np.zeros(0, np.intp)


def _drop_exact_zeros(
    rows: np.ndarray, cols: np.ndarray, M: int, T: np.ndarray, c: np.ndarray, near: np.ndarray,
    out: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """`near` but the elements all of whose products are 0 (a dead unit's row, a sparse
    gradient's), set to +0 as they are in every order: a row of zeros (T = 0), else each
    checked for a nonzero product. rows [S M, K] and cols [S, N, K] are the float64 operands;
    out and c [S M, N]."""
    maybe = np.flatnonzero(c.reshape(-1)[near] == 0)
    if not maybe.size:
        return near
    r, j = np.divmod(near[maybe], c.shape[1])
    zero = T[r] == 0
    per = max(1, (1 << 18) // rows.shape[1])  # elements whose operands are held at once
    unsure = np.flatnonzero(~zero)
    for start in range(0, unsure.size, per):
        at = unsure[start : start + per]
        products = (rows[r[at]] != 0) & (cols[r[at] // M, j[at]] != 0)
        zero[at] = ~products.any(axis=1)
    out.reshape(-1)[near[maybe[zero]]] = 0
    return np.delete(near, maybe[zero])


def _add_in_order(
    rows: np.ndarray, cols: np.ndarray, M: int, near: np.ndarray, out: np.ndarray
) -> None:
    """out's elements at flat indices `near` from their products (exact in float64) added in the
    project's order (`total`): within K 2^-53 sum|a_k b_k| of the exact sum, as every order is,
    so each rounds to the float32 that any order's sum does wherever that is unambiguous."""
    N, K = out.shape[1], rows.shape[1]
    per = max(1, (1 << 18) // K)  # elements whose products are held at once
    flat = out.reshape(-1)
    for start in range(0, near.size, per):
        r, j = np.divmod(near[start : start + per], N)
        flat[near[start : start + per]] = total(rows[r] * cols[r // M, j], axis=1)
