"""Steps to the capture target on hand-computed cases: a run's interval with NaN evaluations,
Turnbull's NPMLE against the empirical distribution and Kaplan-Meier, the median as a value or a
bound with the range the censoring leaves it in, and its distribution-free interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from alpha_rl.killcheck import turnbull as npmle
from alpha_rl.killcheck.speed import EXACT, FIRST, NEVER, Reach, reach, turnbull_median
from alpha_rl.killcheck.turnbull import GAP, turnbull
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
    assert fit.converged and fit.gap <= GAP
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
    assert fit.converged and fit.gap <= GAP
    assert fit.low.tolist() == [500, 1000, 2000, 3000, 4000, 5000, 9000]
    assert fit.mass == pytest.approx([0.2, 0, 0.2, 0.1, 0.1, 0.2, 0.2], abs=1e-9)
    member = (lows[:, None] <= fit.low) & (fit.high <= highs[:, None])
    grad = member.T @ (1 / (member @ fit.mass)) / lows.size
    assert grad == pytest.approx(np.ones(7), abs=1e-9)  # the NPMLE's conditions
    # the cumulative mass is exactly 1/2 after (3000, 4000] until (4000, 5000]: the median is
    # (4000 + 5000) / 2 with the masses at the right ends, (3000 + 4000) / 2 at the left ends
    median = turnbull_median(reaches_of(*((lo, hi, 1) for lo, hi in zip(lows, highs, strict=True))))
    assert (median.kind, median.steps, median.low, median.high) == ("value", 4500, 3500, 4500)


def test_a_fit_that_does_not_converge_says_so(monkeypatch) -> None:
    monkeypatch.setattr(npmle, "MAX_ROUNDS", 0)
    # the right-censored runs below: one Newton round short of the maximum
    median = turnbull_median(reaches_of(*KAPLAN_MEIER), 0.95)
    assert not median.converged and median.gap > GAP
    assert median.evidence()["converged"] is False
    assert "the fit did not converge" in median.text()


@pytest.mark.parametrize(
    ("spans", "kind", "steps", "within"),
    [
        # all in (2000, 3000]: the evaluation that saw them, anywhere in the interval
        (((2000, 3000, 5),), "value", 3000, (2000, 3000)),
        # runs seen at adjacent evaluations do not share the end point: 3/5 by 2000, 3/5 by 3000
        (((1000, 2000, 3), (2000, 3000, 2)), "value", 2000, (1000, 2000)),
        (((1000, 2000, 1), (2000, 3000, 2), (3000, 4000, 1), (4000, INF, 1)), "value", 3000,
         (2000, 3000)),
        # exactly half never: the median is the middle of the two middle times, the upper one
        # past 12000, so more than (2000 + 12000) / 2 whatever the upper one is; not 3000
        (((2000, 3000, 2), (12000, INF, 2)), "more than", 7000, (7000, INF)),
        (((2000, 3000, 5), (12000, INF, 5)), "more than", 7000, (7000, INF)),
        (((2000, 3000, 2), (12000, INF, 3)), "more than", 12000, (12000, INF)),
        (((1000, 2000, 2), (4000, INF, 3)), "more than", 4000, (4000, INF)),
        # more than half by the first evaluation: a bound; exactly half: the middle of 250 and
        # 1000 (of 0 and 500 at the left ends)
        (((0, 250, 3), (2000, 3000, 2)), "at most", 250, (0, 250)),
        (((0, 1000, 3), (1000, 2000, 1), (2000, 3000, 1)), "at most", 1000, (0, 1000)),
        (((0, 250, 2), (500, 1000, 2)), "value", 625, (250, 625)),
        # right-censored (Kaplan-Meier above): S = 5/12 after 2000, crossing 1/2 in (1000, 2000]
        (KAPLAN_MEIER, "value", 2000, (1000, 2000)),
    ],
)  # fmt: skip
def test_the_median_is_a_value_or_a_bound_with_the_range_censoring_leaves(
    spans, kind: str, steps: float, within: tuple[float, float]
) -> None:
    median = turnbull_median(reaches_of(*spans))
    assert (median.kind, median.steps) == (kind, pytest.approx(steps))
    assert (median.low, median.high) == pytest.approx(within)
    assert median.converged and median.ci is None  # no interval asked


def test_a_nan_evaluation_widens_a_run_s_interval_and_its_arm_s_range() -> None:
    # runs in (1000, 2000] and (2000, 3000], and one with NaN at 2000: in (1000, 3000]. The NPMLE
    # puts 1/2 on each cell: the median is the middle of 2000 and 3000 (of 1000 and 2000 at the
    # left ends)
    median = turnbull_median(reaches_of((1000, 2000, 1), (2000, 3000, 1), (1000, 3000, 1)))
    assert (median.kind, median.steps, median.low, median.high) == ("value", 2500, 1500, 2500)


@pytest.mark.parametrize(
    ("n", "confidence", "k"),
    [
        (5, 0.95, 0),  # P(Bin(5, 1/2) = 0) = 1/32 > 0.025: no interval
        (5, 0.9, 1),  # 1/32 <= 0.05: (X_(1), X_(5)]
        (10, 0.95, 2),  # P(Bin(10, 1/2) <= 1) = 11/1024 <= 0.025 < P(<= 2) = 56/1024
        (20, 0.95, 6),  # P(Bin(20, 1/2) <= 5) = 0.0207 <= 0.025 < P(<= 6) = 0.0577
    ],
)
def test_the_median_interval_takes_the_binomial_s_order_statistics_of_the_ends(
    n: int, confidence: float, k: int
) -> None:
    lows = [1000.0 * i for i in range(n)]  # run i in (1000 i, 1000 i + 500]
    reaches = [Reach(EXACT if low else FIRST, low, low + 500) for low in lows]
    low, high = turnbull_median(reaches[::-1], confidence).ci
    assert (low, high) == ((0, INF) if k == 0 else (lows[k - 1], lows[n - k] + 500))
