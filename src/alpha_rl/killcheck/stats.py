"""The decision rule's statistics: t-intervals on per-pair values stratified by fold, one-sided
p-values against a tolerance, Holm's correction across a check, Fisher's exact test on failure
counts, Yuen's interval for the interquartile mean, and how many seeds would decide.

Every deciding criterion is a one-sided test of "the treatment is harmed beyond its tolerance"
whose p-value enters one family per check; Holm's step-down holds the probability of any false
KILL in that family at `alpha` (docs/verdicts.md; the calibration suite, `--calibrate`,
measures it). A discrete test that cannot reach alpha on its margins (Fisher's with no broken
run) stays out of the family (Tarone 1990): it could never reject, and counting it would only
lower the others' levels.

Per-pair values of a walk-forward study are grouped by fold (strata). Their mean pools every
pair; its standard error comes from each fold's own variance (SE^2 = sum_k (n_k / N)^2 s_k^2 /
n_k), with Welch-Satterthwaite degrees of freedom, so the interval reflects the seeds' spread
inside each regime, not the gap between regimes, and a small noisy fold weighs as its own spread
says, not as the other folds' average. A fold with one pair has no variance of its own: it takes
the largest variance of the folds that have one (conservative), and adds no degree of freedom.
One stratum: the ordinary one-sample t.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

MAX_SEEDS = 1000  # the power calculation looks this far


@dataclass(frozen=True)
class TMean:
    """The mean of per-pair values with its standard error and degrees of freedom."""

    mean: float
    se: float  # NaN: no interval (fewer than two values, or one per stratum)
    df: float  # n - 1 for one stratum; Welch-Satterthwaite's (at most n - strata) for several
    n: int
    sd: float  # the sd of one value that gives `se` at n values: se sqrt(n)
    strata: int = 1

    def interval(self, confidence: float) -> tuple[float, float]:
        """The two-sided t-interval at `confidence` (NaN bounds without a standard error)."""
        if not math.isfinite(self.se):
            return float("nan"), float("nan")
        half = stats.t.ppf(0.5 + confidence / 2, self.df) * self.se if self.se > 0 else 0.0
        return self.mean - half, self.mean + half

    def p_above(self, bound: float) -> float:
        """One-sided p-value of H0: the true mean <= bound (small: the mean is above it)."""
        return self._p(self.mean - bound)

    def p_below(self, bound: float) -> float:
        """One-sided p-value of H0: the true mean >= bound (small: the mean is below it)."""
        return self._p(bound - self.mean)

    def _p(self, excess: float) -> float:
        if not math.isfinite(self.se):
            return float("nan")
        if self.se == 0:  # every value alike: the data decide without doubt
            return 0.0 if excess > 0 else 1.0
        return float(stats.t.sf(excess / self.se, self.df))

    def seeds_to_decide(self, bound: float, level: float) -> int | None:
        """The number of pairs at which this mean and spread would just be resolved against
        `bound` at one-sided `level` (either side), with the same number of strata: the plug-in
        estimate (were the observed effect and spread the truth, about half of such studies
        would resolve it). At n pairs the degrees of freedom are n - strata scaled by the
        observed df / (n - strata) (folds grown in proportion; 1 for one stratum). None when the
        mean sits on the bound or the spread is unknown; MAX_SEEDS + 1 when more than
        MAX_SEEDS would be needed."""
        gap = abs(self.mean - bound)
        if not (math.isfinite(self.sd) and gap > 0):
            return None
        if self.sd == 0:
            return self.strata + 1
        n = np.arange(self.strata + 1, MAX_SEEDS + 1)
        df = (n - self.strata) * (self.df / (self.n - self.strata))
        enough = gap * np.sqrt(n) / self.sd >= stats.t.ppf(1 - level, df)
        return int(n[enough][0]) if enough.any() else MAX_SEEDS + 1


def t_mean(values: dict[str, list[float]]) -> TMean:
    """The pooled mean of per-pair values (by stratum) and its stratified standard error. With
    one value per stratum (no spread within any fold: one seed per fold) the spread across every
    value is used instead, fold effects and all, which can only widen the interval."""
    strata = [np.asarray(v, np.float64) for _, v in sorted(values.items()) if len(v)]
    if not strata:
        return TMean(float("nan"), float("nan"), 0, 0, float("nan"))
    x = np.concatenate(strata)
    n, k = x.size, len(strata)
    if n - k < 1 and n >= 2:
        strata, k = [x], 1
    if n - k < 1:
        return TMean(float(x.mean()), float("nan"), 0, n, float("nan"))
    if k > 1:
        return _stratified(strata, float(x.mean()))
    sd = math.sqrt(float(((x - x.mean()) ** 2).sum()) / (n - 1))
    return TMean(float(x.mean()), sd / math.sqrt(n), n - 1, n, sd)


def _stratified(strata: list[np.ndarray], mean: float) -> TMean:
    """The pooled `mean` of several strata (each float64 [n_k], some with two values or more)
    with SE^2 = sum_k (n_k / N)^2 s_k^2 / n_k from each stratum's own variance and
    Welch-Satterthwaite degrees of freedom. A stratum of one value takes the largest variance
    of the others; the terms that share an estimate are one term of the df, with its df."""
    sizes = np.array([s.size for s in strata])
    n = int(sizes.sum())
    var = np.array([s.var(ddof=1) if s.size > 1 else np.nan for s in strata])
    source = np.where(sizes > 1, np.arange(sizes.size), int(np.nanargmax(var)))
    terms = np.bincount(source, sizes, sizes.size) / n**2 * np.nan_to_num(var)  # (n_k/N)^2 / n_k
    se2 = float(terms.sum())
    spread = float((terms**2 / np.maximum(sizes - 1, 1)).sum())
    df = se2**2 / spread if se2 > 0 else n - sizes.size  # no spread: the df are never read
    se = math.sqrt(se2)
    return TMean(mean, se, float(df), n, se * math.sqrt(n), len(strata))


def fisher_greater(broken_t: int, n_t: int, broken_b: int, n_b: int) -> float:
    """One-sided p-value of Fisher's exact test that the treatment's runs break more often than
    the baseline's (1 when neither arm has a broken run)."""
    if broken_t == 0:
        return 1.0
    table = [[broken_t, n_t - broken_t], [broken_b, n_b - broken_b]]
    return float(stats.fisher_exact(table, alternative="greater").pvalue)


def fisher_floor(broken_t: int, n_t: int, broken_b: int, n_b: int) -> float:
    """The smallest p-value Fisher's test could give with these margins (the arms' sizes and
    the total broken): every broken run in the treatment. 1 when no run broke."""
    total = broken_t + broken_b
    most = min(total, n_t)
    return fisher_greater(most, n_t, total - most, n_b)


def fisher_seeds(broken_t: int, n_t: int, broken_b: int, n_b: int, level: float) -> int | None:
    """Runs per arm at which the observed failure shares would give Fisher's p <= level; None
    when the treatment breaks no more often than the baseline; MAX_SEEDS + 1 when MAX_SEEDS
    would not do."""
    share_t, share_b = broken_t / max(n_t, 1), broken_b / max(n_b, 1)
    if share_t <= share_b:
        return None
    for n in range(max(n_t, 2), MAX_SEEDS + 1):
        if fisher_greater(round(share_t * n), n, round(share_b * n), n) <= level:
            return n
    return MAX_SEEDS + 1


def yuen_interval(values: np.ndarray, confidence: float, trim: float = 0.25) -> tuple[float, ...]:
    """(trimmed mean, low, high): Yuen's interval for a trimmed mean (Yuen 1974; Wilcox), its
    standard error sqrt((n - 1) s_w^2 / (h (h - 1))) from the winsorized variance s_w^2, h = n -
    2g values kept, df = h - 1 (g values cut each end).
    NaN bounds when fewer than two values would remain uncut."""
    x = np.sort(np.asarray(values, np.float64))
    n = x.size
    g = math.floor(trim * n)
    est = float(stats.trim_mean(x, trim)) if n else float("nan")
    h = n - 2 * g
    if h < 2:
        return est, float("nan"), float("nan")
    w = np.clip(x, x[g], x[n - g - 1])
    sw = float(np.var(w, ddof=1))
    se = math.sqrt((n - 1) * sw / (h * (h - 1)))
    half = stats.t.ppf(0.5 + confidence / 2, h - 1) * se
    return est, est - half, est + half
