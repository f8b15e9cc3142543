"""reward.scale=auto: a typical step's reward is of order 1 on a stock-like and an FX-like market,
from the training ticks only; a number fixes it; a mis-scaled run is warned about."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.errors import MarketDataError
from alpha_rl.market import Book, SingleSplit, divide
from alpha_rl.pipeline.configure.scale import mean_move, reward_scale
from alpha_rl.pipeline.life.run import Job, run_job
from tests.helpers import compose_train
from tests.test_env import make_env

LONG = 1
# (price, tick, per-step relative move, env.multiplier): a stock near 1,000 USD moving ~1% a
# step (daily bars; lots of 100 shares) and EURUSD near 1.1 moving ~0.05% a step (hourly, ~55
# pips; standard lots of 100,000 EUR)
MARKETS = {"stock": (1000.0, 0.01, 0.01, 100), "fx": (1.1, 1e-5, 0.0005, 100_000)}


def walk_book(kind: str, rows: int = 3000, seed: int = 0) -> Book:
    """A log random walk L1 book shaped like `kind`: prices on the tick grid, spread 1-2 ticks."""
    price, tick, sigma, _ = MARKETS[kind]
    gen = np.random.default_rng(seed)
    mid_ticks = np.rint(price / tick * np.exp(np.cumsum(gen.normal(0, sigma, rows))))
    bid = mid_ticks * tick
    ask = (mid_ticks + gen.integers(1, 3, rows)) * tick
    sizes = gen.integers(1, 50, (rows, 1)).astype(float)
    return Book(bid[:, None], ask[:, None], sizes, sizes.copy(), tick, kind)


def write_file(tmp_path: Path, book: Book) -> Path:
    columns = {f"{side}_0": getattr(book, side)[:, 0]
               for side in ("bid_px", "ask_px", "bid_sz", "ask_sz")}  # fmt: skip
    frame = pd.DataFrame(columns)
    path = tmp_path / f"{book.source}.csv"
    frame.to_csv(path, index=False, float_format="%.10g")
    return path


@pytest.mark.parametrize("kind", sorted(MARKETS))
def test_auto_makes_a_held_positions_step_reward_of_order_one(kind: str) -> None:
    book = walk_book(kind)
    env = make_env(NumpyBackend(), book, ["env.num_envs=64", "env.perception.horizons=[1]"])
    be, rewards = env.backend, []
    for step in range(200):
        env.step(be.upload(np.full(64, LONG, np.int32)))
        held = be.download(env.arrays["opened"]) == 0  # the opening step also pays the fee
        rewards.append(np.abs(be.download(env.arrays["reward"]))[held & (step > 0)])
    typical = float(np.concatenate(rewards).mean())
    assert 0.5 < typical < 2.0, f"{kind}: mean |reward| {typical} per held step"
    cfg, _ = compose_train(["reward.scale=1.0"])  # env.multiplier 100: the default contract
    unscaled = reward_scale(cfg, book).typical_reward
    assert unscaled > 100 if kind == "stock" else unscaled < 0.1, (kind, unscaled)


def test_the_scale_ignores_the_held_out_ticks() -> None:
    book = walk_book("stock")
    split = SingleSplit(0.8)
    calmer = Book(book.bid_px.copy(), book.ask_px.copy(), book.bid_sz, book.ask_sz, 0.01, "x")
    cut = divide(book, split).fold.test.start
    calmer.bid_px[cut:] = calmer.bid_px[cut]  # a flat held-out part: the whole mean would halve
    calmer.ask_px[cut:] = calmer.ask_px[cut]
    cfg, _ = compose_train()
    scales = [reward_scale(cfg, divide(b, split).train).value for b in (book, calmer)]
    assert scales[0] == scales[1]
    whole = 1 / (mean_move(book)[0] * 100)
    assert scales[0] != pytest.approx(whole, rel=1e-3)
    assert reward_scale(compose_train(["reward.scale=0.25"])[0], book).value == 0.25


def test_moves_across_a_session_gap_are_not_averaged() -> None:
    t = np.arange(6, dtype=float)[:, None]
    mid = np.array([[10.0], [10.02], [10.0], [50.0], [50.02], [50.04]])  # a gap before tick 3
    book = Book(mid - 0.01, mid + 0.01, t + 1, t + 1, 0.01, "gap", breaks=[3])
    move, count = mean_move(book)
    assert count == 4 and move == pytest.approx(0.02)


def test_a_training_part_of_one_tick_sessions_names_the_session_gap() -> None:
    """Every training tick a session of its own: no step within a session, so no move to scale
    by; the error names market.session_gap (not the prices), which made it so."""
    book = walk_book("stock", rows=20)
    gapped = Book(book.bid_px, book.ask_px, book.bid_sz, book.ask_sz, book.tick_size, "gapped",
                  breaks=list(range(1, 20)))  # fmt: skip
    with pytest.raises(MarketDataError) as caught:
        reward_scale(compose_train()[0], gapped)
    assert str(caught.value) == (
        "gapped: market.session_gap leaves no step within a session among the 20 training ticks "
        "(20 sessions of 1 tick): there is nothing to learn; raise market.session_gap above the "
        "ticks' spacing, or set it to null for one session"
    )
    assert reward_scale(compose_train()[0], book).typical_move > 0  # one session: it moves


def test_a_mis_scaled_run_is_warned_about(caplog) -> None:
    cfg, _ = compose_train(["reward.scale=1.0"])
    caplog.set_level(logging.WARNING, logger="alpha_rl")
    reward_scale(cfg, walk_book("stock"))
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "a typical step's |reward| is" in warning and "agent.huber_kappa is 1" in warning
    assert "all linear" in warning and "reward.scale=auto" in warning
    caplog.clear()
    reward_scale(compose_train()[0], walk_book("stock"))  # auto: a typical reward of 1
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_fees_that_dwarf_the_moves_are_warned_about(caplog) -> None:
    """EURUSD at the default env.multiplier 100: a typical move is 0.055 USD, a fill 0.5 USD."""
    caplog.set_level(logging.WARNING, logger="alpha_rl")
    reward_scale(compose_train()[0], walk_book("fx"))
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "one fill costs 0.5 USD" in warning and "check env.multiplier" in warning
    caplog.clear()
    reward_scale(compose_train(["env.multiplier=100000"])[0], walk_book("fx"))
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def last_l_q(run_dir: Path) -> float:
    lines = [json.loads(x) for x in (run_dir / "diag.jsonl").read_text().split("\n") if x]
    return [x["metrics"]["loss/l_q"] for x in lines if "loss/l_q" in x["metrics"]][-1]


@pytest.mark.parametrize("kind", sorted(MARKETS))
@pytest.mark.slow
def test_a_short_run_on_a_file_has_an_l_q_of_order_one(tmp_path: Path, kind: str) -> None:
    path, multiplier = write_file(tmp_path, walk_book(kind)), MARKETS[kind][3]
    l_q = {}
    for scale in ("auto", "1.0"):
        overrides = ["backend=numpy", "debug=tiny", "market=file",
                     f"market.path={path}", f"env.multiplier={multiplier}",
                     f"reward.scale={scale}", "steps=60",
                     f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"]  # fmt: skip
        cfg, choices = compose_train(overrides)
        out = run_job(cfg, Job(tmp_path / f"{kind}_{scale}", choices))
        assert out.status == "FINISHED"
        l_q[scale] = last_l_q(out.run_dir)
    assert 0.01 < l_q["auto"] < 10, l_q
    assert l_q["1.0"] > 10 * l_q["auto"], l_q  # a typical step's reward of ~500 / ~55 USD
