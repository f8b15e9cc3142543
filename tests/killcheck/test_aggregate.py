"""The aggregates on hand-computed cases: IQM, the probability of improvement, the stratified
bootstrap."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from alpha_rl.killcheck.aggregate import (
    arm_stats,
    bootstrap,
    improvement,
    iqm,
    prob_improvement,
    stratified_mean,
)
from alpha_rl.killcheck.config import Criteria


def test_iqm_is_the_mean_of_the_middle_half() -> None:
    assert iqm(np.array([1.0, 2.0, 3.0, 4.0, 100.0])) == pytest.approx(3.0)  # 2, 3, 4
    assert iqm(np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])) == pytest.approx(4.5)  # 3..6


def test_probability_of_improvement_counts_ties_as_half() -> None:
    x, y = np.array([3.0, 2.0, 1.0]), np.array([1.0, 0.0])
    assert prob_improvement(x, y) == pytest.approx(5.5 / 6)  # 3>1, 3>0, 2>1, 2>0, 1=1, 1>0
    u = stats.mannwhitneyu(x, y).statistic
    assert prob_improvement(x, y) == pytest.approx(u / 6)
    assert prob_improvement(y, x) == pytest.approx(0.5 / 6)


def test_strata_are_resampled_separately_and_averaged() -> None:
    crit = Criteria.load(overrides=["resamples=2000"])
    # fold a: the treatment always better; fold b: always worse -> P = (1 + 0) / 2
    est, lo, hi = improvement({"a": [5.0, 6.0], "b": [0.0, 1.0]},
                              {"a": [1.0, 2.0], "b": [3.0, 4.0]}, crit)  # fmt: skip
    assert (est, lo, hi) == (0.5, 0.5, 0.5)  # every resample keeps each fold's order
    arm = arm_stats({"a": [1.0, 2.0, 3.0], "b": [10.0, 20.0, 30.0]}, crit)
    assert arm.n == 6 and arm.mean[0] == pytest.approx(11.0)
    assert arm.mean[1] < 11.0 < arm.mean[2]


def test_bootstrap_without_enough_values_gives_no_interval() -> None:
    crit = Criteria.load()
    est, lo, hi = bootstrap([np.array([4.0])], lambda x, axis=-1: np.mean(x, axis=axis), crit)
    assert est == 4.0 and np.isnan(lo) and np.isnan(hi)


def test_a_stratified_mean_resamples_within_folds_only() -> None:
    crit = Criteria.load(overrides=["resamples=2000"])
    # each fold constant: every stratified resample has mean 2; pooled, the same values vary
    assert stratified_mean({"0": [1.0, 1.0], "1": [3.0, 3.0]}, crit) == (2.0, 2.0, 2.0)
    est, lo, hi = stratified_mean({"all": [1.0, 1.0, 3.0, 3.0]}, crit)
    assert est == 2.0 and lo < 2.0 < hi
    # a fold with one pair keeps it in every resample: mean (1 + 2 + 9) / 3; fold 0 resampled
    # gives 1 + 1, 1 + 2 or 2 + 2 (a quarter of the time each end): bounds (2 + 9) / 3, (4 + 9) / 3
    est, lo, hi = stratified_mean({"0": [1.0, 2.0], "1": [9.0]}, crit)
    assert est == pytest.approx(4.0) and (lo, hi) == pytest.approx((11 / 3, 13 / 3))
    assert np.isnan(stratified_mean({}, crit)[0])
