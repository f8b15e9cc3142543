"""fdlibm's exp, log, expm1, log1p, tanh, power, sin and cos written with +, -, *, / and NumPy's
rint, frexp and ldexp, which IEEE 754 rounds the same on every CPU (NumPy does not fuse a multiply
and an add across two ufunc calls), in float64: within an ulp or two of the true value. A float32
argument gives the float32 nearest that float64 value. alpha_rl.portable offers them beside its
products and sums; a run's code takes them from there.
"""

from __future__ import annotations

import math

import numpy as np

F32, F64 = np.float32, np.float64


_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10  # ln 2, 32 + 53 bits
_INV_LN2 = 1.44269504088896338700e00


# elements a function computes at once: its float64 temporaries stay small and in the cache
CHUNK = 1 << 13


def _kind(*args) -> type:
    """The dtype to return: float32 when each operand is float32 or a Python int or float (weak,
    as in NumPy), else float64."""
    kinds = {np.asarray(v).dtype for v in args if type(v) not in (int, float)}
    return F32 if kinds == {np.dtype(F32)} else F64


def _map(fn, *args) -> np.ndarray | np.floating:
    """fn (float64 arrays in, float64 out) over the broadcast operands, CHUNK elements at a time,
    rounded to `_kind(*args)`; a scalar where every operand is one."""
    arrays = [np.asarray(v) for v in args]
    kind = _kind(*args)
    if max(v.size for v in arrays) <= CHUNK:  # small operands: one call, broadcast inside
        out = np.asarray(fn(*(v.astype(F64) for v in arrays))).astype(kind)
        return out[()] if not out.shape else out
    shape = np.broadcast_shapes(*(v.shape for v in arrays))
    flat = [v.astype(F64) if v.ndim == 0 else np.broadcast_to(v, shape).reshape(-1) for v in arrays]
    out = np.empty(shape, kind)
    into = out.reshape(-1)
    for start in range(0, into.size, CHUNK):
        parts = [v if v.ndim == 0 else v[start : start + CHUNK].astype(F64) for v in flat]
        into[start : start + CHUNK] = fn(*parts)
    return out[()] if not shape else out


def _exp64(x: np.ndarray) -> np.ndarray:
    """fdlibm's exp of float64 x (error < 1 ulp)."""
    P1, P2, P3 = 1.66666666666666019037e-01, -2.77777777770155933842e-03, 6.61375632143793436117e-05
    P4, P5 = -1.65339022054652515390e-06, 4.13813679705723846039e-08
    with np.errstate(invalid="ignore", over="ignore"):
        normal = bool(np.all(np.abs(x) <= 707.0))  # no inf, NaN, overflow or subnormal result
        k = np.rint(x * _INV_LN2) if normal else np.rint(np.clip(x, -746.0, 710.0) * _INV_LN2)
        if not normal:
            k = np.where(np.isnan(k), 0.0, k)
        hi = x - k * _LN2_HI  # k * _LN2_HI is exact (|k| < 2^11, 32-bit constant)
        lo = k * _LN2_LO
        r = hi - lo
        t = r * r
        c = r - t * (P1 + t * (P2 + t * (P3 + t * (P4 + t * P5))))
        y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
        if normal:
            return np.ldexp(y, k.astype(np.int64))
        # two steps of 2^(k/2): neither overflows before the result does, subnormals round once
        half = np.trunc(k / 2.0)
        out = np.ldexp(np.ldexp(y, half.astype(np.int64)), (k - half).astype(np.int64))
    out = np.where(x > 709.782712893384, np.inf, out)
    out = np.where(x < -745.1332191019412, 0.0, out)
    return np.where(np.isnan(x), x, out)


def _log64(x: np.ndarray) -> np.ndarray:
    """fdlibm's log of float64 x (error < 1 ulp); log 0 = -inf, log of x < 0 = NaN."""
    Lg1, Lg2, Lg3 = 6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01
    Lg4, Lg5 = 2.222219843214978396e-01, 1.818357216161805012e-01
    Lg6, Lg7 = 1.531383769920937332e-01, 1.479819860511658591e-01
    finite = (x > 0) & (x < np.inf)  # NaN too is neither
    plain = bool(finite.all())
    m, e = np.frexp(x if plain else np.where(finite, x, 1.0))  # x = m 2^e, m in [0.5, 1)
    small = m < 0.7071067811865476
    m = np.where(small, m * 2.0, m)
    e = (e - small).astype(F64)  # m in [sqrt(2)/2, sqrt(2))
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    R = z * (Lg1 + w * (Lg3 + w * (Lg5 + w * Lg7))) + w * (Lg2 + w * (Lg4 + w * Lg6))
    hfsq = 0.5 * f * f
    out = e * _LN2_HI - ((hfsq - (s * (hfsq + R) + e * _LN2_LO)) - f)
    if plain:
        return out
    with np.errstate(invalid="ignore"):
        out = np.where(finite, out, np.where(x == 0, -np.inf, np.where(x > 0, x, np.nan)))
    return np.where(np.isnan(x), x, out)


def _expm1_64(x: np.ndarray) -> np.ndarray:
    """exp(x) - 1 of float64 x without cancellation near 0 (Kahan: (u - 1) x / log u, u = e^x,
    for |x| < 1; e^x - 1 beyond), within a few ulps."""
    u = _exp64(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        near = (u - 1.0) * x / _log64(u)
    near = np.where(u == 1.0, x, near)
    return np.where(np.abs(x) < 1.0, near, u - 1.0)


def exp(x):
    """e^x (float32 in, float32 out; else float64), the same on every CPU."""
    return _map(_exp64, x)


def log(x):
    """ln x (float32 in, float32 out; else float64), the same on every CPU."""
    return _map(_log64, x)


def expm1(x):
    """e^x - 1 (float32 in, float32 out; else float64), the same on every CPU."""
    return _map(_expm1_64, x)


def _log1p64(x: np.ndarray) -> np.ndarray:
    """x log u / (u - 1) with u = 1 + x rounded (Goldberg), x itself where u = 1: within a few
    ulps of ln(1 + x)."""
    u = 1.0 + x
    with np.errstate(invalid="ignore", divide="ignore"):
        y = _log64(u) * (x / (u - 1.0))
    y = np.where(u == 1.0, x, y)
    return np.where(np.isposinf(x), np.inf, np.where(x == -1.0, -np.inf, y))


def log1p(x):
    """ln(1 + x) (float32 in, float32 out; else float64), the same on every CPU."""
    return _map(_log1p64, x)


def _tanh64(x: np.ndarray) -> np.ndarray:
    """fdlibm's tanh: 1 - 2 / (e^2|x| + 1) for |x| >= 1, -t / (t + 2), t = expm1(-2|x|), below;
    1 from 22 on, x itself below 2^-28."""
    ax = np.abs(x)
    with np.errstate(over="ignore"):
        big = 1.0 - 2.0 / (_expm1_64(2.0 * np.minimum(ax, 22.0)) + 2.0)
        t = _expm1_64(-2.0 * ax)
        small = -t / (t + 2.0)
    y = np.where(ax >= 22.0, 1.0, np.where(ax >= 1.0, big, small))
    y = np.where(ax < 2.0**-28, ax, y)
    return np.where(np.isnan(x), x, np.copysign(y, x))


def tanh(x):
    """tanh x (float32 in, float32 out; else float64), the same on every CPU."""
    return _map(_tanh64, x)


def _power64(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        out = _exp64(y * _log64(x))
    return np.where((y == 0) | (x == 1), 1.0, out)


def power(x, y):
    """x^y for x >= 0 (float32 x and y, or one of them a Python number: float32 out; else
    float64), the same on every CPU: e^(y ln x) in float64 (within ~10 ulps there), x^0 = 1^y =
    1; a negative x gives NaN, -0 is taken as +0."""
    return _map(_power64, x, y)


# the FreeBSD msun kernels of sin and cos on [-pi/4, pi/4]
_S = (
    -1.66666666666666324348e-01,
    8.33333333332248946124e-03,
    -1.98412698298579493134e-04,
    2.75573137070700676789e-06,
    -2.50507602534068634195e-08,
    1.58969099521155010221e-10,
)
_C = (
    4.16666666666666019037e-02,
    -1.38888888888741095749e-03,
    2.48015872894767294178e-05,
    -2.75573143513906633035e-07,
    2.08757232129817482790e-09,
    -1.13596475577881948265e-11,
)
# pi/2 in three 33-bit parts: k times each is exact for |k| < 2^20
_PIO2 = (1.57079632673412561417e00, 6.07710050630396597660e-11, 2.02226624871116645580e-21)
_PIO2_TAIL = 8.47842766036889956997e-32
_INV_PIO2 = 6.36619772367581382433e-01


def _kernel_sin(r: np.ndarray) -> np.ndarray:
    z = r * r
    w = z * z
    s = _S[1] + z * (_S[2] + z * _S[3]) + z * w * (_S[4] + z * _S[5])
    return r + (z * r) * (_S[0] + z * s)


def _kernel_cos(r: np.ndarray) -> np.ndarray:
    z = r * r
    w = z * z
    c = z * (_C[0] + z * (_C[1] + z * _C[2])) + w * w * (_C[3] + z * (_C[4] + z * _C[5]))
    hz = 0.5 * z
    one_minus = 1.0 - hz
    return one_minus + (((1.0 - one_minus) - hz) + z * c)


def _sincos64(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sin x, cos x) of float64 x, |x| <= 2^19 pi, within an ulp or two; NaN for inf and NaN."""
    finite = np.isfinite(x)
    x = np.where(finite, x, 0.0)
    k = np.rint(x * _INV_PIO2)
    r = ((x - k * _PIO2[0]) - k * _PIO2[1]) - k * _PIO2[2]
    r = r - k * _PIO2_TAIL
    s, c = _kernel_sin(r), _kernel_cos(r)
    quadrant = np.fmod(k, 4.0)
    quadrant = np.where(quadrant < 0, quadrant + 4.0, quadrant)
    sin = np.select([quadrant == 0, quadrant == 1, quadrant == 2], [s, c, -s], -c)
    cos = np.select([quadrant == 0, quadrant == 1, quadrant == 2], [c, -s, -c], s)
    sin = np.where(x == 0, x, sin)  # sin(-0) = -0
    return np.where(finite, sin, np.nan), np.where(finite, cos, np.nan)


# the largest argument whose reduction by pi/2 stays exact (k times each part of pi/2)
_SINCOS_MAX = 2.0**19 * math.pi


def _angles(x) -> object:
    """x, refused (ValueError) where a finite |x| passes _SINCOS_MAX: its reduction would lose
    the angle (a project's angle is in [0, 2 pi))."""
    arr = np.asarray(x)
    with np.errstate(invalid="ignore"):
        too_big = np.isfinite(arr) & (np.abs(arr) > _SINCOS_MAX)
    if too_big.any():
        largest = float(np.abs(arr[too_big]).max())
        raise ValueError(f"portable sin/cos: |x| up to 2^19 pi ({_SINCOS_MAX:.7g}), got "
                         f"{largest:.7g}: reduce the angle first")  # fmt: skip
    return x


def sin(x):
    """sin x (float32 in, float32 out; else float64), the same on every CPU."""
    return _map(lambda v: _sincos64(v)[0], _angles(x))


def cos(x):
    """cos x (float32 in, float32 out; else float64), the same on every CPU."""
    return _map(lambda v: _sincos64(v)[1], _angles(x))
