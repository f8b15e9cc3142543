"""Looks at a study's data as seeds are added: the nominal level of each look that holds a test's
error across every look at its level (a group-sequential design with an alpha-spending function).

A study judges its treatments after each stage of seeds: looks at n_1 < n_2 < ... < n_K pairs
(n_K = the study's largest number of seeds), planned before the first look. A test that rejected
at any look where its one-sided p-value fell below the look's *nominal* level would, at the level
itself at every look, reject a true hypothesis far more often than that level (each look is
another chance). Lan and DeMets (1983) spend the level over the looks instead: by information
fraction t_k = n_k / n_K the test may have rejected a true hypothesis with probability at most
f(t_k), f rising from f(0) = 0 to f(1) = level. The nominal level of look k is the one at which
the probability of a first rejection at look k is f(t_k) - f(t_{k-1}), computed for the
standardised statistics of nested samples, which under the hypothesis's boundary are jointly
normal with corr(Z_j, Z_k) = sqrt(t_j / t_k) (Armitage, McPherson and Rowe 1969's recursion on
a grid). A t-test at look k then rejects when its p-value is at most that nominal level (the
significance-level approach of Jennison and Turnbull 2000, ch. 3, for unknown variance).

The spending function is Hwang, Shih and DeCani's (1990): f(t) = level (1 - exp(-g t)) / (1 -
exp(-g)), g = 0 spending evenly by information; g = -4 close to O'Brien and Fleming's (little
early, most at the end), g = 1 close to Pocock's. One look (K = 1) gives the level itself.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize, stats

GRID = 401  # points of the density grid between -8 and a look's bound (bounds to 1e-4)
FLOOR = -8.0  # the grid's lower end: the normal's mass below it is < 1e-15


def spent(t: float, level: float, gamma: float) -> float:
    """Hwang-Shih-DeCani spending: the share of `level` spent by information fraction t."""
    t = min(max(t, 0.0), 1.0)
    if gamma == 0:
        return level * t
    return level * math.expm1(-gamma * t) / math.expm1(-gamma)


def _crossing(c: float, grid: np.ndarray, density: np.ndarray, t0: float, t: float) -> float:
    """P(the walk continued to t0 with Z_{t0} on `grid` at `density`, then Z_t >= c)."""
    tail = stats.norm.sf((c * math.sqrt(t) - grid * math.sqrt(t0)) / math.sqrt(t - t0))
    return float(np.trapezoid(density * tail, grid))


def _carry(grid: np.ndarray, density: np.ndarray, t0: float, t: float,
           c: float) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The density of Z_t below c where the walk continued: Z_t sqrt(t) = Z_{t0} sqrt(t0) +
    N(0, t - t0)."""
    nxt = np.linspace(FLOOR, min(c, -FLOOR), GRID)
    scale = math.sqrt(t - t0)
    kernel = stats.norm.pdf((nxt[:, None] * math.sqrt(t) - grid[None, :] * math.sqrt(t0)) / scale)
    return nxt, np.trapezoid(kernel * density[None, :], grid, axis=1) * math.sqrt(t) / scale


@lru_cache(maxsize=4096)
def bounds(fractions: tuple[float, ...], level: float, gamma: float) -> tuple[float, ...]:
    """The z bounds c_1..c_K at information fractions t_1 < ... < t_K (t_K <= 1) whose first
    crossings spend `level` as the spending function says (inf where a look spends nothing)."""
    share = spent(fractions[0], level, gamma)
    c = float(stats.norm.isf(share)) if share > 0 else math.inf
    out = [c]
    grid = np.linspace(FLOOR, min(c, -FLOOR), GRID)
    density = stats.norm.pdf(grid)
    for t0, t in itertools.pairwise(fractions):
        share = spent(t, level, gamma) - spent(t0, level, gamma)
        if share > 0:
            c = optimize.brentq(lambda c, g=grid, d=density, a=t0, b=t, s=share:
                                _crossing(c, g, d, a, b) - s, -10.0, 40.0, xtol=1e-10)  # fmt: skip
        else:
            c = math.inf
        out.append(float(c))
        grid, density = _carry(grid, density, t0, t, c)
    return tuple(out)


@dataclass(frozen=True)
class Design:
    """The looks a study plans: pairs at each look (the last its most), and the spending
    function's g. `Design.single(n)`: one look, each level its own nominal level."""

    looks: tuple[int, ...]
    gamma: float = -4.0

    @classmethod
    def single(cls, n: int = 1) -> Design:
        return cls((max(n, 1),))

    @classmethod
    def stages(cls, first: int, step: int, most: int, gamma: float) -> Design:
        """Looks at first, first + step, ... up to most (which is always a look)."""
        looks = [*range(first, most, step), most]
        return cls(tuple(sorted(set(looks))), gamma)

    @property
    def fractions(self) -> tuple[float, ...]:
        return tuple(n / self.looks[-1] for n in self.looks)

    def nominal(self, look: int, level: float, strata: int | None = None) -> float:
        """The one-sided nominal level at look `look` (0-based) of a test at `level` over
        every look: the p-value at or below which it rejects there. `strata`: a t-test on
        pairs in that many folds, whose levels come from simulated studies (`t_nominal`);
        None: a test whose statistic is about normal (the normal theory's bounds)."""
        if len(self.looks) == 1 or level <= 0:
            return level
        if strata is not None:
            return t_nominal(self.looks, max(int(strata), 1), round(level, 15), self.gamma)[look]
        c = bounds(self.fractions, round(level, 15), self.gamma)[look]
        return float(stats.norm.sf(c)) if math.isfinite(c) else 0.0


PATHS = 400_000  # simulated studies behind a t-test's nominal levels
CHUNK = 25_000


@lru_cache(maxsize=64)
def _t_pvalues(looks: tuple[int, ...], strata: int) -> np.ndarray:
    """(PATHS, looks) one-sided p-values of the stratified t-test at each look of simulated
    studies of normal pair values at the bound (`strata` folds of n pairs each, the variance
    pooled within folds), from a fixed seed."""
    rng = np.random.default_rng(20261205)
    out = np.empty((PATHS, len(looks)), np.float64)
    for start in range(0, PATHS, CHUNK):
        x = rng.standard_normal((CHUNK, strata, looks[-1]))
        total, squares = np.cumsum(x, axis=2), np.cumsum(x * x, axis=2)
        for k, n in enumerate(looks):
            s1, s2 = total[:, :, n - 1], squares[:, :, n - 1]
            within = (s2 - s1 * s1 / n).sum(axis=1)
            df = strata * (n - 1)
            t = s1.sum(axis=1) / (strata * n) / np.sqrt(within / df / (strata * n))
            out[start : start + CHUNK, k] = stats.t.sf(t, df)
    return out


@lru_cache(maxsize=4096)
def t_nominal(looks: tuple[int, ...], strata: int, level: float,
              gamma: float) -> tuple[float, ...]:  # fmt: skip
    """A t-test's nominal level at each look, such that in simulated studies at the bound its
    first rejections spend `level` as the spending function says. The normal theory's bounds
    assume the looks' statistics as correlated as z-statistics of nested samples; t-statistics
    of few pairs, each with its own variance estimate, are less so, and tested at the normal
    theory's levels a family of small levels (Holm's alpha / m) rejected more often than spent
    (the calibration measured 0.034 for 6 tests at alpha 0.025). Exact for normal values up to
    the simulation's error (400,000 studies)."""
    p = _t_pvalues(looks, strata)
    alive = np.ones(len(p), bool)
    fractions = [n / looks[-1] for n in looks]
    out, previous = [], 0.0
    for k, t in enumerate(fractions):
        count = round((spent(t, level, gamma) - spent(previous, level, gamma)) * PATHS)
        candidates = np.sort(p[alive, k])
        nu = float(candidates[count - 1]) if count >= 1 else 0.0
        alive &= p[:, k] > nu
        out.append(nu)
        previous = t
    return tuple(out)
