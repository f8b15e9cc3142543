"""Quotes files (CSV or Parquet) read into a Book; every value is checked, nothing is repaired.

Columns: bid_px_<l>, ask_px_<l>, bid_sz_<l>, ask_sz_<l> for levels l = 0, 1, ... (L = the
number of levels; each level needs all four columns) and an optional `timestamp` (numbers, or
ISO-8601 times kept as int64 nanoseconds since the epoch, UTC). Other columns are ignored. Each
problem is reported at its first offending row, 1-based among the data rows (for CSV also the
line of the file, the header being line 1), with the column it concerns.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.api.types import (
    is_bool_dtype,
    is_datetime64_any_dtype,
    is_integer_dtype,
    is_numeric_dtype,
)

from alpha_rl.errors import MarketDataError
from alpha_rl.market.book import Book

log = logging.getLogger(__name__)

FAMILIES = ("bid_px", "ask_px", "bid_sz", "ask_sz")
TIMESTAMP = "timestamp"
CSV_SUFFIXES = (".csv",)
PARQUET_SUFFIXES = (".parquet", ".pq")
_LEVEL_COLUMN = re.compile(r"^(bid_px|ask_px|bid_sz|ask_sz)_(0|[1-9][0-9]*)$")
_TICK_DIGITS = 9  # significant digits kept of an inferred tick size (drops float noise)

# a check: (column, [T] bool mask of offending rows, description of the value at a row)
_Hit = tuple[str, np.ndarray, Callable[[int], str]]


def resolve_path(path: str | Path) -> Path:
    """`path` made absolute; a relative path resolves against the current working directory."""
    return (Path.cwd() / Path(path).expanduser()).resolve()


def read_quotes_file(path: str | Path, tick_size: float | None, min_rows: int) -> Book:
    """The Book [T, L] of a CSV or Parquet quotes file; MarketDataError names file, row, column."""
    file = resolve_path(path)
    frame = _read_frame(file)
    levels = _count_levels(file, [str(c) for c in frame.columns])
    where = _Where(file.suffix.lower() in CSV_SUFFIXES)
    names = [f"{family}_{level}" for family in FAMILIES for level in range(levels)]
    columns, problems = _numbers(frame, names, where)
    stamps = None
    if TIMESTAMP in frame.columns:
        stamps, stamp_problems = _timestamps(frame[TIMESTAMP], where)
        problems += stamp_problems
    sides = {f: np.stack([columns[f"{f}_{lv}"] for lv in range(levels)], axis=1) for f in FAMILIES}
    problems += _book_problems(sides, where)
    if problems:
        raise MarketDataError(
            f"{file}: malformed quotes; the first offending row of each problem:\n  "
            + "\n  ".join(problems)
            + "\nfix the file, or point market.path at another one"
        )
    if len(frame) < min_rows:
        raise MarketDataError(
            f"{file}: {len(frame)} data rows, fewer than market.min_rows={min_rows}; "
            "use a longer file or lower market.min_rows"
        )
    tick = tick_size if tick_size is not None else _infer_tick(file, sides)
    return Book(**sides, tick_size=float(tick), source=str(file), timestamps=stamps)


@dataclass(frozen=True)
class _Where:
    """How to name a data row: CSV files also give the line (the header is line 1)."""

    csv: bool

    def row(self, index: int) -> str:
        """'row r (line n)' of 0-based data row `index`."""
        return f"row {index + 1} (line {index + 2})" if self.csv else f"row {index + 1}"

    def problem(self, hits: list[_Hit]) -> list[str]:
        """[] or the one line naming the earliest offending row over `hits` (first hit on ties)."""
        best: tuple[int, int] | None = None
        for k, (_, mask, _) in enumerate(hits):
            if mask.any():
                row = int(mask.argmax())
                if best is None or row < best[0]:
                    best = (row, k)
        if best is None:
            return []
        column, _, describe = hits[best[1]]
        return [f"{self.row(best[0])}, column {column}: {describe(best[0])}"]


def _show(value: object) -> str:
    """repr of a cell, NumPy scalars shown as plain Python values."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def _read_frame(file: Path) -> pd.DataFrame:
    suffix = file.suffix.lower()
    if suffix not in CSV_SUFFIXES + PARQUET_SUFFIXES:
        raise MarketDataError(
            f"{file}: unknown file extension {suffix!r}; market=file reads CSV "
            f"({', '.join(CSV_SUFFIXES)}) or Parquet ({', '.join(PARQUET_SUFFIXES)})"
        )
    if not file.exists():
        raise MarketDataError(
            f"market data file not found: {file} (market.path resolves relative paths "
            f"against the working directory, {Path.cwd()})"
        )
    if not file.is_file():
        raise MarketDataError(f"{file} is not a file; market.path must name a quotes file")
    try:
        if suffix in CSV_SUFFIXES:
            return pd.read_csv(file, skip_blank_lines=False, low_memory=False)
        return pd.read_parquet(file, engine="pyarrow")
    except (OSError, ValueError) as exc:  # parser, encoding, Arrow and permission errors
        kind = "CSV" if suffix in CSV_SUFFIXES else "Parquet"
        raise MarketDataError(f"{file}: cannot be read as {kind}: {exc}") from exc


def _count_levels(file: Path, found: list[str]) -> int:
    """L: levels 0..L-1 each present in all four column families, or MarketDataError."""
    levels: dict[str, set[int]] = {family: set() for family in FAMILIES}
    for name in found:
        match = _LEVEL_COLUMN.match(name)
        if match:
            levels[match[1]].add(int(match[2]))
    missing = [f"{family}_0" for family in FAMILIES if 0 not in levels[family]]
    if missing:
        raise MarketDataError(
            f"{file}: missing required column(s) {', '.join(missing)}; found {found}. A quotes "
            "file needs bid_px_0, ask_px_0, bid_sz_0, ask_sz_0 (level 0 = the touch), the same "
            "four per deeper level 1, 2, ..., and optionally timestamp"
        )
    count = max(max(present) for present in levels.values()) + 1
    for level in range(count):
        absent = [f"{family}_{level}" for family in FAMILIES if level not in levels[family]]
        present = [f"{family}_{level}" for family in FAMILIES if level in levels[family]]
        if absent:
            why = f"while {', '.join(present)} exist" if present else f"but level {count - 1} does"
            raise MarketDataError(
                f"{file}: missing column(s) {', '.join(absent)} {why}; every level needs all "
                "four of bid_px, ask_px, bid_sz, ask_sz, levels numbered 0, 1, 2, ... without gaps"
            )
    extra = [n for n in found if n != TIMESTAMP and not _LEVEL_COLUMN.match(n)]
    if extra:
        log.info("%s: ignoring columns %s", file, ", ".join(extra))
    return count


def _numbers(
    frame: pd.DataFrame, names: list[str], where: _Where
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Each column as [T] float64 (NaN where unusable) and the non-numeric / NaN problems."""
    columns: dict[str, np.ndarray] = {}
    text_hits: list[_Hit] = []
    nan_hits: list[_Hit] = []
    for name in names:
        series = frame[name]
        if is_numeric_dtype(series) and not is_bool_dtype(series):
            values = series.to_numpy(dtype=np.float64, na_value=np.nan)
            text = np.zeros(len(series), dtype=bool)
        else:
            coerced = pd.to_numeric(series, errors="coerce")
            values = coerced.to_numpy(dtype=np.float64, na_value=np.nan)
            text = (coerced.isna() & series.notna()).to_numpy()
        raw = series.to_numpy()
        columns[name] = values
        text_hits.append((name, text, lambda r, raw=raw: f"non-numeric value {_show(raw[r])}"))
        nan_hits.append(
            (name, ~np.isfinite(values) & ~text, lambda r, v=values: f"missing or {v[r]} value")
        )
    return columns, where.problem(text_hits) + where.problem(nan_hits)


def _timestamps(series: pd.Series, where: _Where) -> tuple[np.ndarray, list[str]]:
    """[T] int64 (integers, or times as ns since the epoch) or float64, and their problems."""
    raw = series.to_numpy()
    stamps, bad = _stamp_values(series)
    what = "missing, non-numeric or not an ISO-8601 time"
    problems = where.problem([(TIMESTAMP, bad, lambda r: f"{what}: {_show(raw[r])}")])
    earlier = np.zeros(len(stamps), dtype=bool)
    earlier[1:] = (stamps[1:] < stamps[:-1]) & ~bad[1:] & ~bad[:-1]
    problems += where.problem(
        [
            (
                TIMESTAMP,
                earlier,
                lambda r: f"decreasing timestamps: {_show(raw[r])} after {_show(raw[r - 1])}",
            )
        ]
    )
    return stamps, problems


def _stamp_values(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Timestamps as numbers and the mask of unusable cells; text is numbers or ISO-8601 times,
    whichever its first cell is."""
    if is_datetime64_any_dtype(series):
        times = pd.to_datetime(series, utc=True)
    else:
        numeric = is_numeric_dtype(series) and not is_bool_dtype(series)
        numbers = series if numeric else pd.to_numeric(series, errors="coerce")
        first = series.first_valid_index()
        if numeric or first is None or not pd.isna(numbers[first]):
            values = numbers.to_numpy(dtype=np.float64, na_value=np.nan)
            bad = ~np.isfinite(values)
            if not bad.any() and is_integer_dtype(numbers):
                return numbers.to_numpy(dtype=np.int64), bad
            return values, bad
        times = pd.to_datetime(series, utc=True, errors="coerce", format="ISO8601")
    bad = times.isna().to_numpy()
    return times.dt.as_unit("ns").to_numpy(dtype=np.int64, na_value=0), bad


def _book_problems(sides: dict[str, np.ndarray], where: _Where) -> list[str]:
    """Non-positive prices, a crossed touch, misordered levels, negative sizes."""
    bid, ask = sides["bid_px"], sides["ask_px"]
    levels = range(bid.shape[1])

    def value(family: str, r: int, lv: int) -> str:
        return f"{family}_{lv}={sides[family][r, lv]:.10g}"

    problems = where.problem(
        [
            (f"{f}_{lv}", sides[f][:, lv] <= 0, lambda r, f=f, lv=lv: f"{value(f, r, lv)} <= 0")
            for f in ("bid_px", "ask_px")
            for lv in levels
        ]
    )
    problems = [f"{p}; prices must be > 0" for p in problems]
    problems += where.problem(
        [
            (
                "ask_px_0",
                bid[:, 0] >= ask[:, 0],
                lambda r: f"crossed book: {value('ask_px', r, 0)} <= {value('bid_px', r, 0)}",
            )
        ]
    )
    for family, mask, relation, order in (
        ("bid_px", bid[:, 1:] >= bid[:, :-1], ">=", "strictly decreasing"),
        ("ask_px", ask[:, 1:] <= ask[:, :-1], "<=", "strictly increasing"),
    ):
        problems += where.problem(
            [
                (
                    f"{family}_{lv}",
                    mask[:, lv - 1],
                    lambda r, f=family, lv=lv, rel=relation, o=order: (
                        f"{value(f, r, lv)} {rel} {value(f, r, lv - 1)}; levels must be {o}"
                    ),
                )
                for lv in levels[1:]
            ]
        )
    problems += where.problem(
        [
            (
                f"{f}_{lv}",
                sides[f][:, lv] < 0,
                lambda r, f=f, lv=lv: f"negative size {value(f, r, lv)}",
            )
            for f in ("bid_sz", "ask_sz")
            for lv in levels
        ]
    )
    return problems


def _infer_tick(file: Path, sides: dict[str, np.ndarray]) -> float:
    """The smallest positive step between distinct prices of the file, logged."""
    prices = np.unique(np.concatenate([sides["bid_px"].ravel(), sides["ask_px"].ravel()]))
    step = float(np.diff(prices).min())  # bid < ask on every row: at least two distinct prices
    tick = float(f"{step:.{_TICK_DIGITS}g}")
    log.info(
        "%s: tick_size inferred as %s USD (the smallest price step); set market.tick_size "
        "to choose it",
        file,
        tick,
    )
    return tick
