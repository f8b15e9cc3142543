"""Steps to the capture target on hand-computed cases: a run's interval with NaN evaluations,
Turnbull's NPMLE against the empirical distribution and Kaplan-Meier, and its convergence."""

from __future__ import annotations

import math

import numpy as np
import pytest

from alpha_rl.killcheck import speed
from alpha_rl.killcheck.speed import EXACT, FIRST, NEVER, Reach, reach, turnbull, turnbull_median
from alpha_rl.tracking import RunRecord

INF = math.inf
# (low, high, runs): events in (0, 1000] x1, (1000, 2000] x2, (2000, 3000] x1; censored past 1000
# x1 and past 3000 x1
KAPLAN_MEIER = ((0, 1000, 1), (1000, 2000, 2), (2000, 3000, 1), (1000, INF, 1), (3000, INF, 1))


def run_of(values: list[float], steps: tuple[int, ...] = (1000, 2000, 3000)) -> RunRecord:
    """A run whose capture ratio is `values` at `steps`."""
    points = list(zip(steps, values, strict=True))
    return RunRecord("r", "r", "FINISHED", {}, {}, {"eval/capture_ratio": points})


@pytest.mark.parametrize(
    ("values", "want"),
    [
        ([0.1, math.nan, 0.5], Reach(EXACT, 1000.0, 3000.0)),  # not (2000, 3000]: NaN is missing
        ([math.nan, 0.1, 0.5], Reach(EXACT, 2000.0, 3000.0)),
        ([math.nan, 0.5, 0.5], Reach(FIRST, 0.0, 2000.0)),  # the first evaluation with a value
        ([0.1, 0.2, math.nan], Reach(NEVER, 2000.0, INF)),  # not past 3000: it was not seen there
        ([math.nan, math.nan, math.nan], None),
    ],
)
def test_a_nan_capture_tells_nothing_about_when_the_target_was_reached(values, want) -> None:
    assert reach(run_of(values), "eval/capture_ratio", 0.4, 3000) == want


def intervals(*spans: tuple[float, float, int]) -> tuple[np.ndarray, np.ndarray]:
    """(lows, highs) of `count` runs in (low, high] per span."""
    lows = [low for low, _, count in spans for _ in range(count)]
    highs = [high for _, high, count in spans for _ in range(count)]
    return np.array(lows, np.float64), np.array(highs, np.float64)


def reaches_of(*spans: tuple[float, float, int]) -> list[Reach]:
    """`count` runs in (low, high] per span."""
    return [Reach(FIRST if low == 0 else NEVER if high == INF else EXACT, low, high)
            for low, high, count in spans for _ in range(count)]  # fmt: skip


def test_turnbull_of_times_seen_on_one_grid_is_the_empirical_distribution() -> None:
    fit = turnbull(*intervals((0, 250, 1), (1000, 2000, 3), (2000, 3000, 2), (12000, INF, 4)))
    assert fit.converged and fit.gap <= speed.GAP
    assert fit.low.tolist() == [0, 1000, 2000, 12000]
    assert fit.high.tolist() == [250, 2000, 3000, INF]
    assert fit.mass == pytest.approx([0.1, 0.3, 0.2, 0.4], abs=1e-12)


def test_turnbull_of_right_censored_times_is_kaplan_meier() -> None:
    # Kaplan-Meier: S = 5/6 after 1000 (6 at risk), x 2/4 after 2000 (4 at risk: one event, one
    # censored at 1000), x 1/2 after 3000 (2 at risk): masses 1/6, 5/12, 5/24 and 5/24 past 3000
    fit = turnbull(*intervals(*KAPLAN_MEIER))
    assert fit.converged
    assert fit.low.tolist() == [0, 1000, 2000, 3000]
    assert fit.mass == pytest.approx([1 / 6, 5 / 12, 5 / 24, 5 / 24], abs=1e-9)


def test_turnbull_converges_where_self_consistency_stalls() -> None:
    # runs in (2000, 3000], (3000, 4000], (500, 2000], (5000, 6000], (4000, 5000], (9000, 10000],
    # (9000, inf), (5000, 8000], (1000, 3000], (250, 1000]: the log-likelihood is log p1 +
    # log(p1 + p2) + log p3 + log(p2 + p3) + ..., largest at p1 = p3 = 0.2, p2 = 0 on (500, 1000],
    # (1000, 2000], (2000, 3000], where the gradient on (1000, 2000] is 1 (EM's slowest case:
    # 100,000 self-consistency steps leave 4e-6 there, and the cumulative mass past 1/2 in
    # (3000, 4000] instead of at 1/2 by its end)
    lows = np.array([2000, 3000, 500, 5000, 4000, 9000, 9000, 5000, 1000, 250], np.float64)
    highs = np.array([3000, 4000, 2000, 6000, 5000, 10000, INF, 8000, 3000, 1000], np.float64)
    fit = turnbull(lows, highs)
    assert fit.converged and fit.gap <= speed.GAP
    assert fit.low.tolist() == [500, 1000, 2000, 3000, 4000, 5000, 9000]
    assert fit.mass == pytest.approx([0.2, 0, 0.2, 0.1, 0.1, 0.2, 0.2], abs=1e-9)
    member = (lows[:, None] <= fit.low) & (fit.high <= highs[:, None])
    grad = member.T @ (1 / (member @ fit.mass)) / lows.size
    assert grad == pytest.approx(np.ones(7), abs=1e-9)  # the NPMLE's conditions


def test_a_fit_that_does_not_converge_says_so(monkeypatch) -> None:
    monkeypatch.setattr(speed, "MAX_ROUNDS", 0)
    # the right-censored runs below: one Newton round short of the maximum
    median = turnbull_median(reaches_of(*KAPLAN_MEIER))
    assert not median.converged and median.gap > speed.GAP
    assert "the fit did not converge" in median.text()
