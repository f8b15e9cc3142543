"""Turnbull's nonparametric maximum-likelihood estimate (NPMLE) of interval-censored times: masses
on the innermost intervals (a left end followed by a right end among all the intervals' ends),
fitted by Wang's constrained Newton method (2007) with an EM step after each round until the
log-likelihood is within `GAP` of its maximum (a bound concavity gives; a fit that stops short
says so). killcheck/speed.py reads each arm's median steps to a target from it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy import optimize

GAP = 1e-9  # the Turnbull fit stops when its log-likelihood is within this of the maximum
MAX_ROUNDS = 200  # Newton rounds before a fit is reported as not converged (< 20 for 10-80 runs)
HEAVY = 1e6  # weight of the row that holds the Newton target's masses to a sum of 1
TIE = 1e-9  # a cumulative mass this close to 1/2 is 1/2 (the fit's precision)


@dataclass(frozen=True)
class Turnbull:
    """Turnbull's NPMLE of interval-censored times: mass[j] in the innermost interval (low[j],
    high[j]] (float64 [m] each, in order; high inf: past the last evaluation); `gap` bounds the
    log-likelihood's distance to its maximum."""

    low: np.ndarray
    high: np.ndarray
    mass: np.ndarray
    converged: bool
    gap: float
    rounds: int


def innermost(lows: np.ndarray, highs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Turnbull's innermost intervals (a, b] of the intervals (lows, highs] (float64 [n] each): a
    left end followed, among all ends in order, by a right end (at a tie the right end comes
    first: (x, s] and (s, y] do not meet). float64 [m] each, in order."""
    ends = sorted({(h, 0) for h in highs.tolist()} | {(lo, 1) for lo in lows.tolist()})
    pairs = [(a, b) for (a, left), (b, right) in itertools.pairwise(ends) if left and not right]
    return np.array([a for a, _ in pairs], np.float64), np.array([b for _, b in pairs], np.float64)


def turnbull(lows: np.ndarray, highs: np.ndarray) -> Turnbull:
    """The NPMLE of times in (lows, highs] (float64 [n] each): the masses on the innermost
    intervals that maximise sum_i log (A p)_i, A[i, j] = 1 when interval j lies in run i's, to a
    log-likelihood within GAP of the maximum (by concavity it is within n (max_j d_j - 1),
    d = A^T (1 / A p) / n, which is 1 where the maximum puts mass and at most 1 elsewhere)."""
    low, high = innermost(lows, highs)
    member = ((lows[:, None] <= low) & (high <= highs[:, None])).astype(np.float64)
    n = lows.size
    mass = np.full(low.size, 1.0 / low.size)
    for rounds in range(MAX_ROUNDS + 1):
        like = member @ mass
        grad = member.T @ (1.0 / like) / n
        gap = float(n * (grad.max() - 1.0))
        if gap <= GAP or rounds == MAX_ROUNDS:
            break
        mass = _newton_round(member, mass, like, grad)
    return Turnbull(low, high, mass, gap <= GAP, max(gap, 0.0), rounds)


def _newton_round(member: np.ndarray, mass: np.ndarray, like: np.ndarray,
                  grad: np.ndarray) -> np.ndarray:  # fmt: skip
    """One round of the constrained Newton method: the non-negative least-squares maximiser of the
    log-likelihood's quadratic approximation at `mass` (its sum held to 1 by a heavy row), a
    backtracking line search towards it, then an EM step (self-consistency: the sum stays 1 and
    the likelihood never falls, so the fit converges even where the search gives nothing)."""
    n, m = member.shape
    loglik = float(np.log(like).sum())
    rows = np.vstack([member / like[:, None], np.full(m, HEAVY)])
    try:
        goal = optimize.nnls(rows, np.append(np.full(n, 2.0), HEAVY))[0]
    except RuntimeError:  # the solver's own iteration limit: the EM step alone
        goal = mass
    goal = goal / goal.sum() if goal.sum() > 0 else mass
    slope = n * float(grad @ (goal - mass))
    step, best = 1.0, mass
    while slope > 0 and step > 1e-6:
        trial = mass + step * (goal - mass)
        with np.errstate(divide="ignore"):
            if np.log(member @ trial).sum() >= loglik + step * slope / 3:
                best = trial
                break
        step /= 2
    return best * (member.T @ (1.0 / (member @ best)) / n)


def middle(cum: np.ndarray, place: np.ndarray) -> float:
    """The middle of the median set of masses at `place` [m] (in order; inf past the last
    evaluation) with cumulative sums `cum` [m]."""
    j = int(np.argmax(cum >= 0.5 - TIE))
    if abs(cum[j] - 0.5) <= TIE and j + 1 < cum.size:  # at 1/2 from place[j] to place[j + 1]
        return float(place[j] + place[j + 1]) / 2
    return float(place[j])
