"""The decision rule's error rates, measured: simulated studies of known truth through the real
judging code (alpha_rl.killcheck.calibrate), seeded, on the numpy stack.

At one look (the check at 5 seeds) a false KILL and a false KEEP stay within alpha and beta up to
the Monte Carlo margin; studies in stages (the CI tier: 2,000 studies a scenario) hold them within
alpha + 0.01 and beta + 0.01 over every look."""

from __future__ import annotations

import pytest

from alpha_rl.killcheck.calibrate import BOUNDARY, HARMFUL, INSIDE, rates, reads, scenarios
from alpha_rl.killcheck.cli import parse, run, staged_design
from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.coverage import coverage
from alpha_rl.killcheck.sequential import Design

EXPERIMENTS = 200
SCENARIOS = {sc.name: sc for sc in scenarios()}
# the Monte Carlo runs of several treatments or folds: seconds each
MANY_ARMS = {"3 HER treatments at the boundaries", "5 key treatments at the PnL boundary",
             "10% diverge, 5 key treatments", "4 folds with fold effects, boundary",
             "unequal folds (2/3/5/10, small noisier)"}  # fmt: skip
ONE_LOOK = Design.single(5)


HELD = [n for n, sc in SCENARIOS.items() if not sc.limit]


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in MANY_ARMS else n for n in HELD]
)
def test_at_one_look_false_kills_and_keeps_stay_within_their_levels(name: str) -> None:
    """Inside the tolerances or at their boundary the check kills at most alpha of the time,
    at the boundary or beyond it keeps at most beta of the time, family-wise, up to the Monte
    Carlo margin (two standard errors at the level): with several treatments, diverged runs,
    folds (unequal too), heavy tails and skew."""
    crit = Criteria.load()
    sc = SCENARIOS[name]
    r = rates(sc, crit, ONE_LOOK, folds=1, experiments=EXPERIMENTS)
    text, ok = reads(sc, r, crit)
    assert ok, (text, r)
    if sc.truth == INSIDE:
        assert r.kill_any <= crit.alpha + r.margin(crit.alpha)
    if sc.truth in (BOUNDARY, HARMFUL):
        assert r.keep_any <= crit.beta + r.margin(crit.beta)


def test_skewed_noise_is_a_stated_limit_of_the_t_tests() -> None:
    """Pairs' values skewed away from harm (skewness 0.5) make the t-tests KILL more often than
    alpha at 5 seeds (docs/verdicts.md states it: 0.037 over 2,000 studies; a row with the skew
    says so), and never keep."""
    crit = Criteria.load()
    sc = SCENARIOS["skewed noise (skewness 0.5), boundary"]
    r = rates(sc, crit, ONE_LOOK, 1, 1000)
    assert crit.alpha < r.kill_any < 2 * crit.alpha and r.keep_any == 0.0, r


@pytest.mark.slow
def test_heavy_tails_under_a_margin_in_sds_are_a_stated_limit() -> None:
    """With the held-out margin in sds, heavy-tailed pairs (t, 3 dof) at the boundaries are
    killed more often than alpha in a staged study (docs/verdicts.md: 0.068 over 2,000 studies
    at looks to 40): the sd that sets the margin is what heavy tails move. The same truth with
    the margin fixed in USD stays within alpha (the tier below)."""
    crit = Criteria.load()
    r = rates(SCENARIOS["heavy tails (t3), margin in sds, boundary"], crit,
              staged_design(crit, 5, 40), 1, 600)  # fmt: skip
    assert r.kill_any > crit.alpha + r.margin(crit.alpha) and r.keep_any <= 0.05, r


def test_a_looser_alpha_kills_more_at_the_boundary_and_stays_within_it() -> None:
    """The rule follows the user's alpha (not a fixed 2.5%): at 0.2 the boundary's false kills
    rise toward it and stay under it."""
    crit = Criteria.load(overrides=["alpha=0.2"])
    r = rates(SCENARIOS["PnL at the boundary"], crit, ONE_LOOK, 1, EXPERIMENTS)
    assert 0.05 < r.kill_any <= 0.2 + r.margin(0.2), r


def test_power_against_harm_at_5_seeds() -> None:
    """Reported power (docs/verdicts.md): a held-out PnL 30% lower (15,000, 2.1 sds of a pair's
    difference against a margin of 0.5) is killed in about a third of the studies at 5 seeds, a
    treatment whose every run diverges in all of them; none of them is kept."""
    crit = Criteria.load()
    pnl = rates(SCENARIOS["PnL 30% lower (harmful)"], crit, ONE_LOOK, 1, EXPERIMENTS)
    broken = rates(SCENARIOS["every treated run diverges (harmful)"], crit, ONE_LOOK, 1, 50)
    assert pnl.kill > 0.25 and broken.kill == 1.0
    assert pnl.keep == broken.keep == 0.0


def test_at_5_seeds_identical_arms_are_undecided_not_kept() -> None:
    """KEEP is harmlessness shown: five pairs of identical arms do not show it (the held-out
    margin and the probe's tolerance lie inside their intervals), so the verdict is UNDECIDED,
    not the KEEP a check that only looked for harm would give."""
    r = rates(SCENARIOS["identical arms"], Criteria.load(), ONE_LOOK, 1, 100)
    assert r.undecided > 0.9 and r.kill_any <= 0.05


def test_below_min_seeds_every_treatment_is_undecided() -> None:
    r = rates(SCENARIOS["PnL 30% lower (harmful)"], Criteria.load(), Design.single(3), 1, 20)
    assert r.undecided == 1.0 and r.kill_any == 0.0 and r.keep_any == 0.0


# the CI tier of studies in stages: 2,000 simulated studies a scenario, looks at 5, 10, 15, 20
STAGED = ("both at their boundaries", "3 HER treatments at the boundaries",
          "heavy tails (t3), margin in USD, boundary", "probe ratio 1.3 (harmful)")  # fmt: skip
TIER = 2000


@pytest.mark.slow
@pytest.mark.parametrize("name", STAGED)
def test_in_stages_false_kills_and_keeps_stay_within_their_levels_plus_a_point(name) -> None:
    """Over every look of a staged study (alpha and beta spent over the looks), the family-wise
    false KILL stays within alpha + 0.01 and the false KEEP within beta + 0.01, over 2,000
    simulated studies (two standard errors at alpha are 0.007 there)."""
    crit = Criteria.load()
    sc = SCENARIOS[name]
    r = rates(sc, crit, staged_design(crit, 5, 20), folds=1, experiments=TIER)
    if sc.truth in (INSIDE, BOUNDARY):
        assert r.kill_any <= crit.alpha + 0.01, r
    if sc.truth in (BOUNDARY, HARMFUL):
        assert r.keep_any <= crit.beta + 0.01, r
    if sc.truth == HARMFUL:  # killed in most studies, many before the last look
        assert r.kill > 0.8 and r.seeds_mean < 17, r


@pytest.mark.slow
def test_in_stages_identical_arms_are_kept_with_fewer_seeds_than_the_most() -> None:
    crit = Criteria.load()
    r = rates(SCENARIOS["identical arms"], crit, staged_design(crit, 5, 40), 1, 100)
    assert r.keep > 0.8 and r.kill_any <= 0.05 and r.seeds_mean < 40, r


@pytest.mark.slow
def test_the_info_intervals_cover_near_their_nominal_level() -> None:
    """The methods the check uses (t for means and paired differences, Yuen for the IQM) against
    the percentile bootstrap it used before, at 5 runs."""
    cov = coverage(5, 0.95, 400)
    margin = 2 * (0.95 * 0.05 / 400) ** 0.5
    assert abs(cov["mean"]["t"] - 0.95) <= margin
    assert abs(cov["paired difference"]["t"] - 0.95) <= margin
    assert cov["mean"]["percentile"] < 0.9 and cov["paired difference"]["percentile"] < 0.9
    assert cov["IQM"]["Yuen"] >= max(cov["IQM"]["percentile"], cov["IQM"]["BCa"]) - margin


@pytest.mark.slow
def test_the_command_prints_the_calibration_for_the_users_settings(capsys) -> None:
    code = run(parse(["--calibrate", "--seeds", "6", "--folds", "2", "--experiments", "20",
                      "alpha=0.05"]))  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "6 seeds x 2 fold(s), alpha 0.05 and beta 0.1" in out
    assert all(name in out for name in SCENARIOS)
    assert "coverage of 0.95 intervals at 6 runs" in out


@pytest.mark.slow
def test_the_command_prints_the_sequential_calibration(capsys) -> None:
    code = run(parse(["--calibrate", "--sequential", "--max-seeds", "10", "--experiments", "5"]))
    out = capsys.readouterr().out
    assert code == 0
    assert "looks at 5, 10 seeds (spending g -2)" in out
    assert all(name in out for name in SCENARIOS)


@pytest.mark.parametrize(("option", "value"), [("--seeds", "1"), ("--folds", "0"),
                                               ("--experiments", "0")])  # fmt: skip
def test_a_calibration_it_cannot_run_is_refused_naming_the_option(option, value, capsys) -> None:
    from alpha_rl.killcheck.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["--calibrate", option, value])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and f"--calibrate {option} {value}: give at least" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [["--calibrate", "--sequential", "--max-seeds", "3"],
                                  ["--sequential"]])  # fmt: skip
def test_a_staged_calibration_it_cannot_run_is_refused(argv, capsys) -> None:
    from alpha_rl.killcheck.cli import main

    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err
    assert "max seeds" in err or "go with --calibrate" in err
