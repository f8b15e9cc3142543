"""The aggregates and the decision rule's statistics on hand-computed cases: IQM, the probability
of improvement, the stratified t, Holm, Fisher, Yuen and the power calculation."""

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
    t_estimate,
)
from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.stats import fisher_greater, t_mean, yuen_interval


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
    pairs = {"a": [(5.0, 1.0), (6.0, 2.0)], "b": [(0.0, 3.0), (1.0, 4.0)]}  # (treatment, baseline)
    est, lo, hi = improvement(pairs, crit)
    assert (est, lo, hi) == (0.5, 0.5, 0.5)  # every resample keeps each fold's order
    arm = arm_stats({"a": [1.0, 2.0, 3.0], "b": [10.0, 20.0, 30.0]}, crit)
    assert arm.n == 6 and arm.mean[0] == pytest.approx(11.0)
    # each fold's own variance (1 and 100): SE^2 = (3/6)^2 (1 + 100) / 3, Welch-Satterthwaite
    # df = SE^4 / ((1/12)^2 / 2 + (100/12)^2 / 2)
    se2 = (1 + 100) / 12
    half = stats.t.ppf(0.975, se2**2 / ((1 / 12) ** 2 / 2 + (100 / 12) ** 2 / 2)) * np.sqrt(se2)
    assert arm.mean[1:] == pytest.approx((11.0 - half, 11.0 + half))


def test_bootstrap_without_enough_values_gives_no_interval() -> None:
    crit = Criteria.load()
    est, lo, hi = bootstrap([np.array([4.0])], lambda x: np.mean(x, axis=(-2, -1)), crit)
    assert est == 4.0 and np.isnan(lo) and np.isnan(hi)


def test_the_stratified_t_uses_the_spread_within_folds_only() -> None:
    crit = Criteria.load()
    # each fold constant: no spread within folds, so the pooled mean is exact
    assert t_estimate({"0": [1.0, 1.0], "1": [3.0, 3.0]}, crit) == (2.0, 2.0, 2.0)
    est, lo, hi = t_estimate({"all": [1.0, 1.0, 3.0, 3.0]}, crit)
    res = stats.ttest_1samp([1.0, 1.0, 3.0, 3.0], 0).confidence_interval(0.95)
    assert est == 2.0 and (lo, hi) == pytest.approx((res.low, res.high))
    # a fold with one pair adds a value but no degree of freedom
    m = t_mean({"0": [1.0, 2.0], "1": [9.0]})
    assert m.mean == pytest.approx(4.0) and m.df == pytest.approx(1)
    assert m.sd == pytest.approx(np.sqrt(0.5))
    assert t_mean({"0": [1.0], "1": [3.0]}).df == 1  # one per fold: the spread across folds
    assert np.isnan(t_mean({"0": [1.0]}).se) and np.isnan(t_mean({}).mean)


def test_each_fold_weighs_by_its_own_variance_and_one_value_takes_the_largest() -> None:
    # variances 0.5 and 8; the fold of one value (9) takes 8, the largest; N = 5
    m = t_mean({"0": [1.0, 2.0], "1": [0.0, 4.0], "2": [9.0]})
    # SE^2 = sum_k (n_k / N)^2 s_k^2 / n_k = (2 x 0.5 + 2 x 8 + 1 x 8) / 25
    assert m.mean == pytest.approx(3.2) and m.se == pytest.approx(1.0)
    # fold 1's variance is one estimate in two terms: 0.04 on 1 df and 0.64 + 0.32 on 1 df
    assert m.df == pytest.approx(1 / (0.04**2 + 0.96**2)) and m.sd == pytest.approx(np.sqrt(5))
    assert m.strata == 3 and m.n == 5
    # at its own n the pairs that would decide say what its p says
    bound = m.mean - 2.5
    p = m.p_above(bound)
    assert m.seeds_to_decide(bound, 1.01 * p) == 5 and m.seeds_to_decide(bound, 0.99 * p) > 5


@pytest.mark.parametrize(
    ("sizes", "sds"), [((2, 3, 5, 10), (3.0, 2.0, 1.0, 1.0)), ((1, 3, 5, 10), (2.0, 2.0, 1.0, 1.0))]
)
def test_the_stratified_t_holds_its_level_when_small_folds_are_noisier(sizes, sds) -> None:
    """Folds of unequal size whose small ones are noisier, 4000 simulated studies: the 95%
    interval covers the true mean and each one-sided test at 0.025 rejects the true mean at
    their nominal rates, up to 3 Monte Carlo standard errors. One variance pooled over the folds
    covered 0.91 and rejected 0.042 a side (2, 3, 5, 10)."""
    rng = np.random.default_rng(11)
    studies, covered, above, below = 4000, 0, 0, 0
    for _ in range(studies):
        folds = enumerate(zip(sizes, sds, strict=True))
        m = t_mean({str(k): list(rng.normal(0.0, sd, n)) for k, (n, sd) in folds})
        lo, hi = m.interval(0.95)
        covered += lo <= 0.0 <= hi
        above += m.p_above(0.0) <= 0.025
        below += m.p_below(0.0) <= 0.025

    def margin(p: float) -> float:
        return 3 * np.sqrt(p * (1 - p) / studies)

    assert abs(covered / studies - 0.95) <= margin(0.95)
    assert abs(above / studies - 0.025) <= margin(0.025)
    assert abs(below / studies - 0.025) <= margin(0.025)


@pytest.mark.parametrize(("folds", "delta"), [((6,), 0.0), ((4, 4, 4), 0.0), ((20,), 1.0)])
def test_the_probability_of_improvement_resamples_pairs(folds, delta) -> None:
    """A pair's two runs share their seed's effect (sd 2; each run adds its own, sd 1; the
    treatment adds delta), in folds with their own effects; 800 simulated studies: the 95%
    interval covers P(X > Y) at its nominal rate, up to 3 Monte Carlo standard errors.
    Resampling the arms apart (the seed effect taken for noise) covered 0.99 to 1."""
    crit = Criteria.load(overrides=["resamples=999"])
    rng = np.random.default_rng(5)
    seed_sd, run_sd, n = 2.0, 1.0, folds[0]
    # the estimand: of the n x n comparisons, n are a pair's own runs (one seed), the rest runs
    # of two seeds
    own = stats.norm.cdf(delta / (np.sqrt(2) * run_sd))
    other = stats.norm.cdf(delta / (np.sqrt(2) * np.hypot(seed_sd, run_sd)))
    truth = own / n + (1 - 1 / n) * other
    studies, covered = 800, 0
    for _ in range(studies):
        pairs = {}
        for k, size in enumerate(folds):
            seed = rng.normal(0.0, 3.0) + rng.normal(0.0, seed_sd, size)
            treated = delta + seed + rng.normal(0.0, run_sd, size)
            base = seed + rng.normal(0.0, run_sd, size)
            pairs[str(k)] = list(zip(treated, base, strict=True))
        _, lo, hi = improvement(pairs, crit)
        covered += lo <= truth <= hi
    assert abs(covered / studies - 0.95) <= 3 * np.sqrt(0.95 * 0.05 / studies)


def test_one_sided_p_values_agree_with_scipys_t_test() -> None:
    x = [0.12, 0.05, 0.2, 0.09, 0.15]
    m = t_mean({"all": x})
    want = stats.ttest_1samp(x, np.log(1.1), alternative="greater").pvalue
    assert m.p_above(np.log(1.1)) == pytest.approx(want)
    assert m.p_below(0.3) == pytest.approx(stats.ttest_1samp(x, 0.3, alternative="less").pvalue)
    # the power calculation: the smallest n whose t statistic at this mean and sd clears t(1-a)
    n = m.seeds_to_decide(0.0, 0.025)
    assert m.mean * np.sqrt(n) / m.sd >= stats.t.ppf(0.975, n - 1)
    assert m.mean * np.sqrt(n - 1) / m.sd < stats.t.ppf(0.975, n - 2)


def test_fisher_counts_failures_as_rates() -> None:
    assert fisher_greater(0, 5, 0, 5) == 1.0
    assert fisher_greater(1, 5, 0, 5) == pytest.approx(0.5)  # one diverged run decides nothing
    assert fisher_greater(5, 5, 0, 5) == pytest.approx(1 / 252)


def test_yuen_interval_of_the_interquartile_mean() -> None:
    x = np.array([1.0, 2.0, 3.0, 4.0, 100.0])  # g = 1 cut each end; winsorized 2, 2, 3, 4, 4
    est, lo, hi = yuen_interval(x, 0.95)
    se = np.sqrt(4 * np.var([2.0, 2, 3, 4, 4], ddof=1) / (3 * 2))  # (n - 1) s_w^2 / (h (h - 1))
    assert est == pytest.approx(3.0)
    half = stats.t.ppf(0.975, 2) * se
    assert (lo, hi) == pytest.approx((3 - half, 3 + half))


@pytest.mark.parametrize(
    ("reaches", "want"),
    [  # runs seen at adjacent evaluations do not share the end point
        ([("exact", 1000, 2000)] * 3 + [("exact", 2000, 3000)] * 2, ("value", 2000)),
        ([("first", 0, 1000)] * 3 + [("exact", 1000, 2000), ("exact", 2000, 3000)],
         ("at most", 1000)),
        ([("exact", 1000, 2000), ("exact", 2000, 3000), ("exact", 2000, 3000),
          ("exact", 3000, 4000), ("never", 4000, np.inf)], ("value", 3000)),
        ([("exact", 1000, 2000)] * 2 + [("never", 4000, np.inf)] * 3, ("more than", 4000)),
    ],
)  # fmt: skip
def test_turnbull_medians_on_the_evaluation_grid(reaches, want) -> None:
    from alpha_rl.killcheck.speed import EXACT, FIRST, NEVER, Reach, turnbull_median

    kinds = {"exact": EXACT, "first": FIRST, "never": NEVER}
    median = turnbull_median([Reach(kinds[k], lo, hi) for k, lo, hi in reaches])
    assert (median.kind, median.steps) == want


def test_one_pair_per_fold_falls_back_to_the_spread_across_folds() -> None:
    m = t_mean({str(k): [v] for k, v in enumerate([1.0, 2.0, 4.0])})
    assert m.df == 2 and m.strata == 1 and m.sd == pytest.approx(np.std([1.0, 2, 4], ddof=1))


def test_equal_criteria_sets_in_another_order_are_the_defaults() -> None:
    assert Criteria.load(overrides=["deciding.other=[benefit,broken]"]).non_default() == {}
    changed = Criteria.load(overrides=["deciding.other=[benefit]"]).non_default()
    assert list(changed) == ["deciding"]
