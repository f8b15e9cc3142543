"""The environment against a hand-written trade ledger, and the 6/7-stride variant equivalence.

Prices, sizes and every constant are binary-exact (tick 0.25, kappa 1/8, ...), so the expected
values below are exact and compared for equality. The same tests run on the cuda backend in
tests/kernels/test_env_cuda.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from alpha_rl.backend.base import Backend
from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.env import EnvConfig, Environment
from alpha_rl.errors import ConfigError
from alpha_rl.isv import DeviceIsv
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.market import read_quotes_file
from alpha_rl.market.book import Book
from alpha_rl.pipeline.configure.config import layout_from_config
from alpha_rl.pipeline.configure.scale import reward_scale, with_scale
from alpha_rl.reference.experience import start_index
from tests.helpers import compose_train

FLAT, LONG, SHORT = 0, 1, 2

# best bid / ask per tick (level 1 is one tick further out); T = 12, the last tick is 11
LEDGER_BID = [100.00, 100.25, 100.50, 101.00, 100.75, 100.50,
              100.00, 99.75, 99.50, 99.75, 100.00, 100.25]  # fmt: skip
LEDGER_ASK = [100.25, 100.50, 100.75, 101.25, 101.00, 100.75,
              100.50, 100.00, 99.75, 100.00, 100.25, 100.50]  # fmt: skip
TICK = 0.25

LEDGER_OVERRIDES = [
    "env.num_envs=1", "env.lot=2", "env.multiplier=10", "env.fee_per_lot=0.5",
    "env.perception.horizons=[1]", "reward.scale=0.5", "reward.opp_cost_kappa=0.125",
    "reward.inventory_lambda=0.25", "reward.drawdown_rho=0.375", "beta=active", "beta.scale=0.5",
]  # fmt: skip


def ledger_book() -> Book:
    bid = np.array(LEDGER_BID)[:, None] - np.array([[0.0, TICK]])
    ask = np.array(LEDGER_ASK)[:, None] + np.array([[0.0, TICK]])
    sizes = np.full(bid.shape, 5.0)
    return Book(bid, ask, sizes, sizes.copy(), TICK, "ledger")


def make_env(backend: Backend, book: Book, overrides: list[str], seed: int = 0) -> Environment:
    cfg, choices = compose_train(overrides)
    cfg = with_scale(cfg, reward_scale(cfg, book))  # reward.scale=auto from the book itself
    layout = layout_from_config(cfg, choices)
    runtime = KernelRuntime(backend, {"RC_STRIDE": int(cfg.reward.stride)})
    isv = DeviceIsv(layout, backend)
    return Environment(
        EnvConfig.from_cfg(cfg.env), book, runtime, isv, seed, int(cfg.reward.stride)
    )


def expected_ledger() -> list[dict]:
    """The ledger by hand: lot 2, multiplier 10 (lot_mult 20), fee 0.5 per lot per fill,
    kappa 1/8, lambda 1/4, rho 3/8, scale_β 1/2, aux_prob 3/4 (aux = 1/2), reward scale 1/2."""
    mid = [(b + a) / 2 for b, a in zip(LEDGER_BID, LEDGER_ASK, strict=True)]
    lm, fee, kappa, lam, rho = 20.0, 1.0, 0.125, 0.25 * 2, 0.375
    rows = []

    def row(t, action, eff, c, done, opened, prev, closed_dir):
        rows.append(dict(t=t, action=action, eff=eff, c=c, done=done, opened=opened,
                         prev=prev, closed_dir=closed_dir))  # fmt: skip

    # t=1 open long at ask 100.50 (entry mid 100.375)
    row(1, LONG, LONG, [0, (mid[2] - 100.50) * lm, -fee, 0, -lam, 0, 0], 0, 1, 0, 0)
    row(2, LONG, LONG, [0, (mid[3] - mid[2]) * lm, 0, 0, -lam, 0, 0], 0, 0, 1, 0)
    row(3, LONG, LONG, [0, (mid[4] - mid[3]) * lm, 0, 0, -lam, 0, 0], 0, 0, 1, 0)
    # t=4 flip: close long at bid 100.75 (peak mid 101.125), open short at bid 100.75
    pnl = (100.75 - 100.50) * lm
    c5 = -rho * ((101.125 - 100.50) * lm - pnl)
    c6 = 0.5 * max(0.0, 0.5 * 1) * max(0.0, pnl)
    row(4, SHORT, SHORT, [pnl, -(mid[5] - 100.75) * lm, -2 * fee, 0, -lam, c5, c6], 1, 1, 1, 1)
    row(5, SHORT, SHORT, [0, -(mid[6] - mid[5]) * lm, 0, 0, -lam, 0, 0], 0, 0, -1, 0)
    row(6, SHORT, SHORT, [0, -(mid[7] - mid[6]) * lm, 0, 0, -lam, 0, 0], 0, 0, -1, 0)
    # t=7 close short at ask 100.00 (peak mid 99.875); aux disagrees with a short: c6 = 0
    pnl = -(100.00 - 100.75) * lm
    c5 = -rho * (-(99.875 - 100.75) * lm - pnl)
    row(7, FLAT, FLAT, [pnl, 0, -fee, -kappa * abs(mid[8] - mid[7]) * lm, 0, c5, 0], 1, 0, -1, -1)
    row(8, FLAT, FLAT, [0, 0, 0, -kappa * abs(mid[9] - mid[8]) * lm, 0, 0, 0], 0, 0, 0, 0)
    row(9, LONG, LONG, [0, (mid[10] - 100.00) * lm, -fee, 0, -lam, 0, 0], 0, 1, 0, 0)
    # t=10 is the last step (t+1 = T-1): LONG is overridden by the forced close at bid 100.00
    c5 = -rho * ((100.125 - 100.00) * lm - 0.0)
    row(10, LONG, FLAT, [0.0, 0, -fee, -kappa * abs(mid[11] - mid[10]) * lm, 0, c5, 0], 1, 0, 1, 1)
    return rows


@pytest.mark.parametrize("stride", [6, 7])
def test_ledger_numpy(stride: int) -> None:
    check_ledger(NumpyBackend(), stride)


def check_ledger(backend: Backend, stride: int) -> None:
    """Step the scripted actions and compare every output with the hand ledger."""
    overrides = LEDGER_OVERRIDES if stride == 7 else [*LEDGER_OVERRIDES[:-2], "reward=stride6"]
    env = make_env(backend, ledger_book(), overrides, seed=3)
    env.reset(np.array([1]))
    a = env.arrays
    aux = backend.upload(np.array([0.75], np.float32))
    ref = env.device_book.price_ref
    for row in expected_ledger():
        env.step(backend.upload(np.array([row["action"]], np.int32)), aux)
        got = {k: backend.download(a[k]) for k in a}
        want_c = np.array(row["c"][:stride], dtype=np.float32)
        np.testing.assert_array_equal(got["rc"], want_c, err_msg=f"t={row['t']} components")
        raw = np.float32(sum(row["c"][:stride]))
        assert got["reward_raw"][0] == raw, (row["t"], got["reward_raw"], raw)
        assert got["reward"][0] == raw * np.float32(0.5)
        assert (got["done"][0], got["closed"][0], got["opened"][0]) == (
            row["done"],
            row["done"],
            row["opened"],
        ), row["t"]
        assert (got["eff_action"][0], got["prev_dir"][0], got["closed_dir"][0]) == (
            row["eff"],
            row["prev"],
            row["closed_dir"],
        ), row["t"]
        t = row["t"]
        assert got["fill_mid"][0] + ref == (LEDGER_BID[t] + LEDGER_ASK[t]) / 2
        assert got["post_mid"][0] + ref == (LEDGER_BID[t + 1] + LEDGER_ASK[t + 1]) / 2
    # after the forced close: flat, episode 1 at its seeded start tick
    restart = env.starts[start_index(3, np.array([0]), np.array([1]), env.starts.size)]
    assert backend.download(a["episode"]).tolist() == [1]
    assert backend.download(a["cursor"]).tolist() == restart.tolist()
    assert backend.download(a["pos"]).tolist() == [0]
    stats = env.harvest_trade_stats()
    # realised 5 + 15 + 0; available (peak mid vs entry mid) 15 + 20 + 5; durations 3 + 3 + 1
    assert (stats.trades, stats.realised, stats.available, stats.duration) == (3, 20.0, 40.0, 7.0)
    assert stats.capture_ratio == 0.5
    assert env.harvest_trade_stats().trades == 0, "harvest clears the accumulators"


# the trading rules' ledger: (t, the action asked, the action taken, fills, realised PnL) with
# env.decision_interval=2 (decisions at even ticks) and env.min_hold=3 from tick 1 on
RULES_LEDGER = [
    (1, LONG, FLAT, 0, 0.0),  # odd tick: no decision, stays flat
    (2, LONG, LONG, 1, 0.0),  # opens long at ask 100.75
    (3, SHORT, LONG, 0, 0.0),  # odd tick: holds
    (4, FLAT, LONG, 0, 0.0),  # a decision, but held 2 steps < min_hold 3: holds
    (5, FLAT, LONG, 0, 0.0),  # odd tick
    (6, FLAT, FLAT, 1, (100.00 - 100.75) * 20),  # held 4 steps: closes at bid 100.00
    (7, SHORT, FLAT, 0, 0.0),  # odd tick: stays flat
    (8, SHORT, SHORT, 1, 0.0),  # opens short at bid 99.50
    (9, LONG, SHORT, 0, 0.0),  # odd tick
    (10, LONG, FLAT, 1, -(100.25 - 99.50) * 20),  # the last step: the forced close, whatever
]  # fmt: skip


def test_the_trading_rules_decide_every_interval_and_hold_a_trade_its_minimum_numpy() -> None:
    check_rules_ledger(NumpyBackend())


def check_rules_ledger(backend: Backend) -> None:
    """The ledger book with env.decision_interval=2 and env.min_hold=3: the actions taken, the
    fills (c2 = -fee x lot per fill) and the closes' PnL (c0) by hand; the trade stats after."""
    rules = ["env.decision_interval=2", "env.min_hold=3"]
    env = make_env(backend, ledger_book(), [*LEDGER_OVERRIDES[:-2], "reward=stride6", *rules])
    env.reset(np.array([1]))
    a = env.arrays
    for t, asked, taken, fills, pnl in RULES_LEDGER:
        env.step(backend.upload(np.array([asked], np.int32)))
        got = {k: backend.download(a[k]) for k in ("eff_action", "rc", "pos")}
        assert got["eff_action"].tolist() == [taken], t
        assert got["pos"].tolist() == [{FLAT: 0, LONG: 1, SHORT: -1}[taken]], t
        assert (got["rc"][2], got["rc"][0]) == (np.float32(-1.0 * fills), np.float32(pnl)), t
    stats = env.harvest_trade_stats()
    assert (stats.trades, stats.realised, stats.duration) == (2, -30.0, 6.0)  # held 4 + 2


def test_decisions_keep_the_source_series_phase_in_a_slice() -> None:
    """A book sliced from tick 1 of its series decides at its odd ticks (the series' even
    ones): the training and held-out parts of one series decide at the same ticks."""
    whole = ledger_book()
    part = whole.slice(1, whole.T)
    assert part.start == 1
    env = make_env(NumpyBackend(), part, [*LEDGER_OVERRIDES[:-2], "reward=stride6",
                                          "env.decision_interval=2"])  # fmt: skip
    env.reset(np.array([1]))  # the slice's tick 1: the series' tick 2, a decision
    taken = []
    for asked in (LONG, FLAT, FLAT):  # at the series' ticks 2, 3, 4
        env.step(env.backend.upload(np.array([asked], np.int32)))
        taken.append(int(env.backend.download(env.arrays["eff_action"])[0]))
    assert taken == [LONG, LONG, FLAT]


def test_the_trading_rules_are_checked_by_name() -> None:
    for key, bad in (("decision_interval", 0), ("min_hold", -1), ("decision_interval", 1.5)):
        cfg, _ = compose_train([f"env.{key}={bad}"])
        with pytest.raises(ConfigError, match=f"env.{key}"):
            EnvConfig.from_cfg(cfg.env)


def test_a_session_gap_forces_the_close_at_the_last_tick_before_it_numpy() -> None:
    check_session_ledger(NumpyBackend())


def test_a_weekend_in_a_quotes_file_forces_the_close_before_it(tmp_path: Path) -> None:
    """The ledger as a CSV of minute quotes, Friday 21:53 to 22:00 then Sunday 22:00 to 22:03:
    session_gap=1h breaks it at tick 8, and the env closes before the weekend."""
    book = ledger_book()
    times = [*pd.date_range("2024-01-05 21:53", periods=8, freq="min"),
             *pd.date_range("2024-01-07 22:00", periods=4, freq="min")]  # fmt: skip
    frame = pd.DataFrame({"timestamp": [t.isoformat() for t in times]})
    for side in ("bid_px", "ask_px", "bid_sz", "ask_sz"):
        for level in range(2):
            frame[f"{side}_{level}"] = getattr(book, side)[:, level]
    frame.to_csv(tmp_path / "weekend.csv", index=False)
    read = read_quotes_file(tmp_path / "weekend.csv", TICK, 1, session_gap="1h")
    assert read.breaks.tolist() == [8]
    check_session_ledger(NumpyBackend(), read)


def test_sessions_too_short_to_start_in_name_the_gap_to_raise() -> None:
    """Sessions of two ticks: none has a tick to start at (a start needs two more of its
    session); the error says a larger market.session_gap merges them."""
    book = ledger_book()
    paired = Book(book.bid_px, book.ask_px, book.bid_sz, book.ask_sz, TICK, "paired",
                  breaks=list(range(2, book.T, 2)))  # fmt: skip
    says = (
        r"^paired: 12 ticks leave no tick to start an episode at: .*use a longer series "
        r"\(or a larger market\.session_gap: fewer, longer sessions\)$"
    )
    with pytest.raises(ConfigError, match=says):
        make_env(NumpyBackend(), paired, [*LEDGER_OVERRIDES[:-2], "reward=stride6"])


def check_session_ledger(backend: Backend, book: Book | None = None) -> None:
    """The ledger book with a session break at tick 8 (a weekend between ticks 7 and 8): the
    short opened at t=4 is force-closed at t=6, whose next tick 7 ends the session, as at the end
    of the data; no episode starts at a session's last two ticks."""
    if book is None:
        book = ledger_book()
        book = Book(book.bid_px, book.ask_px, book.bid_sz, book.ask_sz, TICK, "ledger", breaks=[8])
    assert book.session_last().tolist() == [7] * 8 + [11] * 4
    env = make_env(backend, book, [*LEDGER_OVERRIDES[:-2], "reward=stride6"], seed=3)
    assert env.starts.tolist() == [1, 2, 3, 4, 5, 8, 9], "history 1; not 6, 7, 10, 11"
    env.reset(np.array([1]))
    a, lm, rho, kappa = env.arrays, 20.0, 0.375, 0.125
    for action in (LONG, LONG, LONG, SHORT, SHORT):  # t = 1..5: as in the ledger
        env.step(backend.upload(np.array([action], np.int32)))
    assert backend.download(a["cursor"]).tolist() == [6]
    env.step(backend.upload(np.array([SHORT], np.int32)))  # t = 6: SHORT overridden by the close
    got = {k: backend.download(a[k]) for k in a}
    mid = [(b + s) / 2 for b, s in zip(LEDGER_BID, LEDGER_ASK, strict=True)]
    pnl = -(LEDGER_ASK[6] - 100.75) * lm  # short opened at bid 100.75, bought back at ask 100.50
    peak = min(mid[4], mid[5], mid[6])  # the short's best mid: 100.25
    c5 = -rho * (-(peak - 100.75) * lm - pnl)
    want = [pnl, 0.0, -1.0, -kappa * abs(mid[7] - mid[6]) * lm, 0.0, c5]
    assert (pnl, c5) == (5.0, -1.875)
    np.testing.assert_array_equal(got["rc"], np.array(want, np.float32))
    assert (got["done"][0], got["closed_dir"][0], got["eff_action"][0]) == (1.0, -1, FLAT)
    assert got["post_mid"][0] + env.device_book.price_ref == mid[7], "never across the gap"
    restart = env.starts[start_index(3, np.array([0]), np.array([1]), env.starts.size)]
    assert got["episode"].tolist() == [1] and got["pos"].tolist() == [0]
    assert got["cursor"].tolist() == restart.tolist()
    assert env.harvest_trade_stats().trades == 2
    assert got["stored"].tolist() == [1], "a close at a session's end is stored (done 1)"
    # flat through the session's last step: a truncation, not stored (its next state would be
    # the next episode's first)
    env.reset(np.array([5]))
    env.step(backend.upload(np.array([FLAT], np.int32)))  # t = 5
    assert backend.download(a["stored"]).tolist() == [1]
    env.step(backend.upload(np.array([FLAT], np.int32)))  # t = 6, whose next tick ends the session
    got = {k: backend.download(a[k]).tolist() for k in ("done", "stored", "episode", "pos")}
    assert got == {"done": [0.0], "stored": [0], "episode": [1], "pos": [0]}, got


def test_the_first_ticks_of_a_session_never_look_back_across_its_break() -> None:
    """perceive on a book with a break at tick 200 observes ticks 200.. of the later session as
    on the book cut at the break (returns over up to 64 ticks stop at the session's first tick,
    as at the data's start; to float32 rounding, the cut book's prices being offsets from
    another reference), and ticks before the break exactly as on the uncut book."""
    whole = random_book(4)
    split = Book(whole.bid_px, whole.ask_px, whole.bid_sz, whole.ask_sz, 0.01, "split",
                 breaks=[200])  # fmt: skip
    cut = whole.slice(200, whole.T)
    overrides = ["env.num_envs=70", "env.perception.horizons=[1,4,16,64]"]
    be = NumpyBackend()

    def observe(book: Book, ticks: np.ndarray) -> np.ndarray:
        env = make_env(be, book, overrides, seed=3)
        env.reset(ticks)
        h = be.zeros(70 * env.cfg.perception.dim, np.float32)
        env.perceive(h)
        return be.download(h)

    later = np.arange(200, 270, dtype=np.int32)
    np.testing.assert_allclose(observe(split, later), observe(cut, later - 200), atol=1e-5)
    assert not np.allclose(observe(split, later), observe(whole, later), atol=1e-3), "unseen"
    earlier = np.arange(100, 170, dtype=np.int32)
    np.testing.assert_array_equal(observe(split, earlier), observe(whole, earlier))


def random_book(seed: int, T: int = 400, L: int = 3) -> Book:
    gen = np.random.default_rng(seed)
    mid_ticks = 4000 + np.cumsum(gen.integers(-2, 3, size=T))
    spread = gen.integers(1, 4, size=T)
    bid0 = (mid_ticks - spread // 2) * 0.01
    ask0 = bid0 + spread * 0.01
    levels = np.arange(L) * 0.01
    sizes = gen.integers(1, 20, size=(T, L)).astype(float)
    return Book(bid0[:, None] - levels, ask0[:, None] + levels, sizes, sizes[::-1].copy(), 0.01,
                "random")  # fmt: skip


def run_actions(env: Environment, actions: np.ndarray, aux: np.ndarray | None) -> dict:
    be, out = env.backend, {"reward": [], "done": [], "rc": [], "cursor": [], "pos": []}
    aux_dev = None if aux is None else be.upload(aux)
    for step_actions in actions:
        env.step(be.upload(step_actions), aux_dev)
        for key in out:
            out[key].append(be.download(env.arrays[key]))
    return {k: np.stack(v) for k, v in out.items()}


VARIANT = ["env.num_envs=64", "env.perception.horizons=[1,4]", "reward.opp_cost_kappa=0.1",
           "reward.inventory_lambda=0.05", "reward.drawdown_rho=0.2"]  # fmt: skip


def test_stride7_with_beta_sentinel_equals_stride6() -> None:
    book, gen = random_book(1), np.random.default_rng(2)
    actions = gen.integers(0, 3, size=(600, 64)).astype(np.int32)  # crosses episode ends
    aux = gen.random(64).astype(np.float32)
    six = run_actions(make_env(NumpyBackend(), book, [*VARIANT, "reward=stride6"]), actions, aux)
    seven = run_actions(make_env(NumpyBackend(), book, [*VARIANT, "reward=stride7"]), actions, aux)
    for key in ("reward", "done", "cursor", "pos"):
        np.testing.assert_array_equal(six[key], seven[key], err_msg=key)
    rc6, rc7 = six["rc"].reshape(600, 64, 6), seven["rc"].reshape(600, 64, 7)
    np.testing.assert_array_equal(rc6, rc7[..., :6])
    assert not rc7[..., 6].any()
    assert six["done"].sum() > 100, "the random policy must close trades for this to mean much"


def test_null_aux_makes_any_beta_scale_a_no_op() -> None:
    book, gen = random_book(3), np.random.default_rng(4)
    actions = gen.integers(0, 3, size=(300, 64)).astype(np.int32)
    base = run_actions(make_env(NumpyBackend(), book, [*VARIANT, "reward=stride6"]), actions, None)
    active = [*VARIANT, "reward=stride7", "beta=active", "beta.scale=5.0"]
    seven = run_actions(make_env(NumpyBackend(), book, active), actions, None)
    np.testing.assert_array_equal(base["reward"], seven["reward"])
    np.testing.assert_array_equal(
        base["rc"].reshape(300, 64, 6), seven["rc"].reshape(300, 64, 7)[..., :6]
    )
    with_aux = run_actions(make_env(NumpyBackend(), book, active), actions,
                           np.full(64, 0.9, np.float32))  # fmt: skip
    assert with_aux["rc"].reshape(300, 64, 7)[..., 6].max() > 0, "c6 pays with an aux signal"


def test_invalid_actions_are_flat_and_every_step_advances_the_cursor() -> None:
    env = make_env(NumpyBackend(), random_book(5), [*VARIANT, "env.num_envs=4"])
    env.reset(np.array([10, 20, 30, 40]))
    env.step(env.backend.upload(np.array([7, -1, LONG, SHORT], np.int32)))
    assert env.backend.download(env.arrays["pos"]).tolist() == [0, 0, 1, -1]
    assert env.backend.download(env.arrays["cursor"]).tolist() == [11, 21, 31, 41]


def test_reset_rejects_ticks_outside_the_book() -> None:
    env = make_env(NumpyBackend(), random_book(5), [*VARIANT, "env.num_envs=2"])
    with pytest.raises(ConfigError, match=r"cursors must be \[2\] ticks in 0..398"):
        env.reset(np.array([0, 399]))
