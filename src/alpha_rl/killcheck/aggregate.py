"""Aggregates across runs as the field reports them (Agarwal et al. 2021, "Deep RL at the edge of
the statistical precipice"): the mean and the interquartile mean (IQM: the mean of the middle 50%
of runs, scipy.stats.trim_mean with 0.25 cut from each end), and the probability of improvement
P(X > Y) = P(a treatment run scores above a baseline run, ties counting a half), the Mann-Whitney U
statistic over n m, averaged over strata.

Their intervals are the methods whose coverage the calibration suite measured closest to nominal
at 5 runs (docs/verdicts.md): the mean's a t-interval stratified by fold (stats.t_mean), the
IQM's Yuen's trimmed-mean interval, the probability of improvement's a stratified percentile
bootstrap over pairs (scipy.stats.bootstrap; a pair's treatment and baseline values resampled
together, as they share the seed's effect, the strata independently). The estimate is the same
n m comparison of every treatment run with every baseline run; only the resampling knows the
pairs (resampling the arms apart treats the seed effect as noise between runs: intervals far too
wide).

Strata are the folds of a walk-forward study (a run's `market.fold` param); a single split is
one stratum.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.stats import t_mean, yuen_interval
from alpha_rl.tracking import RunRecord

STRATUM_PARAM = "market.fold"  # walk-forward folds; runs without it form one stratum
Estimate = tuple[float, float, float]  # (estimate, low, high); NaN bounds: no interval


def stratum(run: RunRecord) -> str:
    """The stratum a run's values belong to (its fold, or "all")."""
    return run.params.get(STRATUM_PARAM, "all")


def iqm(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean: the mean after cutting 25% of the values from each end."""
    return stats.trim_mean(np.asarray(values, np.float64), 0.25, axis=axis)


def bootstrap(strata: Sequence[np.ndarray], statistic: Callable[..., np.ndarray],
              crit: Criteria) -> Estimate:  # fmt: skip
    """`statistic(*strata)` with a percentile bootstrap interval. A stratum is float64 [n_k] (a
    value per run) or [n_k, c] (c values per unit: a pair's treatment and baseline values); its
    units are resampled with replacement, a unit's values together, each stratum on its own (a
    stratified bootstrap), and `statistic` reduces arrays [..., n_k, c] over their last two
    axes. No interval (NaN) when a stratum has fewer than two units; a point interval when
    every value is the same."""
    strata = [np.asarray(s, np.float64) for s in strata]
    strata = [s if s.ndim == 2 else s[:, None] for s in strata]
    est = float(statistic(*strata))
    if any(len(s) < 2 for s in strata):
        return est, float("nan"), float("nan")
    if all(np.all(s == strata[0][0, 0]) for s in strata):
        return est, est, est

    def resampled(*units: np.ndarray, axis: int = -1) -> np.ndarray:
        return statistic(*(s[u] for s, u in zip(strata, units, strict=True)))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        res = stats.bootstrap([np.arange(len(s)) for s in strata], resampled, vectorized=True,
                              paired=False, confidence_level=crit.confidence,
                              n_resamples=crit.resamples, method="percentile",
                              random_state=np.random.default_rng(crit.bootstrap_seed))  # fmt: skip
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return est, (lo if np.isfinite(lo) else est), (hi if np.isfinite(hi) else est)


def by_stratum(values: dict[str, list[float]]) -> list[np.ndarray]:
    """The per-stratum samples in stratum order."""
    return [np.asarray(values[k], np.float64) for k in sorted(values)]


def pooled(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """A statistic of all strata's values together (along the last axis)."""
    return lambda *strata, axis=-1: fn(np.concatenate(strata, axis=axis), axis=axis)


def prob_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) + P(X = Y) / 2 over every pair of a value of x and a value of y (along the last
    axis: the Mann-Whitney U of x over n m)."""
    gt = (x[..., :, None] > y[..., None, :]).mean(axis=(-2, -1))
    eq = (x[..., :, None] == y[..., None, :]).mean(axis=(-2, -1))
    return gt + 0.5 * eq


@dataclass(frozen=True)
class ArmStats:
    """One arm's values (one per run) summarised: mean and IQM with intervals."""

    n: int
    mean: Estimate
    iqm: Estimate


def arm_stats(values: dict[str, list[float]], crit: Criteria) -> ArmStats:
    """Mean (stratified t) and IQM (Yuen, over every run) of an arm's per-run values."""
    everything = np.concatenate(by_stratum(values)) if values else np.zeros(0)
    return ArmStats(everything.size, t_estimate(values, crit),
                    yuen_interval(everything, crit.confidence))  # fmt: skip


def t_estimate(values: dict[str, list[float]], crit: Criteria, log: bool = False) -> Estimate:
    """(mean, low, high) of per-pair or per-run values by stratum with the stratified
    t-interval; with log=True the values are logs (of ratios) and the result is their geometric
    mean with its interval."""
    m = t_mean(values)
    lo, hi = m.interval(crit.confidence)
    if log:
        return float(np.exp(m.mean)), float(np.exp(lo)), float(np.exp(hi))
    return m.mean, lo, hi


def improvement(pairs: dict[str, list[tuple[float, float]]], crit: Criteria) -> Estimate:
    """P(treatment > baseline) from the pairs' (treatment, baseline) values by stratum: within a
    stratum over every treatment value against every baseline value (the n m comparisons), then
    averaged over strata; its interval resamples pairs, a pair's two values together (they share
    the seed's effect), within each stratum. NaN without a pair."""
    strata = [np.asarray(pairs[k], np.float64).reshape(-1, 2) for k in sorted(pairs) if pairs[k]]
    if not strata:
        return float("nan"), float("nan"), float("nan")

    def statistic(*xs: np.ndarray) -> np.ndarray:
        return np.mean([prob_improvement(x[..., 0], x[..., 1]) for x in xs], axis=0)

    return bootstrap(strata, statistic, crit)
