"""Harmlessness shown on a rate: the treatment's share of broken runs at most `margin` above the
baseline's, by Farrington and Manning's (1990) score test of a difference of two proportions.

H0: p_t - p_b >= margin (the treatment breaks runs too often); small p: the difference is shown
below the margin. The statistic is (p^_t - p^_b - margin) / sqrt(p~_t (1 - p~_t) / n_t + p~_b (1
- p~_b) / n_b), with p~ the maximum-likelihood shares restricted to p_t - p_b = margin (found by a
bounded one-dimensional search of the binomial likelihood, which is concave there), referred to
the normal. Unlike the Wald test it gives a usable p-value when neither arm broke a run: 0 of 20
against 0 of 20 shows the difference below 0.2 at p 0.012.
"""

from __future__ import annotations

import math

from scipy import optimize, stats

from alpha_rl.killcheck.stats import MAX_SEEDS

EDGE = 1e-12  # the restricted shares stay inside (0, 1) for the likelihood


def restricted_shares(bt: int, nt: int, bb: int, nb: int, margin: float) -> tuple[float, float]:
    """The binomial maximum-likelihood shares (p_t, p_b) under p_t - p_b = margin."""
    low, high = max(0.0, -margin) + EDGE, min(1.0, 1.0 - margin) - EDGE

    def nll(pb: float) -> float:
        pt = pb + margin
        return -(bt * math.log(pt) + (nt - bt) * math.log1p(-pt) + bb * math.log(pb)
                 + (nb - bb) * math.log1p(-pb))  # fmt: skip

    found = optimize.minimize_scalar(nll, bounds=(low, high), method="bounded",
                                     options={"xatol": 1e-12})  # fmt: skip
    pb = float(found.x)
    return pb + margin, pb


def p_within(bt: int, nt: int, bb: int, nb: int, margin: float) -> float:
    """One-sided p-value of H0: p_t - p_b >= margin (small: the treatment's broken share is
    shown less than `margin` above the baseline's). 1 without runs in an arm."""
    if nt == 0 or nb == 0:
        return 1.0
    if margin <= 0:  # no margin: harmlessness would be the treatment shown to break less
        margin = 0.0
    pt, pb = restricted_shares(bt, nt, bb, nb, margin)
    var = pt * (1 - pt) / nt + pb * (1 - pb) / nb
    if var <= 0:
        return 1.0
    z = (bt / nt - bb / nb - margin) / math.sqrt(var)
    return float(stats.norm.cdf(z))


def seeds_within(bt: int, nt: int, bb: int, nb: int, margin: float, level: float) -> int | None:
    """Runs per arm at which the observed shares would show the difference below `margin` at
    `level`; None when the observed difference is not below it; MAX_SEEDS + 1 beyond MAX_SEEDS."""
    st, sb = bt / max(nt, 1), bb / max(nb, 1)
    if st - sb >= margin:
        return None
    for n in range(max(nt, 2), MAX_SEEDS + 1):
        if p_within(round(st * n), n, round(sb * n), n, margin) <= level:
            return n
    return MAX_SEEDS + 1
