"""Files of one price per row (closes) quoted at market.spread, files an installed package ships
(market.path=package:...), and the real preset on a slice of its series (market=sp500_daily:
the S&P 500 index's daily closes that skfolio ships)."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from alpha_rl.errors import MarketDataError
from alpha_rl.market import read_quotes_file
from alpha_rl.market.files import package_file
from alpha_rl.market.folds import validation_config
from alpha_rl.market.load import load_market
from alpha_rl.pipeline.evaluation.ledger import Costs, hold, play, tick_path
from tests.helpers import FX_LIKE, compose_train, write_fx_like

SP500 = "package:skfolio/datasets/data/sp500_index.csv.gz"


def closes(path: Path, n: int = 1200, name: str = "Close") -> Path:
    """A daily close series of `n` rows (cents), Date and `name` columns."""
    days = pd.bdate_range("2020-01-01", periods=n)
    price = np.round(3000 + np.cumsum(np.sin(np.arange(n) / 7.0)), 2)
    pd.DataFrame({"Date": days.strftime("%Y-%m-%d"), name: price}).to_csv(path, index=False)
    return path


def test_a_close_is_quoted_at_the_spread(tmp_path: Path) -> None:
    file = closes(tmp_path / "closes.csv")
    book = read_quotes_file(file, 0.01, 1000, columns={"Date": "timestamp", "Close": "price"},
                            default_size=1.0, spread=0.5)  # fmt: skip
    price = pd.read_csv(file)["Close"].to_numpy()
    np.testing.assert_allclose(book.bid_px[:, 0], price - 0.25)
    np.testing.assert_allclose(book.ask_px[:, 0], price + 0.25)
    np.testing.assert_allclose(book.mid, price)
    assert book.L == 1 and book.timestamps is not None


def test_a_gzipped_csv_reads_like_the_plain_one(tmp_path: Path) -> None:
    plain = closes(tmp_path / "closes.csv")
    packed = tmp_path / "closes.csv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    args = dict(columns={"Close": "price"}, default_size=1.0, spread=0.5)
    a, b = read_quotes_file(plain, 0.01, 1000, **args), read_quotes_file(packed, 0.01, 1000, **args)
    np.testing.assert_array_equal(a.bid_px, b.bid_px)


@pytest.mark.parametrize(
    ("columns", "spread", "says"),
    [
        ({"Date": "timestamp"}, 0.5, "does not have"),  # no price column to quote
        ({"Close": "price"}, None, "set market.spread"),  # a price and no spread
        ({"Close": "price", "Open": "bid_px_0"}, 0.5, "take one or the other"),  # both
    ],
)
def test_price_files_refused_with_the_fix(tmp_path: Path, columns, spread, says) -> None:
    file = closes(tmp_path / "closes.csv")
    frame = pd.read_csv(file)
    frame.assign(Open=frame["Close"]).to_csv(file, index=False)
    with pytest.raises(MarketDataError, match=says) as err:
        read_quotes_file(file, 0.01, 1000, columns=columns, default_size=1.0, spread=spread)
    assert str(file) in str(err.value)


def test_a_price_that_is_not_a_number_is_named_with_its_column(tmp_path: Path) -> None:
    file = closes(tmp_path / "closes.csv")
    frame = pd.read_csv(file, dtype={"Close": str})
    frame.loc[50, "Close"] = "abc"
    frame.to_csv(file, index=False)
    with pytest.raises(MarketDataError, match=r"row 51 \(line 52\), column 'Close' \(mapped "
                       r"to price\): 'abc' is not a number"):  # fmt: skip
        read_quotes_file(file, 0.01, 1000, columns={"Close": "price"}, default_size=1.0,
                         spread=0.5)  # fmt: skip


def test_a_spread_must_be_positive() -> None:
    cfg, _ = compose_train(["market=file", "market.path=x.csv", "market.spread=-1"])
    with pytest.raises(MarketDataError, match=r"market.spread=-1.0: must be > 0"):
        load_market(cfg.market, 0, validation_config(cfg, 64))


def test_a_package_file_is_found_without_importing_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "quotes_pkg_for_test"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('imported')\n")
    closes(pkg / "data" / "closes.csv")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = package_file("package:quotes_pkg_for_test/data/closes.csv")
    assert found == pkg / "data" / "closes.csv"
    assert "quotes_pkg_for_test" not in sys.modules
    with pytest.raises(MarketDataError, match="'no_such_pkg_xyz' is not installed; install it"):
        package_file("package:no_such_pkg_xyz/data/x.csv")
    with pytest.raises(MarketDataError, match="write package:<package>/<file in it>"):
        package_file("package:quotes_pkg_for_test")


def test_the_sp500_preset_reads_the_real_closes() -> None:
    """market=sp500_daily: 8,313 closes 1990-01-02 .. 2022-12-28, quoted 0.25 either side, an
    E-mini's money (50 USD a point, 2.5 USD a fill)."""
    cfg, choices = compose_train(["market=sp500_daily"])
    assert choices["market"] == "sp500_daily"
    assert (cfg.env.multiplier, cfg.env.fee_per_lot, cfg.env.lot) == (50.0, 2.5, 1.0)
    book = load_market(cfg.market, 0, validation_config(cfg, 64)).book
    assert book.T == 8313
    assert book.mid[0] == pytest.approx(359.69) and book.mid[-1] == pytest.approx(3783.22)
    np.testing.assert_allclose(book.ask_px[:, 0] - book.bid_px[:, 0], 0.5)


def test_buy_and_hold_on_a_slice_of_the_real_closes() -> None:
    """Ten days long from the close of 2008-09-12 on the real series, by hand: the index moved
    from its close then to ten days later; the spread (0.25 a side) and two fees are paid."""
    cfg, _ = compose_train(["market=sp500_daily"])
    book = load_market(cfg.market, 0, validation_config(cfg, 64)).book
    raw = pd.read_csv(package_file(SP500))
    t = int(np.flatnonzero(raw["Date"] == "2008-09-12")[0])
    path = tick_path(book.session_last(), np.array([t]), 0, np.array([t]), 10)
    costs = Costs(cfg.env.lot, cfg.env.multiplier, cfg.env.fee_per_lot)
    stats = play(book, costs, path, 5, hold(1))
    move = raw["SP500"].iloc[t + 10] - raw["SP500"].iloc[t]
    assert stats.pnl_gross == pytest.approx(move * 50.0)
    assert stats.cost_spread == pytest.approx(2 * 0.25 * 50.0)
    assert stats.cost_fees == 2 * 2.5
    assert stats.pnl == pytest.approx(move * 50.0 - 25.0 - 5.0)
    short = play(book, costs, path, 5, hold(-1))
    assert short.pnl == pytest.approx(-move * 50.0 - 30.0)


def test_an_fx_like_round_trip_costs_eleven_dollars(tmp_path: Path) -> None:
    """The FX-like export (tests.helpers.write_fx_like: a one-pip spread, 100,000 a lot, 0.5 USD
    a fill) read as a user would: a round trip pays 10 USD of spread and 1 USD of fees, and the
    weekend gaps end sessions, where a hold is closed and opened again."""
    file = write_fx_like(tmp_path / "eurusd.csv", hours=3000)
    cfg, _ = compose_train([*FX_LIKE, f"market.path={file}"])
    book = load_market(cfg.market, 0, validation_config(cfg, 64)).book
    assert book.breaks.size > 0, "weekends are session breaks"
    costs = Costs(cfg.env.lot, cfg.env.multiplier, cfg.env.fee_per_lot)
    t = 100
    path = tick_path(book.session_last(), np.array([t]), 0, np.array([t]), 5)
    assert not path.last.any(), "five hours inside one session"
    stats = play(book, costs, path, 5, hold(1))
    assert stats.cost_spread + stats.cost_fees == pytest.approx(11.0)
    assert stats.pnl_gross == pytest.approx((book.mid[t + 5] - book.mid[t]) * 100000)
    week = tick_path(book.session_last(), np.array([t]), 0, np.array([t]), 200)
    held = play(book, costs, week, 20, hold(1))
    closes = int(week.last.sum())
    assert closes >= 1 and held.round_trips == closes + 1
    assert held.cost_spread + held.cost_fees == pytest.approx(11.0 * (closes + 1))
