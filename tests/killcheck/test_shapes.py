"""The rule's stated limits said where a study shows them: the held-out row names pairs skewed
away from harm, and heavy tails under a margin in sds, and stays silent on well-shaped pairs."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from alpha_rl.killcheck.axes import axis_for
from alpha_rl.killcheck.calibrate import EVALS, HER, _run
from alpha_rl.killcheck.compare import BENEFIT
from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.judge import judge
from alpha_rl.vocabulary import PNL

SKEW_NOTE = "skewed away from harm"
HEAVY_NOTE = "heavy-tailed (excess kurtosis"


def benefit_row(differences: list[float], *overrides: str):
    """The held-out harm row of her=on against her=off, one pair a seed, the pair's PnL
    difference given (probe losses alike)."""
    runs, probe = [], np.full(EVALS.size, 0.4)
    for seed, d in enumerate(differences):
        base = {"seed": str(seed), "agent.lr": "0.0003"}
        tags = {"probe_digest": f"p{seed}", "audit": "every 2000 steps"}
        level = 50_000.0 + 1_000.0 * seed
        for value, shift in (("off", 0.0), ("on", d)):
            pnl = np.full(EVALS.size, level + shift)
            runs.append(_run(f"s{seed}{value}", base | HER[value], tags, probe, pnl, False))
    treatments, _, _ = judge(runs, axis_for("her", None), Criteria.load(overrides=list(overrides)))
    (row,) = [r for r in treatments[0].rows if r.criterion == BENEFIT.format(metric=PNL)]
    return row


def normal_scores(n: int, scale: float = 5_000.0) -> list[float]:
    """n evenly spread normal quantiles: neither skewed nor heavy-tailed."""
    return (scale * stats.norm.ppf((np.arange(n) + 0.5) / n)).tolist()


def test_well_shaped_pairs_carry_no_note() -> None:
    row = benefit_row(normal_scores(20))
    assert SKEW_NOTE not in row.value and HEAVY_NOTE not in row.value
    assert abs(row.evidence["skewness"]) < 0.1 and abs(row.evidence["excess_kurtosis"]) < 1


def test_a_long_tail_away_from_harm_is_named() -> None:
    """PnL differences with a long right tail (toward benefit): the harm test's mean is pulled
    up less often than its spread, so it may KILL more than its level; the row says so."""
    x = (np.exp(stats.norm.ppf((np.arange(20) + 0.5) / 20)) - 1.5) * 5_000.0
    row = benefit_row(x.tolist())
    assert row.evidence["skewness"] > 0.5 and SKEW_NOTE in row.value
    mirrored = benefit_row((-x).tolist())  # the tail toward harm: the test is conservative
    assert SKEW_NOTE not in mirrored.value


def test_heavy_tails_are_named_under_a_margin_in_sds_only() -> None:
    """Two pairs far out, one each way (heavy, not skewed), among 18 ordinary ones: excess
    kurtosis beyond 2; the margin in sds is what heavy tails move (docs/verdicts.md), a margin
    in the metric's units is not."""
    x = [*normal_scores(18), 40_000.0, -40_000.0]
    row = benefit_row(x)
    assert row.evidence["excess_kurtosis"] >= 2 and HEAVY_NOTE in row.value
    assert "set benefit_margin in the metric's units" in row.value
    units = benefit_row(x, "benefit_margin=3000", "benefit_margin_sd=null")
    assert HEAVY_NOTE not in units.value and "excess_kurtosis" not in units.evidence


@pytest.mark.parametrize("n", [5, 9])
def test_too_few_pairs_say_nothing_of_their_tails(n: int) -> None:
    x = normal_scores(n)
    x[-1] = 60_000.0
    row = benefit_row(x)
    assert HEAVY_NOTE not in row.value and np.isnan(row.evidence["excess_kurtosis"])
