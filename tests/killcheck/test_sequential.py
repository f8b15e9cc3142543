"""The staged design's levels (alpha spending over looks), the harmlessness test on rates, and the
three-way decision of a check, on cases computed by hand or by simulation here."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.criteria import KILL, PASS, PENDING, Judgement
from alpha_rl.killcheck.criteria import Test as RowTest
from alpha_rl.killcheck.rates import p_within, restricted_shares, seeds_within
from alpha_rl.killcheck.report import KEEP, UNDECIDED, Settled, Treatment, decide, overall
from alpha_rl.killcheck.sequential import Design, bounds, spent
from alpha_rl.killcheck.staged import Progress


def test_one_look_is_the_level_itself() -> None:
    assert Design.single(5).nominal(0, 0.025) == 0.025


@pytest.mark.parametrize(("gamma", "want"), [
    (-4.0, (3.253, 2.986, 2.692, 2.374, 2.025)),  # gsDesign's sfHSD(-4), 5 equal looks
    (1.0, (2.449, 2.419, 2.398, 2.391, 2.395)),  # near Pocock's constant 2.41
])  # fmt: skip
def test_bounds_of_five_equal_looks_match_the_published_ones(gamma, want) -> None:
    got = bounds(tuple(np.arange(1, 6) / 5), 0.025, gamma)
    assert got == pytest.approx(want, abs=2e-3)


def test_the_looks_spend_the_level_and_no_more() -> None:
    """Brownian paths through the looks at 5, 10, ..., 40 pairs: the first crossings of the
    bounds happen as often as the spending function spends, and in all about the level."""
    design = Design.stages(5, 5, 40, -4.0)
    c = np.array(bounds(design.fractions, 0.025, -4.0))
    n = np.array(design.looks)
    rng = np.random.default_rng(1)
    z = np.cumsum(rng.normal(size=(400_000, n.size)) * np.sqrt(np.diff(np.r_[0, n])), 1)
    crossed = (z / np.sqrt(n)) >= c
    rate = crossed.any(1).mean()
    assert abs(rate - 0.025) < 3 * math.sqrt(0.025 * 0.975 / 400_000)
    first = np.bincount(crossed.argmax(1)[crossed.any(1)], minlength=n.size) / 400_000
    want = np.diff([0.0] + [spent(t, 0.025, -4.0) for t in design.fractions])
    assert first == pytest.approx(want, abs=6e-4)
    # a nominal level grows toward the last look, and stays below the level
    levels = [design.nominal(k, 0.025) for k in range(n.size)]
    assert levels == sorted(levels) and levels[-1] < 0.025 and levels[0] < 0.001


def test_the_stages_always_end_at_the_most_seeds() -> None:
    assert Design.stages(5, 5, 40, -4).looks == (5, 10, 15, 20, 25, 30, 35, 40)
    assert Design.stages(5, 10, 22, -4).looks == (5, 15, 22)


def test_harmlessness_on_rates_by_the_score_test() -> None:
    """0 of 20 against 0 of 20 shows a difference below 0.2 (the restricted MLE puts the
    treatment's share at 0.2 above the baseline's); a treatment that broke half its runs is not
    within 0.2 of a baseline that broke none."""
    pt, pb = restricted_shares(0, 20, 0, 20, 0.2)
    assert pt - pb == pytest.approx(0.2)
    z = -0.2 / math.sqrt(pt * (1 - pt) / 20 + pb * (1 - pb) / 20)
    assert p_within(0, 20, 0, 20, 0.2) == pytest.approx(stats.norm.cdf(z))
    assert p_within(0, 20, 0, 20, 0.2) < 0.025 < p_within(0, 5, 0, 5, 0.2)
    assert p_within(10, 20, 0, 20, 0.2) > 0.9
    assert seeds_within(0, 5, 0, 5, 0.2, 0.05) == 11
    assert seeds_within(5, 10, 0, 10, 0.2, 0.05) is None


def _row(p: float, safe: float, name: str = "7 no held-out harm (eval/pnl)") -> Judgement:
    test = RowTest(p, lambda level: 12, p_safe=safe)
    return Judgement(name, "", "", PENDING, True, {"n": 5}, test=test)


def _treatment(value: str, *tests: tuple[float, float]) -> Treatment:
    rows = [_row(p, s, f"{i} test") for i, (p, s) in enumerate(tests)]
    rows.append(Judgement("4 injections on done steps", "", "", PASS, True))
    return Treatment(value, f"her={value}", [("t", "b")], rows)  # type: ignore[list-item]


def test_a_check_kills_keeps_or_leaves_undecided() -> None:
    """KILL where harm is shown (Holm over every test), KEEP where every test shows
    harmlessness (Holm over treatments at beta), UNDECIDED otherwise; the overall verdict
    KILL over UNDECIDED over KEEP."""
    crit = Criteria.load()
    harmed = _treatment("a", (0.001, 0.9), (0.5, 0.02))
    harmless = _treatment("b", (0.9, 0.01), (0.8, 0.03))
    unclear = _treatment("c", (0.3, 0.3), (0.9, 0.01))
    family = decide([harmed, harmless, unclear], crit)
    assert family == 6
    assert [t.verdict for t in (harmed, harmless, unclear)] == [KILL, KEEP, UNDECIDED]
    assert harmed.rows[0].verdict == KILL and harmed.rows[0].evidence["level"] == 0.025 / 6
    assert [r.verdict for r in unclear.rows[:2]] == ["OPEN", PASS]
    assert "about 12 pairs would decide" in unclear.blocked_by
    assert overall([harmless, unclear]) == UNDECIDED and overall([harmless]) == KEEP
    # KEEP by Holm over the treatments at beta: the smallest harmlessness p (the largest of a
    # treatment's rows) against beta / 2 with two treatments ...
    kept = _treatment("b", (0.9, 0.01), (0.8, 0.04))
    decide([kept, _treatment("c", (0.3, 0.3))], crit)
    assert kept.verdict == KEEP
    # ... against beta / 3 when a treatment an earlier look of a study decided without a KEEP
    # holds its share
    held = _treatment("b", (0.9, 0.01), (0.8, 0.04))
    decide([held, _treatment("c", (0.3, 0.3))], crit, settled=Settled(keep_open=1))
    assert held.verdict == UNDECIDED


def test_a_study_records_each_treatment_once_and_reads_back() -> None:
    progress = Progress(Design.stages(5, 5, 15, -4.0))
    kept, open_ = _treatment("b", (0.9, 0.0001)), _treatment("c", (0.3, 0.3))
    decide([kept, open_], Criteria.load(), progress.design, 0)
    progress.record([kept, open_])
    assert progress.decided == {"b": {"verdict": KEEP, "look": 0, "pairs": 1, "label": "her=b"}}
    assert progress.settled == Settled(kill_open=1, keep_open=0)
    look = progress.look({"b", "c"})
    assert look.index == 1 and look.values == frozenset({"c"})
    again = Progress.from_json(progress.as_json())
    assert again == progress
