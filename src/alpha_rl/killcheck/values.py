"""The values the kill check's rows test: each run's mean over the end of its training, each
pair's values and differences by stratum (fold), and the shape of those values (skewness,
excess kurtosis) that a row reports beside its test."""

from __future__ import annotations

import math

import numpy as np

from alpha_rl.killcheck.aggregate import stratum
from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.pairs import Pair
from alpha_rl.killcheck.speed import window_mean
from alpha_rl.tracking import RunRecord

SKEWED = 0.5  # a skewness of the pairs' values beyond which the row says its t-test may err
HEAVY = 2.0  # an excess kurtosis beyond which a margin in sds says it may err (normal: 0)
HEAVY_PAIRS = 10  # the fewest values whose kurtosis is read (at 10 normal pairs 8.5% pass 2.0)


def _centred(values: dict[str, list[float]]) -> np.ndarray:
    """The pairs' values about their folds' means."""
    return np.concatenate([np.asarray(v, np.float64) - np.mean(v) for v in values.values() if v])


def skewness(values: dict[str, list[float]]) -> float:
    """The sample skewness (adjusted Fisher-Pearson) of the pairs' values about their folds'
    means; NaN with fewer than 8 values (fewer say nothing about it) or no spread."""
    x = _centred(values)
    n = x.size
    if n < 8:
        return math.nan
    m2, m3 = float(np.mean(x**2)), float(np.mean(x**3))
    if m2 <= 0:
        return math.nan
    return m3 / m2**1.5 * math.sqrt(n * (n - 1)) / (n - 2)


def excess_kurtosis(values: dict[str, list[float]]) -> float:
    """The sample excess kurtosis (the adjusted G2: 0 for normal values on average) of the
    pairs' values about their folds' means; NaN with fewer than `HEAVY_PAIRS` values or no
    spread."""
    x = _centred(values)
    n = x.size
    if n < HEAVY_PAIRS:
        return math.nan
    m2, m4 = float(np.mean(x**2)), float(np.mean(x**4))
    if m2 <= 0:
        return math.nan
    return (n - 1) / ((n - 2) * (n - 3)) * ((n + 1) * (m4 / m2**2 - 3) + 6)


def pair_window(treated: RunRecord, base: RunRecord, crit: Criteria) -> tuple[float, int]:
    end = min(treated.last_step, base.last_step)
    return (1 - crit.window) * end, end


def end_value(run: RunRecord, key: str, crit: Criteria) -> float:
    """The run's mean of `key` over the last `window` of its own training (NaN: none there)."""
    return window_mean(run, key, (1 - crit.window) * run.last_step)


def end_values(runs: list[RunRecord], key: str, crit: Criteria) -> dict[str, list[float]]:
    """Each run's `end_value`, by stratum."""
    out: dict[str, list[float]] = {}
    for run in runs:
        value = end_value(run, key, crit)
        if np.isfinite(value):
            out.setdefault(stratum(run), []).append(value)
    return out


def paired_end_values(pairs: list[Pair], key: str,
                      crit: Criteria) -> dict[str, list[tuple[float, float]]]:  # fmt: skip
    """Per stratum, each pair's (treatment, baseline) `end_value`s; a pair without both is left
    out."""
    out: dict[str, list[tuple[float, float]]] = {}
    for t, b in pairs:
        both = (end_value(t, key, crit), end_value(b, key, crit))
        if np.isfinite(both).all():
            out.setdefault(stratum(t), []).append(both)
    return out


def paired_differences(pairs: list[Pair], key: str, crit: Criteria) -> dict[str, list[float]]:
    """Per stratum, each pair's treatment - baseline mean of `key` over the pair's window."""
    out: dict[str, list[float]] = {}
    for t, b in pairs:
        start, end = pair_window(t, b, crit)
        d = window_mean(t, key, start, end) - window_mean(b, key, start, end)
        if np.isfinite(d):
            out.setdefault(stratum(t), []).append(d)
    return out
