"""The calendar backtest (pipeline/evaluation/backtest.py) and the market's calendar
(market/calendar.py), checked by hand on small dated books."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from alpha_rl.market.book import Book
from alpha_rl.market.calendar import ASSUMED_DAYS, calendar_of, times
from alpha_rl.market.files import read_quotes_file
from alpha_rl.pipeline.evaluation.backtest import (
    Segment,
    annualised,
    backtest,
    claim,
    round_path,
    rounds,
    segments,
)
from alpha_rl.pipeline.evaluation.ledger import Costs, PricedPath

# 12 hourly quotes in two sessions (a gap of a day after tick 6): mids by hand, spread 2 (a
# fill's half spread is 1), fee 0.5 a fill, lot x multiplier 1
MIDS = [100, 101, 102, 104, 103, 105, 106, 110, 111, 109, 112, 113]
COSTS = Costs(lot=1.0, multiplier=1.0, fee_per_lot=0.5)


def dated_book(tmp_path: Path) -> Book:
    """The 12 quotes as a quotes file with times, read as a run reads it (a session ends where
    the next tick is more than 2 hours away)."""
    stamps = list(pd.date_range("2024-03-04 09:00", periods=7, freq="h"))
    stamps += list(pd.date_range("2024-03-05 09:00", periods=5, freq="h"))
    frame = pd.DataFrame({"timestamp": [s.isoformat() for s in stamps],
                          "bid_px_0": [m - 1 for m in MIDS],
                          "ask_px_0": [m + 1 for m in MIDS]})  # fmt: skip
    frame.to_csv(tmp_path / "quotes.csv", index=False)
    return read_quotes_file(tmp_path / "quotes.csv", tick_size=1.0, min_rows=2,
                            default_size=1.0, session_gap="2h")  # fmt: skip


def test_the_span_is_cut_into_segments_that_trade_each_tick_once(tmp_path: Path) -> None:
    """From tick 2 on: session one's steps are ticks 2..5 (tick 6, its last, is never stepped
    from: the step at 5 is the forced close), session two's 7..10; with two envs one segment
    each, with three at most ceil(8 / 3) = 3 steps a segment and none crossing the gap."""
    book = dated_book(tmp_path)
    assert book.breaks.tolist() == [7] and book.times
    last = book.session_last()
    assert segments(last, 2, 2) == [Segment(2, 4), Segment(7, 4)]
    three = segments(last, 2, 3)
    assert three == [Segment(2, 3), Segment(5, 1), Segment(7, 3), Segment(10, 1)]
    assert rounds(three, 3) == [three[:3], three[3:]]
    stepped = [t for seg in three for t in range(seg.start, seg.start + seg.steps)]
    assert stepped == [2, 3, 4, 5, 7, 8, 9, 10]  # each tick once, in time order
    path = round_path(rounds(three, 3)[0], last, 3)
    assert path.ticks[:, 0].tolist() == [2, 3, 4, 5]  # it stands at 5 after its last step
    assert path.ticks[:, 1].tolist() == [5, 6, 6, 6] and path.last[:, 1].tolist() == [1, 0, 0]
    with pytest.raises(ValueError, match="no tick from 11 on"):
        segments(last, 11, 2)


def test_the_stitched_series_and_its_dates_by_hand(tmp_path: Path) -> None:
    """Two envs, one segment each. Env 0 at ticks 2..5 holds +1, +1, -1 and is forced flat at
    5; env 1 at 7..10 holds 0, +1, +1, flat at 10. Each step's net, by hand:
      tick 2: open (half spread 1 + fee 0.5), +1 x (104 - 102)          =  0.5
      tick 3: +1 x (103 - 104)                                          = -1
      tick 4: flip (2 fills: 2 + 1), -1 x (105 - 103)                   = -5
      tick 5: close the short (1 + 0.5)                                 = -1.5
      tick 7: flat                                                      =  0
      tick 8: open (1.5), +1 x (109 - 111)                              = -3.5
      tick 9: +1 x (112 - 109)                                          =  3
      tick 10: close (1.5)                                              = -1.5
    each dated by the tick its move ends at (ticks 3..6 and 8..11)."""
    book = dated_book(tmp_path)
    last = book.session_last()
    plan = rounds(segments(last, 2, 2), 2)
    priced = [PricedPath.of(book, COSTS, round_path(g, last, 2)) for g in plan]
    targets = [np.array([[1, 0], [1, 1], [-1, 1], [0, 0]])]
    walked = backtest(priced, plan, targets, times(book), calendar_of(book), 100.0, 2, seed=0)
    a = walked.agent
    assert a.ticks.tolist() == [2, 3, 4, 5, 7, 8, 9, 10]
    assert a.net.tolist() == [0.5, -1.0, -5.0, -1.5, 0.0, -3.5, 3.0, -1.5]
    assert a.exposed.tolist() == [1, 1, 1, 0, 0, 1, 1, 0]
    assert (a.fills, a.round_trips, a.wins) == (6.0, 3.0, 0.0)  # each lost its spread and more
    hours = [f"2024-03-04 {h:02d}:00" for h in (12, 13, 14, 15)]
    hours += [f"2024-03-05 {h:02d}:00" for h in (10, 11, 12, 13)]
    assert walked.dates.tz_localize(None).strftime("%Y-%m-%d %H:%M").tolist() == hours
    daily = walked.returns(a)  # net a day on the capital of 100
    assert daily.index.strftime("%Y-%m-%d").tolist() == ["2024-03-04", "2024-03-05"]
    assert daily.tolist() == [pytest.approx(-0.07), pytest.approx(-0.02)]
    # buy-and-hold on the very same ticks: +1 where it may, flat at each forced close
    hold = walked.baselines["buy_and_hold"]
    assert hold.net.tolist() == [0.5, -1.0, 2.0, -1.5, -0.5, -2.0, 3.0, -1.5]
    m = walked.metrics()
    assert m["backtest/pnl"] == -9.0 and m["backtest/steps"] == 8.0
    assert m["backtest/baseline/buy_and_hold/margin"] == -8.0
    assert m["backtest/exposure"] == 5 / 8 and m["backtest/turnover"] == 6 / 8 * 1000


def test_a_segment_that_ends_inside_a_session_closes_at_the_next_touch(tmp_path: Path) -> None:
    """Three envs: the first segment is ticks 2..4 and stands at 5 after them; the short it
    holds is closed at tick 5's touch (1 + 0.5) in its last step: -5 - 1.5 = -6.5. The third
    (ticks 7..9) closes its long at tick 10's touch: 3 - 1.5 = 1.5; the second and the fourth
    are a session's forced close alone."""
    book = dated_book(tmp_path)
    last = book.session_last()
    plan = rounds(segments(last, 2, 3), 3)
    priced = [PricedPath.of(book, COSTS, round_path(g, last, 3)) for g in plan]
    targets = [np.array([[1, 0, 0], [1, 0, 1], [-1, 0, 1]]), np.array([[0, 0, 0]])]
    walked = backtest(priced, plan, targets, times(book), calendar_of(book), 100.0, 2, seed=0)
    assert walked.agent.ticks.tolist() == [2, 3, 4, 5, 7, 8, 9, 10]
    assert walked.agent.net.tolist() == [0.5, -1.0, -6.5, 0.0, 0.0, -3.5, 1.5, 0.0]


def test_the_calendar_of_daily_hourly_and_one_second_data() -> None:
    """Ticks a year, measured from the timestamps: business days over two years (261 of
    365.25 days a year); hourly FX quoted Sunday 22:00 to Friday 21:00 UTC over 8 weeks (960
    ticks over 55 calendar days: 6,375 a year); one 6.5-hour session of 1-second ticks (too
    short to measure a year: 252 trading days assumed, 23,400 x 252 a year)."""

    def book(index: pd.DatetimeIndex) -> Book:
        mid = np.full((index.size, 1), 100.0)
        return Book(mid - 1, mid + 1, mid * 0 + 1, mid * 0 + 1, 1.0, "by hand",
                    timestamps=index.as_unit("ns").asi8, times=True)  # fmt: skip

    days = pd.bdate_range("2021-01-01", "2022-12-30", tz="UTC")
    daily = calendar_of(book(days))
    assert days.size == 521 and daily.ticks_per_day == 1.0 and daily.measured
    assert daily.periods_per_year == pytest.approx(521 / 729 * 365.25)  # 261.0
    week = [pd.Timestamp("2024-01-07 22:00", tz="UTC") + pd.Timedelta(hours=h)
            for h in range(120)]  # fmt: skip
    fx = pd.DatetimeIndex([t + pd.Timedelta(weeks=w) for w in range(8) for t in week])
    hourly = calendar_of(book(fx))
    assert hourly.ticks_per_day == 960 / 48 and hourly.measured  # 6 UTC dates a week
    assert hourly.periods_per_year == pytest.approx(960 / 55 * 365.25)  # 6,375
    session = pd.date_range("2024-01-08 14:30", periods=23_400, freq="s", tz="UTC")
    second = calendar_of(book(session))
    assert not second.measured and second.days_per_year == ASSUMED_DAYS
    assert second.periods_per_year == 23_400 * 252
    assert "assumed" in second.describe() and "measured" in daily.describe()
    plain = Book(*(np.ones((3, 1)) * v for v in (99, 101, 1, 1)), 1.0, "numbers",
                 timestamps=np.arange(3), times=False)  # fmt: skip
    assert calendar_of(plain) is None and times(plain) is None


def test_annual_figures_are_the_total_return_over_the_years() -> None:
    """Simple, not compounded: 504 days of +0.1% are 0.504 over 2 years of 252 days."""
    figures = annualised(np.full(504, 0.001), 252.0)
    assert figures["total_return"] == pytest.approx(0.504)
    assert figures["years"] == 2.0 and figures["annual_return"] == pytest.approx(0.252)


def test_a_claim_is_made_only_where_the_interval_excludes_0() -> None:
    assert claim(5.0, 1.0, 9.0).endswith(": shown above")
    assert claim(-5.0, -9.0, -1.0).endswith(": shown below")
    assert "not shown either way" in claim(5.0, -1.0, 9.0)


def walk_backtest(seed: int, ticks: int = 500) -> object:
    """A rule that follows the last move, backtested on a random walk (steps drawn and
    de-meaned, as a real series' returns shuffled: nothing to predict), its daily returns on
    a notional of 50,000."""
    steps = np.random.default_rng(seed).normal(0.0, 1.0, ticks)
    mid = 1000.0 + np.cumsum(steps - steps.mean())
    index = pd.bdate_range("2015-01-01", periods=mid.size, tz="UTC").as_unit("ns")
    one = np.ones((mid.size, 1))
    book = Book((mid - 0.25)[:, None], (mid + 0.25)[:, None], one, one, 0.01, "a random walk",
                timestamps=index.asi8, times=True)  # fmt: skip
    last, costs = book.session_last(), Costs(1.0, 50.0, 2.5)
    plan = rounds(segments(last, 10, 16), 16)
    paths = [round_path(g, last, 16) for g in plan]
    priced = [PricedPath.of(book, costs, p) for p in paths]
    follow = [np.sign(mid[p.ticks[:-1]] - mid[p.ticks[:-1] - 1]).astype(np.int64) for p in paths]
    return backtest(priced, plan, follow, times(book), calendar_of(book), 50_000.0, 20, seed)


def test_no_win_is_claimed_on_a_random_walk_but_at_the_interval_s_own_rate() -> None:
    """On 40 random walks the rule's net is above some baseline's in many (a point "win"), but
    a margin is "shown above" about as rarely as a 95% interval misses upward on noise (2.5%
    of the 160 margins, 4 expected; 12 or more would happen by chance less than once in
    1,000), and no line says "beat"."""
    points = claims = 0
    for seed in range(40):
        walked = walk_backtest(seed)
        net = float(walked.agent.net.sum())
        points += any(net > float(t.net.sum()) for t in walked.baselines.values())
        text = "\n".join(walked.lines("USD"))
        assert "beat" not in text
        claims += text.count(": shown above")
    assert points >= 10 and claims < 12, (points, claims)  # here: 17 point "wins", 0 claims


@pytest.mark.slow
def test_a_run_on_the_sp500_preset_reports_its_backtest_by_date(tmp_path: Path) -> None:
    """market=sp500_daily: the tear sheet's dates all lie in the held-out span (2016-05 ..
    2022-12), and its total return and annual figures read back as the run's backtest/*."""
    import json

    import mlflow

    from tests.test_train import _train

    proc = _train(tmp_path, "backend=numpy", "market=sp500_daily", "eval.tearsheet=true",
                  "eval.backtest.envs=8")  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "held-out backtest, 2016-" in out and "252 trading days a year, measured" in out
    html = (tmp_path / "run" / "tearsheet.html").read_text()
    generated = re.findall(r"on (\d{4}-\d{2}-\d{2})", html)  # QuantStats' own date of writing
    dates = set(re.findall(r"\b(\d{4}-\d{2}-\d{2})\b", html)) - set(generated)
    named = re.findall(r"\b\d{1,2} [A-Z][a-z]{2}, (\d{4})\b", html)  # "24 Aug, 2016"
    assert dates and all("2016-05-23" <= d <= "2022-12-28" for d in dates), sorted(dates)[:3]
    assert named and all("2016" <= y <= "2022" for y in named)
    run_id = json.loads((tmp_path / "run" / "tracking.json").read_text())["run_id"]
    run = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db").get_run(run_id)
    m = run.data.metrics
    assert m["backtest/annual_return"] * m["backtest/years"] == pytest.approx(
        m["backtest/total_return"]
    )
    assert m["backtest/years"] == pytest.approx(m["backtest/steps"] / m["backtest/days_per_year"],
                                                rel=0.01)  # fmt: skip
    total = re.search(r"Total Return</td><td>[-\d.]+%</td><td>([-\d.]+)%", html)
    assert total and float(total.group(1)) == pytest.approx(
        100 * m["backtest/total_return"], abs=0.01
    )
    assert run.data.tags["backtest.span"].startswith("2016-")


def _slice_run(tmp_path: Path, backend: str, *more: str) -> dict[str, float]:
    """A run on the S&P 500's closes of 2007-2012 (debug=tiny), its backtest/* metrics."""
    import json

    import mlflow

    from alpha_rl.market.files import package_file
    from tests.test_train import _train

    tmp_path.mkdir(exist_ok=True)
    raw = pd.read_csv(package_file("package:skfolio/datasets/data/sp500_index.csv.gz"))
    raw[(raw["Date"] >= "2007-01-01") & (raw["Date"] < "2013-01-01")].to_csv(
        tmp_path / "slice.csv", index=False
    )
    proc = _train(tmp_path, f"backend={backend}", "market=sp500_daily",
                  f"market.path={tmp_path}/slice.csv", *more)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "held-out backtest, 2011-" in proc.stdout + proc.stderr
    run_id = json.loads((tmp_path / "run" / "tracking.json").read_text())["run_id"]
    store = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    return {k: v for k, v in store.get_run(run_id).data.metrics.items() if "backtest/" in k}


@pytest.mark.gpu
def test_the_walk_on_the_gpu_trades_the_planned_ticks(tmp_path: Path, built_cubins: Path) -> None:
    """The cuda walk steps through the same segments as the numpy one: the same steps, and
    the baselines' figures (which depend on the ticks walked alone) equal to the bit; the agent's
    own may differ with its network's float rounding."""
    cuda = _slice_run(tmp_path / "cuda", "cuda", f"backend.cubin_dir={built_cubins}")
    host = _slice_run(tmp_path / "numpy", "numpy")
    assert cuda["backtest/steps"] == host["backtest/steps"] > 200
    assert cuda["backtest/segments"] == host["backtest/segments"] == 16
    for name in ("flat", "buy_and_hold", "sell_and_hold"):
        for figure in ("pnl", "pnl_gross", "cost_spread", "max_drawdown", "sharpe"):
            key = f"backtest/baseline/{name}/{figure}"
            assert cuda.get(key) == host.get(key), key
    assert 0.0 <= cuda["backtest/exposure"] <= 1.0 and cuda["backtest/turnover"] >= 0.0


def test_days_are_the_market_s_own_in_its_timezone(tmp_path: Path) -> None:
    """Daily closes dated in Tokyo (market.timezone) keep their weekdays: Monday 2024-03-04 is
    2024-03-03 15:00 UTC, a Sunday, but a day of the market's is its own date."""
    days = pd.bdate_range("2024-03-04", periods=60)
    mid = 100.0 + np.arange(days.size)
    frame = pd.DataFrame({"timestamp": days.strftime("%Y-%m-%d"), "bid_px_0": mid - 1,
                          "ask_px_0": mid + 1})  # fmt: skip
    frame.to_csv(tmp_path / "tokyo.csv", index=False)
    book = read_quotes_file(tmp_path / "tokyo.csv", tick_size=1.0, min_rows=2,
                            default_size=1.0, timezone="Asia/Tokyo")  # fmt: skip
    index = times(book)
    assert index[0].strftime("%Y-%m-%d %a") == "2024-03-04 Mon"
    assert set(index.strftime("%a")) == {"Mon", "Tue", "Wed", "Thu", "Fri"}
    calendar = calendar_of(book)
    assert calendar.ticks_per_day == 1.0 and calendar.describe().endswith("2024-05-24 JST)")
