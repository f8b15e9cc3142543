"""alpha_rl.portable: products and functions whose float results do not depend on the CPU, its
BLAS kernel or NumPy's SIMD dispatch. Their accuracy is checked against long double, and the
products' independence of the order of additions by handing them float64 products added in
other orders (the BLAS kernels' freedom) and asking for the same bits."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest

import alpha_rl
from alpha_rl import portable

F32, F64, LD = np.float32, np.float64, np.longdouble
RNG = np.random.default_rng(20261205)


def ulps(got: np.ndarray, want: np.ndarray) -> float:
    """Largest distance of got from the long double want, in ulps of want's float64 rounding."""
    spacing = np.spacing(np.abs(want.astype(F64))).astype(LD)
    return float(np.max(np.abs(got.astype(LD) - want) / spacing))


needs_long_double = pytest.mark.skipif(
    np.finfo(LD).nmant < 60, reason="long double is no wider than double here"
)


@needs_long_double
@pytest.mark.parametrize(
    ("name", "x", "bound"),
    [
        ("exp", np.r_[RNG.uniform(-700, 700, 4000), RNG.uniform(-2, 2, 4000), 1e-9, -1e-12], 1),
        ("log", np.r_[RNG.uniform(0.5, 2, 4000), 10 ** RNG.uniform(-300, 300, 4000)], 1),
        ("log1p", np.r_[RNG.uniform(-0.999, 10, 4000), RNG.uniform(-1e-8, 1e-8, 500)], 3),
        ("expm1", np.r_[RNG.uniform(-40, 40, 4000), RNG.uniform(-1e-8, 1e-8, 500)], 3),
        ("tanh", np.r_[RNG.uniform(-30, 30, 4000), RNG.uniform(-1.5, 1.5, 4000), 1e-10], 5),
        ("sin", np.r_[RNG.uniform(-10, 10, 4000), RNG.uniform(0, 2 * np.pi, 4000), 1e-3], 3),
        ("cos", np.r_[RNG.uniform(-10, 10, 4000), RNG.uniform(-1e5, 1e5, 4000)], 3),
    ],
)
def test_each_function_is_within_ulps_of_the_true_value(name: str, x: np.ndarray, bound):
    got = getattr(portable, name)(x)
    want = getattr(np, name)(x.astype(LD))
    assert got.dtype == F64 and ulps(got, want) <= bound


@needs_long_double
def test_power_is_within_ulps_and_keeps_its_special_values() -> None:
    base, expo = RNG.uniform(0, 10, 4000), RNG.uniform(-3, 3, 4000)
    assert ulps(portable.power(base, expo), np.power(base.astype(LD), expo.astype(LD))) <= 10
    x = np.array([0.0, 0.0, 0.0, 1.0, 4.0, np.inf, 1.0, 1.0, -2.0])
    special = portable.power(x, np.array([2.0, 0.0, -1.0, 7.5, 0.5, 0.0, np.inf, np.nan, 0.5]))
    np.testing.assert_array_equal(special[:8], [0.0, 1.0, np.inf, 1.0, 2.0, 1.0, 1.0, 1.0])
    assert np.isnan(special[8])


def test_an_angle_past_the_exact_reduction_is_refused() -> None:
    assert portable.sin(2.0**19 * np.pi) == portable.sin(2.0**19 * np.pi)  # the last one taken
    with pytest.raises(ValueError, match=r"\|x\| up to 2\^19 pi .* got 1e\+22"):
        portable.sin(np.array([0.5, 1e22]))
    assert np.isnan(portable.cos(np.array([np.inf, np.nan]))).all()


def test_float32_in_gives_the_float32_nearest_the_true_value() -> None:
    x = RNG.uniform(-80, 80, 20000).astype(F32)
    got = portable.exp(x)
    assert got.dtype == F32
    if np.finfo(LD).nmant >= 60:
        np.testing.assert_array_equal(got, np.exp(x.astype(LD)).astype(F32))
    assert type(portable.exp(F32(1))) is F32 and type(portable.exp(1.0)) is F64
    assert portable.power(np.arange(3, dtype=F32), 2.0).dtype == F32  # a Python float is weak
    assert portable.power(F32(2), F32(0.5)) == F32(math.sqrt(2))


@pytest.mark.parametrize("name", ["exp", "log", "log1p", "expm1", "tanh", "sin", "cos"])
def test_special_values_are_those_of_numpy(name: str) -> None:
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-310, 710, -746, 709.7, -745])
    with np.errstate(all="ignore"):
        got, want = getattr(portable, name)(x), getattr(np, name)(x)
        close = np.abs(got - want) <= 4 * np.spacing(np.abs(want))
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert (same | close).all(), (x[~(same | close)], got[~(same | close)])
    assert (np.signbit(got) == np.signbit(want))[[0, 1]].all()  # sin(-0) = -0, tanh(-0) = -0 ...


# --- products ---


def exact_rounded(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 of math.fsum (the float64 nearest the exact sum) of each element's products."""
    a64, b64 = a.astype(F64), b.astype(F64)
    return np.array([[math.fsum((a64[i] * b64[:, j]).tolist()) for j in range(b.shape[1])]
                     for i in range(a.shape[0])]).astype(F32)  # fmt: skip


def in_order(order: str):
    """A float64 product a @ b adding each element's exact products in another order, as another
    BLAS kernel would: k ascending, k descending, or in four interleaved accumulators."""

    def product(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        out = np.empty(a.shape[:-1] + b.shape[-1:]) if out is None else out
        for i in np.ndindex(a.shape[:-2]):  # a stack one by one
            out[i] = summed(a[i], b[i])
        return out

    def summed(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        terms = a[:, :, None] * b[None, :, :]  # [M, K, N], exact for float32 values
        if order == "descending":
            terms = terms[:, ::-1]
        out = np.zeros((a.shape[0], b.shape[1]))
        if order == "interleaved":
            lanes = [np.zeros_like(out) for _ in range(4)]
            for k in range(terms.shape[1]):
                lanes[k % 4] += terms[:, k]
            return (lanes[0] + lanes[2]) + (lanes[1] + lanes[3])
        for k in range(terms.shape[1]):
            out += terms[:, k]
        return out

    return product


def near_midpoints(M: int, N: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """Operands whose exact sums lie just above float32 midpoints, where the order of additions
    decides the rounding: column j holds f_j (a float32 with an even last bit), half its ulp and
    K - 2 terms 2^-57, each lost when added to f_j alone, not when added to each other first;
    row i scales it by 2^(i mod 5)."""
    f = (1 + 2 * RNG.integers(0, 2**22, N) * 2.0**-23).astype(F32)
    b = np.full((K, N), 2.0**-57, F32)
    b[0], b[1] = f, F32(2.0**-24)
    a = np.ones((M, K), F32) * (2.0 ** (np.arange(M) % 5))[:, None].astype(F32)
    return a, b


def spread_widest(K: int) -> tuple[np.ndarray, np.ndarray]:
    """A row of products f (a float32 of even last bit), half its ulp, then K - 2 terms just
    under half an ulp of 1 in float64 (times a column of ones): added big first every small
    term is lost and the sum is the float32 midpoint f + half; added small first they count,
    about (K - 2) 2^-54 above it, about as far apart as two orders' sums get (gamma_K of the
    products' sum, which is about 1 here)."""
    a = np.full((1, K), F32(2.0**-54 * (1 - 2.0**-20)), F32)
    a[0, 0], a[0, 1] = F32(1 + 2 * 1234 * 2.0**-23), F32(2.0**-24)
    return a, np.ones((K, 1), F32)


@pytest.mark.parametrize("K", [64, 1000, 4096])
def test_the_reach_covers_the_widest_spread_of_two_orders(K: int, monkeypatch) -> None:
    """The small-first sum lies about (K - 2) 2^-54 above the midpoint the big-first one is
    at: the check finds it, though within 8 times of missing it (the bound is not loose), and
    both orders give the same product."""
    a, b = spread_widest(K)
    a64, b64 = a.astype(F64), b.astype(F64)
    sums = [in_order(o)(a64, b64) for o in ("ascending", "descending")]
    assert sums[0].astype(F32) != sums[1].astype(F32)  # the orders round apart in float32
    T, scale = portable._reach(a[None], b[None])
    out = np.empty((1, 1), F32)
    assert portable._near_boundary(sums[1], T, scale, out).size == 1
    assert portable._near_boundary(sums[1], T, scale / 8, out).size == 0
    got = []
    for order in ("ascending", "descending"):
        monkeypatch.setattr(portable, "_product", in_order(order))
        got.append(portable.matmul(a, b))
    assert got[0] == got[1]


def test_a_zero_is_plus_zero_whatever_order_gave_its_sign(monkeypatch) -> None:
    """A sum that cancels to below float32's smallest (one order's -0, another's +0), and
    products of -0 (an order that starts from the first product keeps -0, one from +0 does
    not): +0 either way."""
    be, a1, a4 = 2.0**-60, 2.0**-50, 0.75 * 2.0**-103
    a = np.array([[a1, a4, a1, F32(2.1e-48 / be)], [1, 1, 1, 1]], F32)
    b = np.array([[be, -0.0], [be, -0.0], [-be, -0.0], [-be, -0.0]], F32)
    for order in ("ascending", "descending"):
        monkeypatch.setattr(portable, "_product", in_order(order))
        got = portable.matmul(a, b)
        assert (got == 0).all() and not np.signbit(got).any(), (order, got)


@pytest.mark.parametrize(("M", "N", "K"), [(1, 1, 1), (33, 31, 17), (16, 3, 256), (64, 40, 300)])
def test_the_product_is_the_rounded_exact_sum(M: int, N: int, K: int) -> None:
    for scale in (1.0, 1e-20, 1e20):
        a = (RNG.standard_normal((M, K)) * scale).astype(F32)
        b = RNG.standard_normal((N, K)).astype(F32).T  # a transposed operand, as the layers pass
        a[a < -1.5 * scale] = 0
        got = portable.matmul(a, b)
        assert got.dtype == F32 and got.shape == (M, N)
        np.testing.assert_array_equal(got, exact_rounded(a, b))


@pytest.mark.parametrize("order", ["ascending", "descending", "interleaved"])
def test_the_product_does_not_depend_on_the_order_of_additions(order: str, monkeypatch) -> None:
    cases = [near_midpoints(20, 30, 64), near_midpoints(5, 7, 24)]
    rand = RNG.standard_normal((40, 50)).astype(F32), RNG.standard_normal((50, 24)).astype(F32)
    cases.append(rand)
    want = [portable.matmul(a, b) for a, b in cases]
    monkeypatch.setattr(portable, "_product", in_order(order))
    for (a, b), expected in zip(cases, want, strict=True):
        np.testing.assert_array_equal(portable.matmul(a, b), expected)


def test_the_check_finds_the_elements_near_a_rounding_boundary() -> None:
    """near_midpoints' elements are what the fixed-order sum is for: each of them is found, and
    the orders above would round them apart."""
    a, b = near_midpoints(20, 30, 64)
    a64, b64 = a.astype(F64), b.astype(F64)
    c = portable._product(a64, b64)
    found = portable._near_boundary(c, *portable._reach(a[None], b[None]), np.empty(c.shape, F32))
    assert found.size == c.size
    apart = [in_order(order)(a.astype(F64), b.astype(F64)).astype(F32)
             for order in ("ascending", "descending")]  # fmt: skip
    assert not np.array_equal(*apart)


@pytest.mark.parametrize("order", ["ascending", "descending"])
def test_exact_zeros_are_zeros_and_a_cancelled_sum_is_not_one(order: str, monkeypatch) -> None:
    """A ReLU's zeros and a sparse gradient make many elements whose products are all 0: +0
    in any order. An element whose products 1, -1, 2^-60 sum to 0 in one order (2^-60 lost) and
    to 2^-60 in another is not such a zero: it is added in the project's order, whatever the
    BLAS's was."""
    a = RNG.standard_normal((30, 40)).astype(F32)
    b = RNG.standard_normal((40, 20)).astype(F32)
    a[a < 0.8], b[b < 0.8] = 0, 0
    b[:, 0] = 0
    a[0, :3], b[:3, 1] = [-1, 1, 2.0**-30], [1, 1, 2.0**-30]
    a[0, 3:], b[3:, 1] = 0, 0
    want = exact_rounded(a, b)
    want[0, 1] = portable.total(a[0].astype(F64) * b[:, 1].astype(F64))
    monkeypatch.setattr(portable, "_product", in_order(order))
    got = portable.matmul(a, b)
    np.testing.assert_array_equal(got, want)
    assert not np.signbit(got[got == 0]).any() and (got[:, 0] == 0).all()
    orders = [in_order(o)(a[:1].astype(F64), b[:, 1:2].astype(F64))[0, 0] for o in
              ("ascending", "descending")]  # fmt: skip
    assert orders[0] != orders[1]  # the case is one the orders round apart


def test_vectors_zero_sizes_non_finite_and_float64() -> None:
    m, v = RNG.standard_normal((6, 9)).astype(F32), RNG.standard_normal(9).astype(F32)
    np.testing.assert_array_equal(portable.matmul(m, v), exact_rounded(m, v[:, None])[:, 0])
    np.testing.assert_array_equal(portable.matmul(v, m.T), exact_rounded(v[None], m.T)[0])
    assert portable.matmul(np.zeros((0, 3), F32), np.zeros((3, 4), F32)).shape == (0, 4)
    np.testing.assert_array_equal(portable.matmul(np.ones((2, 0), F32), np.ones((0, 3), F32)), 0)
    bad = m.copy()
    bad[1, 2], bad[3, 0] = np.inf, np.nan
    got = portable.matmul(bad, np.ones((9, 2), F32))
    assert np.isposinf(got[1]).all() and np.isnan(got[3]).all()
    want = exact_rounded(m, np.ones((9, 2), F32))
    np.testing.assert_array_equal(np.delete(got, [1, 3], 0), np.delete(want, [1, 3], 0))
    assert not np.signbit(portable.matmul(-np.zeros((1, 2), F32), np.ones((2, 1), F32))).any()
    d = RNG.standard_normal((3, 4))
    np.testing.assert_array_equal(portable.matmul(d, d.T), d @ d.T)  # float64: the BLAS's
    s, w = RNG.standard_normal((3, 4, 5)).astype(F32), RNG.standard_normal(4).astype(F32)
    for x, y in ((w, s), (s, w[:, None].repeat(5, 1).T), (s[0], s[1].T), (w, w)):
        assert np.shape(portable.matmul(x, y)) == np.shape(x @ y)
    with pytest.raises(ValueError, match="out must be C-contiguous float32"):
        portable.matmul(m, m.T, out=np.empty((6, 6)))
    with pytest.raises(TypeError, match="float32 operands"):
        portable.matmul(np.ones((2, 2), np.float16), np.ones((2, 2), np.float16))


# --- nothing computes around it ---

PACKAGE = Path(alpha_rl.__file__).parent
# what NumPy or math computes with a BLAS, a SIMD dispatch or the C library's functions
UNPORTABLE = {
    "np": {"dot", "matmul", "einsum", "tensordot", "inner", "vdot", "vecdot", "matvec",
           "vecmat", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos",
           "tan", "tanh", "sinh", "cosh", "arcsin", "arccos", "arctan", "arctan2", "arcsinh",
           "arccosh", "arctanh", "sinc", "i0", "power", "float_power", "cbrt", "hypot",
           "logaddexp", "logaddexp2", "linalg", "cov", "corrcoef", "convolve", "correlate",
           "polyfit", "polyval", "trapezoid", "interp"},
    "math": {"exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "pow", "sin", "cos",
             "tan", "tanh", "sinh", "cosh", "asinh", "acosh", "atanh", "atan", "atan2", "asin",
             "acos", "hypot", "dist", "cbrt", "erf", "erfc", "gamma", "lgamma", "sumprod"},
}  # fmt: skip
# parts of the package whose figures no run's results depend on, and why
OUTSIDE = {
    "portable.py": "the portable arithmetic itself",
    "fdlibm.py": "the portable arithmetic itself (its functions)",
    "killcheck": "judges recorded runs (statistics printed to a few digits)",
    "search": "a hyper-parameter search's sampler and shrinkage (Optuna's own)",
    "tracking": "the tracking server and stores",
    "docsite": "the documentation's generators",
    "build": "the cubins' build",
    "backend/cuda.py": "the GPU backend",
}
# single uses inside the run's code that are not its results
EXEMPT = {
    ("reference/mlp.py", "tf32_bound"): "the audit's bound on a GPU product (float64, a bound)",
    ("reference/per.py", "claim"): "integer counts per block (exact in any order)",
}


def unportable_calls(path: Path, root: Path = PACKAGE) -> list[str]:
    """`file:line what` of each call around portable in one module: NumPy or math functions of
    UNPORTABLE, the @ operator, ** of a non-literal or an exponent other than 2, and NumPy's
    reductions (x.sum(), np.mean(...), np.add.reduce: portable.total and mean instead; a count
    by np.count_nonzero), but in the functions EXEMPT."""
    name = str(path.relative_to(root))
    tree = ast.parse(path.read_text(encoding="utf-8"))
    exempt = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
              and (name, f.name) in EXEMPT for n in ast.walk(f)}  # fmt: skip
    found = {f"{name}:{node.lineno} {what}" for node in ast.walk(tree)
             if id(node) not in exempt and (what := _unportable(node))}  # fmt: skip
    return sorted(found, key=lambda hit: int(hit.split(":")[1].split()[0]))


# NumPy's reductions of floats add in an order of their release's choosing
REDUCTIONS = {"sum", "mean", "std", "var", "average", "nansum", "nanmean", "nanstd", "nanvar",
              "prod", "reduce", "reduceat", "dot", "trace"}  # fmt: skip


def _unportable(node: ast.AST) -> str | None:
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in REDUCTIONS):  # fmt: skip
        return f".{node.func.attr}()"
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.attr in UNPORTABLE.get(node.value.id, ())):  # fmt: skip
        return f"{node.value.id}.{node.attr}"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return "@"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        # exact: 2 ** 63, 2.0 ** -24 (a Python float's ** is the C library's pow: x * x instead)
        ints = all(_literal(side, int) for side in (node.left, node.right))
        two = isinstance(node.left, ast.Constant) and node.left.value == 2 and _literal(node.right)
        return None if ints or two else "**"
    if isinstance(node, ast.ImportFrom) and node.module in ("numpy", "math"):
        names = UNPORTABLE["np" if node.module == "numpy" else "math"] | REDUCTIONS
        hit = [alias.name for alias in node.names if alias.name in names]
        return f"from {node.module} import {', '.join(hit)}" if hit else None
    return None


def _literal(node: ast.AST, kind: type | tuple = (int, float)) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, kind)


def run_modules() -> list[Path]:
    """The package's modules but those OUTSIDE."""
    names = {path: str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py"))}
    return [path for path, name in names.items() if not name.startswith(tuple(OUTSIDE))]


def test_no_run_computes_around_portable() -> None:
    """Every product, sum, exp, log, sin, cos, tanh and power of the numpy backend's code path
    (the oracles, the learner, the markets, the evaluation and the ledgers) goes through
    portable: np.exp, math.log, @, ** 1.5 or x.sum() there would round differently on another
    CPU or NumPy."""
    found = [hit for path in run_modules() for hit in unportable_calls(path)]
    assert not found, f"use alpha_rl.portable instead of: {found}"


def test_the_scan_sees_each_kind_of_call(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import math\nimport numpy as np\nfrom numpy import exp, sqrt\n\ndef f(a, b, t):\n"
        "    x = np.exp(a) + a @ b + a ** t + a.sum(axis=0) + np.add.reduce(b) + a.dot(b)\n"
        "    return x + math.tanh(t) + 2 ** 63 + 2.0 ** -24 + np.linalg.norm(a) + np.mean(a)\n"
        "\ndef g(t):\n    y = t ** 2\n    return y + 3.0 ** 2\n"
    )
    hits = sorted(h.split(" ", 1)[1] for h in unportable_calls(module, tmp_path))
    assert hits == ["**", "**", "**", ".dot()", ".mean()", ".reduce()", ".sum()", "@",
                    "from numpy import exp", "math.tanh", "np.exp", "np.linalg"]  # fmt: skip


@pytest.mark.parametrize(
    ("module", "package"), [("portable.py", {"alpha_rl.fdlibm"}), ("fdlibm.py", set())]
)
def test_portable_imports_nothing_of_the_package(module: str, package: set[str]) -> None:
    """The portable arithmetic stands on NumPy and the standard library alone (portable.py
    offers fdlibm.py's functions beside its own products and sums)."""
    tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
    nodes = list(ast.walk(tree))
    imported = {alias.name for n in nodes if isinstance(n, ast.Import) for alias in n.names}
    imported |= {n.module for n in nodes if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"__future__", "math", "numpy", "threading"} | package
