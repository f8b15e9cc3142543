"""A market's calendar: how many of its ticks make a year, measured from its own timestamps.

A year's ticks are the ticks of a trading day (a date with at least one tick, in the market's
`market.timezone`, UTC without one) times the trading days of a year, both measured over the
whole source series:

    ticks_per_day = T / dates              days_per_year = dates / span_days x 365.25

where `span_days` counts the calendar days from the first date to the last, both included. Daily
closes give about 252 a year; hourly FX quoted 24 hours x 5 days about 6,260 (its Sunday evening
is a UTC date of its own: 6 dates a week of 20 hours each); 1-second ticks of 6.5-hour sessions
23,400 a day. A series spanning fewer than MIN_SPAN_DAYS days cannot show a year's trading days:
ASSUMED_DAYS (an exchange's year) is taken instead, and said. Timestamps that are plain numbers
(the file's own units) and the synthetic market have no calendar: their figures stay per 1,000
steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from alpha_rl.market.book import Book

YEAR_DAYS = 365.25
MIN_SPAN_DAYS = 28
ASSUMED_DAYS = 252.0


@dataclass(frozen=True)
class Calendar:
    """The trading calendar a series shows (module docstring)."""

    ticks_per_day: float
    days_per_year: float
    measured: bool  # days_per_year measured (False: ASSUMED_DAYS, the span being too short)
    first: pd.Timestamp  # the series' first and last times (in the market's zone)
    last: pd.Timestamp
    ticks: int

    @property
    def periods_per_year(self) -> float:
        """Ticks a year: ticks_per_day x days_per_year."""
        return self.ticks_per_day * self.days_per_year

    def describe(self) -> str:
        """`252 ticks a year (1 a trading day x 252 trading days a year, measured; over 8,313
        ticks, 1990-01-02 .. 2022-12-28 UTC)`."""
        how = ("measured" if self.measured else
               f"assumed: the series spans under {MIN_SPAN_DAYS} days")  # fmt: skip
        return (
            f"{self.periods_per_year:,.4g} ticks a year ({self.ticks_per_day:,.4g} a trading day "
            f"x {self.days_per_year:.4g} trading days a year, {how}; over {self.ticks:,} ticks, "
            f"{day(self.first)} .. {day(self.last)} {self.first.tzname()})"
        )


def day(stamp: pd.Timestamp) -> str:
    """`2016-05-23`."""
    return stamp.strftime("%Y-%m-%d")


def times(book: Book) -> pd.DatetimeIndex | None:
    """The book's ticks as times in its zone (`market.timezone`, UTC without one), so that a
    day is the market's own; None when it has none (no timestamps, or plain numbers)."""
    if book.timestamps is None or not book.times:
        return None
    index = pd.DatetimeIndex(np.asarray(book.timestamps, np.int64), tz="UTC")
    return index if book.zone is None else index.tz_convert(book.zone)


def calendar_of(book: Book) -> Calendar | None:
    """The calendar `book`'s timestamps show; None when they are not times."""
    index = times(book)
    if index is None:
        return None
    dates = index.normalize()  # midnight of each tick's day, in the market's zone
    count = int(dates.unique().size)
    span = (dates[-1].date() - dates[0].date()).days + 1
    measured = span >= MIN_SPAN_DAYS
    per_year = count / span * YEAR_DAYS if measured else ASSUMED_DAYS
    return Calendar(book.T / count, per_year, measured, index[0], index[-1], book.T)
