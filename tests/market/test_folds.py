"""Walk-forward folds: no training tick inside a fold's test window or its embargo, for both
schemes and any K, on synthetic and file markets; the config's checks name the key."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from alpha_rl.errors import ConfigError, MarketDataError
from alpha_rl.market import Fold, WalkForward, divide, load_market
from alpha_rl.market.folds import Window
from alpha_rl.pipeline.configure.config import plan_run
from alpha_rl.reference.experience import MIN_EPISODE_TICKS
from tests.helpers import compose_train, write_quotes

CASES = 300


def check_fold(fold: Fold, T: int, history: int) -> None:
    """The fold's invariants: train before test, separated by the embargo, the held-out part the
    test window plus its history, which lies inside the embargo."""
    train, test, heldout = set(fold.train.ticks()), fold.test, fold.heldout
    embargoed = set(range(test.start - fold.embargo, test.start))
    assert not train & set(test.ticks()), "a training tick inside the test window"
    assert not train & embargoed, "a training tick inside the embargo"
    assert not train & set(heldout.ticks()), "the evaluation reads a training tick"
    assert fold.train.stop == test.start - fold.embargo and len(fold.train) > history + 2
    assert (heldout.start, heldout.stop) == (test.start - history, test.stop)
    assert fold.embargo >= history and fold.train.start >= 0 and test.stop <= T


def random_walk_forward(gen: np.random.Generator) -> tuple[int, WalkForward]:
    K = int(gen.integers(1, 7))
    history = int(gen.integers(1, 65))
    frac = float(gen.uniform(0.01, 0.9 / K))
    T = int(gen.integers(max(400, int(MIN_EPISODE_TICKS / frac) + 1), 20_000))
    embargo = history + int(gen.integers(0, 100))
    scheme = str(gen.choice(["rolling", "anchored"]))
    return T, WalkForward(K, scheme, frac, embargo, history, int(gen.integers(0, K)))


def test_no_training_tick_falls_in_a_test_window_or_its_embargo() -> None:
    gen, checked = np.random.default_rng(0), 0
    for _ in range(CASES):
        T, wf = random_walk_forward(gen)
        try:
            folds = wf.all_folds(T, "random")
        except MarketDataError as exc:  # too little training data: refused, never cut silently
            assert "to train fold 0" in str(exc)
            continue
        checked += 1
        assert [f.index for f in folds] == list(range(wf.folds))
        n_test = len(folds[0].test)
        assert folds[-1].test.stop == T and all(len(f.test) == n_test for f in folds)
        assert all(a.test.stop == b.test.start for a, b in itertools.pairwise(folds))
        for fold in folds:
            check_fold(fold, T, wf.history)
        if wf.scheme == "rolling":
            assert len({len(f.train) for f in folds}) == 1, "rolling: equal training windows"
        else:
            assert all(f.train.start == 0 for f in folds), "anchored: from the first tick"
    assert checked > CASES // 2


def _file(tmp_path: Path, rows: int) -> Path:
    t = np.arange(rows)
    return write_quotes(tmp_path / "quotes.csv", 100 + ((t * 7) % 5) / 100)


@pytest.mark.parametrize("scheme", ["rolling", "anchored"])
@pytest.mark.parametrize("source", ["synthetic", "file"])
def test_every_fold_of_a_real_market_keeps_train_and_test_apart(
    tmp_path: Path, scheme: str, source: str
) -> None:
    market = (["market.ticks=3000"] if source == "synthetic" else
              ["market=file", f"market.path={_file(tmp_path, 3000)}"])  # fmt: skip
    base = [*market, "validation=walk_forward", f"validation.scheme={scheme}",
            "validation.folds=3", "validation.test_fraction=0.15"]  # fmt: skip
    seen = []
    for k in range(3):
        cfg, _ = compose_train([*base, f"market.fold={k}"])
        plan = plan_run(cfg)
        m = load_market(cfg.market, 0, plan.validation)
        check_fold(m.fold, m.book.T, 64)
        assert m.fold.embargo == 64 + 50, "default: the longest horizon + forward HER's lookahead"
        assert (m.train.start, m.train.T) == (m.fold.train.start, len(m.fold.train))
        assert (m.heldout.start, m.heldout.T) == (m.fold.heldout.start, len(m.fold.heldout))
        np.testing.assert_array_equal(m.heldout.bid_px, m.book.bid_px[m.fold.heldout.ticks()])
        params = m.params()
        assert params["fold.index"] == k and params["fold.test_stop"] == m.fold.test.stop
        assert ("fold.test_first_time" in params) == (source == "file")
        seen.append(m.fold.test)
    assert seen[-1].stop == 3000 and seen[0].stop == seen[1].start


def test_a_file_fold_logs_its_times(tmp_path: Path) -> None:
    cfg, _ = compose_train(["market=file", f"market.path={_file(tmp_path, 2000)}",
                            "validation=walk_forward", "market.fold=1"])  # fmt: skip
    market = load_market(cfg.market, 0, plan_run(cfg).validation)
    # 4 folds of 200 ticks from tick 1200; fold 1 tests ticks [1400, 1600): 23:20 to 26:39
    assert (market.fold.test.start, market.fold.test.stop) == (1400, 1600)
    assert market.params()["fold.test_first_time"] == "2024-01-01T23:20:00+00:00"
    assert market.params()["fold.test_last_time"] == "2024-01-02T02:39:00+00:00"
    assert "(2024-01-01T23:20:00+00:00 .. 2024-01-02T02:39:00+00:00)" in market.fold.describe(
        market.book.timestamps
    )


def test_the_single_split_is_todays() -> None:
    cfg, _ = compose_train(["market.ticks=1000"])
    plan = plan_run(cfg)
    market = load_market(cfg.market, 0, plan.validation)
    assert market.fold.label == "single split" and market.fold.embargo == 0
    assert (market.train.T, market.heldout.start, market.heldout.T) == (800, 800, 200)
    assert "validation.embargo_resolved" not in plan.resolved_params()


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["market.fold=1"], r"market\.fold=1 needs walk-forward folds"),
        (["validation=walk_forward"], r"market\.fold=None.*market\.fold=0,1,2,3"),
        (["validation=walk_forward", "market.fold=4"], r"pick one of 0\.\.3"),
        (["validation=walk_forward", "market.fold=0", "validation.embargo=10"],
         r"validation\.embargo=10 ticks is smaller than the perception history \(64 ticks"),
        (["validation=walk_forward", "market.fold=0", "validation.test_fraction=0.3"],
         r"folds x test_fraction < 1 \(4 x 0\.3 = 1\.2\)"),
        (["validation=walk_forward", "market.fold=0", "validation.scheme=expanding"],
         r"validation\.scheme='expanding'"),
        (["validation=walk_forward", "market.fold=0", "validation.folds=0"],
         r"validation\.folds=0"),
    ],
)  # fmt: skip
def test_bad_validation_settings_name_the_key(overrides: list[str], match: str) -> None:
    cfg, _ = compose_train(overrides)
    with pytest.raises(ConfigError, match=match):
        plan_run(cfg)


def test_a_series_too_short_for_its_folds_is_refused() -> None:
    cfg, _ = compose_train(["market.ticks=600", "validation=walk_forward", "market.fold=0",
                            "validation.test_fraction=0.2"])  # fmt: skip
    plan = plan_run(cfg)
    with pytest.raises(MarketDataError, match=r"leaves 6 ticks to train fold 0, fewer than the 67"):
        load_market(cfg.market, 0, plan.validation)


@pytest.mark.parametrize("her", ["'off'", "backward", "forward", "'on'"])
def test_every_her_arm_resolves_the_same_folds(her: str) -> None:
    cfg, _ = compose_train([f"her={her}", "validation=walk_forward", "market.fold=2"])
    validation = plan_run(cfg).validation
    fold = load_market(cfg.market, 0, validation).fold  # 200k ticks: tests from 120k, 20k each
    assert (fold.embargo, fold.train, fold.test) == (
        114,
        Window(40000, 159886),
        Window(160000, 180000),
    )
    assert divide(load_market(cfg.market, 0, validation).book, validation).fold == fold
