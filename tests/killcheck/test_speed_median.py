"""Steps to the capture target on hand-computed cases: a run's interval with NaN evaluations."""

from __future__ import annotations

import math

import pytest

from alpha_rl.killcheck.speed import EXACT, FIRST, NEVER, Reach, reach
from alpha_rl.tracking import RunRecord

INF = math.inf


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
