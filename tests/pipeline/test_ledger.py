"""The held-out ledger and the trivial baselines against hand-worked trade sequences on the env
test's ledger book (tests/test_env.py: every price binary-exact, so the sums are exact), and
against the env kernel's own closed-trade accounting and cursor walk."""

from __future__ import annotations

import math

import numpy as np
import pytest

from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.pipeline.evaluation.evaluate import direction, ledger_metrics
from alpha_rl.pipeline.evaluation.ledger import (
    Costs,
    TickPath,
    hold,
    matched_random,
    play,
    random_walk,
    settle,
    tick_path,
)
from alpha_rl.vocabulary import eval_key
from tests.test_env import LEDGER_OVERRIDES, ledger_book, make_env

# lot 2 x multiplier 10: 20 USD per 1.0 of price; a fill pays 0.5 x 2 = 1 USD of fees and, on
# the ticks traded below (spread 0.25), 0.125 x 20 = 2.5 USD of half spread
COSTS = Costs(lot=2.0, multiplier=10.0, fee_per_lot=0.5)
# mids of the book: 100.125 100.375 100.625 101.125 100.875 100.625 100.25 99.875 99.625 99.875
# 100.125 100.375 (tick 6 has a spread of 0.5; none is traded there)
# the env test's script from tick 1: long 3 steps, flip short 3, flat 2, long 1, forced flat
SCRIPT = [1, 1, 1, -1, -1, -1, 0, 0, 1, 1]


def one_window(steps: int = 10) -> TickPath:
    """One env from tick 1 for `steps` steps (tick 10's step is the book's forced close)."""
    book = ledger_book()
    path = tick_path(book.session_last(), np.array([1], np.int32), 0, np.array([1]), steps)
    return path


def scripted(path: TickPath, window: int = 4):
    return play(ledger_book(), COSTS, path, window, lambda s, pos: np.array([SCRIPT[s]]))


def test_the_script_by_hand() -> None:
    stats = scripted(one_window())
    # gross: long 1->4 (100.875 - 100.375) x 20 = 10, short 4->7 (100.875 - 99.875) x 20 = 20,
    # long 9->10 (100.125 - 99.875) x 20 = 5
    assert stats.pnl_gross == 35.0
    # fills at ticks 1, 4 (a flip: two), 7, 9 and the forced close at 10: six
    assert stats.fills == 6
    assert stats.cost_spread == 6 * 2.5
    assert stats.cost_fees == 6 * 1.0
    assert stats.pnl == 35.0 - 15.0 - 6.0 == 14.0
    assert stats.pnl == pytest.approx(stats.pnl_gross - stats.cost_spread - stats.cost_fees)
    # the kernel's realised sum of the same trades (tests/test_env.py): 5 + 15 + 0
    assert stats.realised == 20.0
    assert stats.pnl == stats.realised - stats.cost_fees
    assert stats.turnover == 6 / 10 * 1000
    assert stats.exposure == 7 / 10  # ticks 1-6 and 9 in a position
    # net per step: 1.5 10 -5 -2 7.5 7.5 -3.5 0 1.5 -3.5; equity 1.5 11.5 6.5 4.5 12 19.5 16 16
    # 17.5 14: the deepest fall is 11.5 -> 4.5
    np.testing.assert_array_equal(stats.equity, [1.5, 11.5, 6.5, 4.5, 12, 19.5, 16, 16, 17.5, 14])
    assert stats.max_drawdown == 7.0
    # round trips net of both fees: 5 - 2 = 3, 15 - 2 = 13, 0 - 2 = -2
    assert (stats.round_trips, stats.wins, stats.hit_rate) == (3, 2, 2 / 3)
    np.testing.assert_array_equal(stats.intervals, [4.5, 11.5, -2.0])  # windows of 4 steps
    assert stats.pnl_per_env_kstep == 14.0 / 10 * 1000


def test_an_open_position_is_liquidated_at_the_touch() -> None:
    """Long from tick 1 for 3 steps: the position still open at tick 4 closes at its bid."""
    stats = play(ledger_book(), COSTS, one_window(3), 4, hold(1))
    assert stats.pnl_gross == (100.875 - 100.375) * 20  # marked to tick 4's mid
    assert (stats.fills, stats.round_trips) == (2, 1)
    assert stats.realised == 0.0, "no trade was closed by the policy"
    # the liquidation: bid 100.75 at tick 4 - ask 100.50 at tick 1, less two fees
    assert stats.pnl == (100.75 - 100.50) * 20 - 2.0 == 3.0
    assert stats.equity[-1] == stats.pnl


def test_the_baselines_on_the_hand_window() -> None:
    path = one_window()
    book = ledger_book()
    flat = play(book, COSTS, path, 4, hold(0))
    assert (flat.pnl, flat.fills, flat.exposure, flat.max_drawdown) == (0.0, 0, 0.0, 0.0)
    assert math.isnan(flat.hit_rate)
    # long from tick 1's ask to the forced close at tick 10's bid: (100.00 - 100.50) x 20 - 2
    buy = play(book, COSTS, path, 4, hold(1))
    assert buy.pnl_gross == (100.125 - 100.375) * 20 == -5.0
    assert buy.pnl == -5.0 - 2 * 2.5 - 2 * 1.0 == -12.0
    assert (buy.exposure, buy.turnover) == (0.9, 200.0)  # 9 of 10 steps; 2 fills in 10 steps
    sell = play(book, COSTS, path, 4, hold(-1))
    assert sell.pnl == 5.0 - 5.0 - 2.0 == -2.0


def test_the_random_walk_is_seeded_and_matches_a_turnover() -> None:
    book = ledger_book()
    starts = np.arange(1, 10, dtype=np.int32)  # the book's start ticks (one session, T = 12)
    path = tick_path(book.session_last(), starts, 5, np.arange(1, 9), 400)
    again = [play(book, COSTS, path, 20, random_walk(7, 0.3)) for _ in range(2)]
    assert again[0].pnl == again[1].pnl and again[0].fills == again[1].fills
    other = play(book, COSTS, path, 20, random_walk(8, 0.3))
    assert other.fills != again[0].fills, "another seed draws another walk"
    exposure = []
    for turnover in (150.0, 600.0):
        got = matched_random(book, COSTS, path, 20, 7, turnover)
        assert got.turnover == pytest.approx(turnover, rel=0.1)
        assert got.envs == 8 and 0 <= got.hit_rate <= 1 and got.round_trips > 0
        exposure.append(got.exposure)
    # each session of this book is 8 steps, entered flat: the slower walk is flat more often
    assert 0 < exposure[0] < exposure[1] < 1
    assert matched_random(book, COSTS, path, 20, 7, 0.0).fills == 0, "an agent that never trades"


def test_the_path_is_the_env_kernels_cursor_walk_and_the_ledger_its_accounts() -> None:
    """Random actions on the numpy env for 60 steps (episodes end and restart at seeded starts):
    the host's tick path is the env's cursors, and the ledger's closed-trade realised sum and
    round trips are the kernel's stat_realised and stat_trades."""
    be = NumpyBackend()
    env = make_env(be, ledger_book(), [*LEDGER_OVERRIDES[:1], "env.num_envs=8",
                                       *LEDGER_OVERRIDES[1:]], seed=11)  # fmt: skip
    env.reset()
    steps = 60
    path = tick_path(env.book.session_last(), env.starts, 11, env.seeded_cursors(), steps)
    targets = np.zeros((steps, 8), np.int64)
    rng = np.random.default_rng(0)
    for s in range(steps):
        assert be.download(env.arrays["cursor"]).tolist() == path.ticks[s].tolist(), s
        env.step(be.upload(rng.integers(0, 3, 8).astype(np.int32)))
        targets[s] = direction(be.download(env.arrays["eff_action"]))
    assert be.download(env.arrays["cursor"]).tolist() == path.ticks[steps].tolist()
    kernel = env.harvest_trade_stats()
    stats = settle(env.book, COSTS, path, targets, 10)
    assert stats.realised == pytest.approx(kernel.realised, abs=1e-3)
    assert stats.round_trips - int((targets[-1] != 0).sum()) == kernel.trades
    assert stats.pnl == pytest.approx(stats.pnl_gross - stats.cost_spread - stats.cost_fees)


def test_the_metrics_are_named_and_finite_where_defined() -> None:
    stats = scripted(one_window())
    m = ledger_metrics(stats, eval_key)
    assert m["eval/pnl"] == 14.0 and m["eval/turnover"] == 600.0
    assert m["eval/sharpe"] == pytest.approx(np.mean([4.5, 11.5, -2]) / np.std([4.5, 11.5, -2],
                                                                            ddof=1))  # fmt: skip
    assert {
        "eval/pnl_gross",
        "eval/cost_spread",
        "eval/cost_fees",
        "eval/exposure",
        "eval/max_drawdown",
        "eval/hit_rate",
        "eval/pnl_per_env_kstep",
    } <= set(m)
