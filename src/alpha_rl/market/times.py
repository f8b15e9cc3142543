"""Timestamps of a quotes file and the trading sessions they delimit.

Text times are read with `market.timestamp_format` (a strptime / pandas `format=` string) or as
ISO-8601; naive times are in `market.timezone` (null: UTC), times with an offset keep it; all
become int64 nanoseconds since the epoch, UTC. Plain numbers stay as they are (the file's units).
`market.session_gap` ends a session where consecutive ticks are further apart than it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pandas as pd
from pandas.api.types import (
    is_datetime64_any_dtype,
    is_integer_dtype,
    is_numeric_dtype,
)

from alpha_rl.errors import MarketDataError
from alpha_rl.kernels.experience import MIN_EPISODE_TICKS
from alpha_rl.market.checks import booleans, show

log = logging.getLogger(__name__)

PANDAS_FORMATS = ("ISO8601", "mixed")  # the named formats pd.to_datetime accepts besides %-codes
_MIXED_ZONES = "Mixed timezones"  # pandas' ValueError when a column mixes offsets

# plain-number stamps: consecutive ones this many times apart, both >= UNIT_FLOOR, change units
# (an epoch clock in seconds x 1000 is one in milliseconds; counters and times since an open
# start below the floor)
UNIT_JUMP = 500.0
UNIT_FLOOR = 1e6
EPOCH_UNITS = (("seconds", 1.0), ("milliseconds", 1e3), ("microseconds", 1e6),
               ("nanoseconds", 1e9))  # fmt: skip
EPOCH_YEARS = (1990, 2100)  # the years an epoch number is taken to name a unit in
YEAR_S = 365.25 * 86_400

Gap = pd.Timedelta | float  # a session gap: a duration (times) or a number (plain-number stamps)

# the text time forms a market.timestamp_format is proposed from: dates day-first, month-first
# (. / - between the fields, 4- and 2-digit years), year-first and compact, each with the times
# exports write. The first that reads a column is proposed: day-first before month-first, and
# compact seconds before compact seconds with a fraction (%S%f reads '07' as 0.7 s)
_DATES = (
    *(f"{a}{sep}{b}{sep}{year}" for year in ("%Y", "%y") for sep in "./-"
      for a, b in (("%d", "%m"), ("%m", "%d"))),
    "%Y.%m.%d", "%Y/%m/%d", "%Y-%m-%d", "%Y%m%d",
)  # fmt: skip
_TIMES = (" %H:%M:%S.%f", " %H:%M:%S", " %H:%M", " %I:%M:%S %p", " %I:%M %p", "")
FORMATS = (
    *(date + time for date in _DATES for time in _TIMES),
    "%Y%m%d %H%M%S", "%Y%m%d %H%M%S%f", "%Y%m%d-%H%M%S", "%Y%m%d-%H:%M:%S.%f",
)  # fmt: skip
EXAMPLE = ("%d.%m.%Y %H:%M:%S.%f", "01.01.2017 22:00:00.000")  # a format and a time it reads


@dataclass(frozen=True)
class Stamps:
    """A timestamp column read: values, the cells that cannot be used, and what the values are."""

    values: np.ndarray  # [T] int64 ns since the epoch, UTC (times) or int64/float64 (numbers)
    unreadable: np.ndarray  # [T] bool: missing, or not a number / a time of the expected form
    dst: np.ndarray  # [T] bool: a naive time that is ambiguous or absent in market.timezone
    times: bool  # True: `values` are ns since the epoch; False: the file's own numbers


def key_error(key: str, value: object, what: str) -> MarketDataError:
    """The error of a bad `market.<key>` value, saying where to fix it."""
    return MarketDataError(
        f"market.{key}={value!r}: {what}; fix it in conf/market/file.yaml or override "
        f"market.{key}=..."
    )


def check_format(fmt: str | None) -> None:
    """Refuse a market.timestamp_format that is neither null, %-codes pandas can use nor a
    pandas name (ISO8601, mixed)."""
    if fmt is None:
        return
    what = (
        f"expected a strptime format such as {EXAMPLE[0]!r} (day-first exports), "
        f"one of {', '.join(PANDAS_FORMATS)}, or null (numbers or ISO-8601 times)"
    )
    if "%" not in fmt and fmt not in PANDAS_FORMATS:
        raise key_error("timestamp_format", fmt, what)
    try:
        pd.to_datetime(pd.Series(["", None]), errors="coerce", format=fmt)
    except (ValueError, re.error) as exc:
        raise key_error("timestamp_format", fmt, f"pandas cannot use it ({exc}); {what}") from exc


def propose_format(
    text: pd.Series, r: int, fmt: str | None, read: np.ndarray, row: Callable[[int], str]
) -> str:
    """What to set market.timestamp_format to, for cell `r` of [T] text times that `fmt` (None:
    ISO-8601) does not read: a form of FORMATS that reads it and every other cell (day-first and
    month-first both, where the column cannot tell them apart), or what to do when none does;
    `read`: [T] bool, the cells `fmt` did read; `row` names a 0-based row."""
    present = text.notna().to_numpy()
    cells = text.where(~present, text.astype(str))
    fits = [f for f in FORMATS if f != fmt and not _unread(cells.iloc[[r]], f).any()]
    whole = [f for f in fits if not (_unread(cells, f) & present).any()]
    if whole:
        other = _swap_day_month(whole[0])
        if other in whole:
            return (
                f"pass {_override(whole[0])} if the export writes the day first, "
                f"{_override(other)} if the month: both read every time of the column (no day "
                "in it is above 12, so the file cannot tell them apart)"
            )
        return f"pass {_override(whole[0])}, which reads every time of the column"
    if fits:
        first = int((_unread(cells, fits[0]) & present).argmax())
        return (
            f"{_override(fits[0])} would read it, but not {row(first)}: "
            f"{show(text.iloc[first])}: the column mixes forms"
        )
    if (read & present).any():
        return "no common form reads it either"
    return (
        "no common form reads it: pass the strptime format of the column's times, e.g. "
        f"{_override(EXAMPLE[0])} for {EXAMPLE[1]!r}"
    )


def _unread(text: pd.Series, fmt: str) -> np.ndarray:
    """[T] bool: the cells of `text` that `fmt` does not read."""
    return pd.to_datetime(text, errors="coerce", format=fmt).isna().to_numpy()


def _swap_day_month(fmt: str) -> str:
    """`fmt` with %d and %m swapped (day-first <-> month-first)."""
    return re.sub("%[dm]", lambda code: "%m" if code[0] == "%d" else "%d", fmt)


def _override(fmt: str) -> str:
    """The command-line override that sets market.timestamp_format to `fmt`."""
    return f"market.timestamp_format='{fmt}'"


def parse_zone(name: str | None) -> ZoneInfo | None:
    """The IANA zone of market.timezone (None: naive times are UTC), or MarketDataError."""
    if name is None:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise key_error(
            "timezone",
            name,
            "not an IANA time zone name (case matters: e.g. UTC, Europe/Zurich, "
            "America/New_York), or null for UTC",
        ) from exc


def parse_gap(value: str | float | None) -> Gap | None:
    """market.session_gap as a positive Timedelta (a string) or number, or MarketDataError."""
    if value is None:
        return None
    what = (
        "expected a positive duration such as '1h', '30min', '2D' (time-valued timestamps), "
        "a positive number in the file's units (plain-number timestamps), or null"
    )
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            pass
        else:
            raise key_error("session_gap", value, f"a duration needs a unit; {what}")
        try:
            gap = pd.Timedelta(value)
        except ValueError as exc:
            raise key_error("session_gap", value, what) from exc
        if pd.isna(gap) or gap <= pd.Timedelta(0):
            raise key_error("session_gap", value, what)
        return gap
    if isinstance(value, bool) or not np.isfinite(value) or value <= 0:
        raise key_error("session_gap", value, what)
    return float(value)


def read_stamps(source: str, series: pd.Series, fmt: str | None, zone: ZoneInfo | None) -> Stamps:
    """[T] timestamps: with `fmt` every cell is a time of that form; without it, text is numbers
    or ISO-8601 times, whichever its first cell is."""
    none = np.zeros(len(series), dtype=bool)
    if is_datetime64_any_dtype(series):
        return _to_utc(series, zone)
    if fmt is not None:
        text = series.astype(str)  # missing cells stay missing
        return _to_utc(_parse(source, text, fmt, zone), zone)
    flags = booleans(series)
    if flags.any():  # True/False is not a time: those cells are unreadable, the rest numbers
        values = pd.to_numeric(series.where(~flags), errors="coerce").to_numpy(np.float64)
        return Stamps(values, flags | ~np.isfinite(values), none, times=False)
    numeric = is_numeric_dtype(series)
    numbers = series if numeric else pd.to_numeric(series, errors="coerce")
    first = series.first_valid_index()
    if numeric or first is None or not pd.isna(numbers[first]):
        values = numbers.to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isfinite(values)
        if not bad.any() and is_integer_dtype(numbers):
            return Stamps(numbers.to_numpy(dtype=np.int64), bad, none, times=False)
        return Stamps(values, bad, none, times=False)
    return _to_utc(_parse(source, series, "ISO8601", zone), zone)


def unit_changes(stamps: Stamps) -> np.ndarray:
    """[T] bool: plain-number stamps UNIT_JUMP or more times larger or smaller than the stamp
    before, both at least UNIT_FLOOR (seconds then milliseconds, ...): no clock jumps so."""
    changed = np.zeros(stamps.values.size, dtype=bool)
    if stamps.times or stamps.values.size < 2:
        return changed
    values = stamps.values.astype(np.float64)
    before, after = values[:-1], values[1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = after / before
        big = (before >= UNIT_FLOOR) & (after >= UNIT_FLOOR)
        changed[1:] = big & ((ratio >= UNIT_JUMP) | (ratio <= 1 / UNIT_JUMP))
    return changed & ~stamps.unreadable & ~np.roll(stamps.unreadable, 1)


def unit_change(before: float, after: float) -> str:
    """What a unit change from stamp `before` to `after` is (epoch units named where both look
    like epoch times of 1990..2100), and what to do."""
    ratio = after / before
    how = f"{ratio:.4g} times larger" if ratio > 1 else f"{1 / ratio:.4g} times smaller"
    units = (_epoch_unit(before), _epoch_unit(after))
    named = f" (epoch {units[0]} then {units[1]})" if None not in units else ""
    return (
        f"the timestamps change units here, {how}{named}; numbers are kept in the file's own "
        "unit: write every timestamp in one unit"
    )


def _epoch_unit(value: float) -> str | None:
    """'seconds', 'milliseconds', ... when `value` is an epoch time of 1990..2100 in that unit."""
    for unit, per_second in EPOCH_UNITS:
        if EPOCH_YEARS[0] <= value / per_second / YEAR_S + 1970 <= EPOCH_YEARS[1]:
            return unit
    return None


def _parse(source: str, text: pd.Series, fmt: str, zone: ZoneInfo | None) -> pd.Series:
    """Text as datetimes (NaT where it does not match `fmt`); differing offsets (a column that
    crosses a DST change) are each converted to UTC."""
    try:
        return pd.to_datetime(text, errors="coerce", format=fmt)
    except ValueError as exc:
        if _MIXED_ZONES not in str(exc):
            raise
    if zone is not None:
        log.warning(
            "%s: the timestamps carry differing UTC offsets: each is converted to UTC by its "
            "own; any without an offset are read as UTC, not market.timezone=%s",
            source,
            zone,
        )
    return pd.to_datetime(text, errors="coerce", format=fmt, utc=True)


def _to_utc(times: pd.Series, zone: ZoneInfo | None) -> Stamps:
    """Parsed datetimes (NaT where unparseable) as int64 ns UTC; naive ones are in `zone`."""
    unparsed = times.isna().to_numpy()
    if times.dt.tz is None:
        times = times.dt.tz_localize(zone or "UTC", ambiguous="NaT", nonexistent="NaT")
    times = times.dt.tz_convert("UTC")
    lost = times.isna().to_numpy() & ~unparsed  # parsed, but no such single local time
    low, high = pd.Timestamp.min.tz_localize("UTC"), pd.Timestamp.max.tz_localize("UTC")
    outside = (times.notna() & ((times < low) | (times > high))).to_numpy()
    times = times.where(~outside)
    values = times.dt.as_unit("ns").to_numpy(dtype=np.int64, na_value=0)
    return Stamps(values, unparsed | outside, lost, times=True)


def session_breaks(
    source: str, stamps: Stamps, gap: Gap, row: Callable[[int], str], setting: object
) -> np.ndarray:
    """[S] int64 ticks i in 1..T-1 with stamps[i] - stamps[i-1] > gap: each begins a session;
    `setting` is market.session_gap as given (for messages)."""
    if stamps.times and not isinstance(gap, pd.Timedelta):
        raise key_error(
            "session_gap",
            setting,
            f"a plain number, but the timestamps of {source} are times: give a duration "
            "such as '1h', '30min' or '2D'",
        )
    if not stamps.times and isinstance(gap, pd.Timedelta):
        raise key_error(
            "session_gap",
            setting,
            f"a duration, but the timestamps of {source} are plain numbers (not times): give a "
            "number in the file's own units (e.g. 3600 for a gap of an hour in seconds)",
        )
    steps = np.diff(stamps.values)
    limit = gap.value if isinstance(gap, pd.Timedelta) else gap  # ns, or the file's units
    breaks = (np.flatnonzero(steps > limit) + 1).astype(np.int64)
    _check_sessions(source, stamps, breaks, steps, setting)
    _log_sessions(source, stamps, breaks, steps, row)
    return breaks


def _check_sessions(
    source: str, stamps: Stamps, breaks: np.ndarray, steps: np.ndarray, setting: object
) -> None:
    """Refuse a gap that leaves no session long enough to step in (every tick its own session,
    say): the market would be empty."""
    lengths = np.diff(np.concatenate([[0], breaks, [stamps.values.size]]))
    if breaks.size == 0 or lengths.max() >= MIN_EPISODE_TICKS:
        return
    median = float(np.median(steps))
    spacing = pd.Timedelta(int(median)) if stamps.times else f"{median:g}"
    raise key_error(
        "session_gap",
        setting,
        f"it splits the {stamps.values.size} ticks of {source} into {lengths.size} sessions of at "
        f"most {lengths.max()} tick(s), and an env needs {MIN_EPISODE_TICKS} ticks of a session "
        f"to step, so there is no market left; set it above the ticks' usual spacing (the "
        f"median gap between ticks is {spacing}) and below the closes, or null for one session",
    )


def _log_sessions(
    source: str, stamps: Stamps, breaks: np.ndarray, steps: np.ndarray, row: Callable[[int], str]
) -> None:
    """INFO: the sessions found and the longest gap; WARNING: sessions too short to step."""
    longest = steps.max() if steps.size else 0
    shown = pd.Timedelta(int(longest)) if stamps.times else longest
    log.info(
        "%s: %d trading session(s) (market.session_gap), the longest gap between ticks %s",
        source,
        breaks.size + 1,
        shown,
    )
    starts = np.concatenate([[0], breaks])
    lengths = np.diff(np.append(starts, stamps.values.size))
    short = np.flatnonzero(lengths < MIN_EPISODE_TICKS)
    if short.size:
        log.warning(
            "%s: %d session(s) shorter than %d ticks, the first beginning at %s; no env "
            "steps in them (a step needs a next tick before the forced close); raise "
            "market.session_gap to merge them",
            source,
            short.size,
            MIN_EPISODE_TICKS,
            row(int(starts[short[0]])),
        )
