"""Quotes files (CSV or Parquet) read into a Book; every value is checked, nothing is repaired.

Columns: bid_px_<l>, ask_px_<l>, bid_sz_<l>, ask_sz_<l> for levels l = 0, 1, ... (L = the
number of levels; each level needs all four columns) and an optional `timestamp` (numbers, or
times kept as int64 nanoseconds since the epoch, UTC: see times.py). Other columns are ignored.
`market.columns` renames a file's own column names to these first; `market.default_size` fills
the size columns of an export that has none. Each problem is reported at its first offending
row, 1-based among the data rows (for CSV also the line of the file, the header being line 1),
with the column it concerns. Blank lines that end a CSV are ignored; one between data rows is
refused at its line.
"""

from __future__ import annotations

import errno
import importlib.util
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd

from alpha_rl.errors import MarketDataError
from alpha_rl.market.book import Book
from alpha_rl.market.checks import (
    Where,
    book_problems,
    infer_tick,
    move_problems,
    numbers,
    show,
    tick_warning,
)
from alpha_rl.market.formats import (
    FAMILIES,
    LEVEL_COLUMN,
    PRICE,
    TIMESTAMP,
    file_format,
    read_frame,
)
from alpha_rl.market.times import (
    Gap,
    Stamps,
    check_format,
    key_error,
    parse_gap,
    parse_zone,
    propose_format,
    read_stamps,
    session_breaks,
    unit_change,
    unit_changes,
)

log = logging.getLogger(__name__)

PACKAGE = "package:"  # market.path=package:<name>/<file in it>: a file an installed package ships


def package_file(path: str) -> Path:
    """The file `package:<name>/<path inside it>` of an installed package, found without
    importing it; MarketDataError says which package to install."""
    name, _, inside = path[len(PACKAGE) :].partition("/")
    if not name or not inside:
        raise MarketDataError(f"market.path={path!r}: write package:<package>/<file in it>, "
                              "e.g. package:skfolio/datasets/data/sp500_index.csv.gz")  # fmt: skip
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise MarketDataError(
            f"market.path={path!r}: the package {name!r} is not installed; install it (for "
            f"the presets: pip install -e '.[markets]', or pip install {name})"
        )
    return Path(next(iter(spec.submodule_search_locations))) / inside


def resolve_path(path: str | Path) -> Path:
    """`path` made absolute; a relative path resolves against the current working directory,
    `package:<name>/<file>` inside an installed package (package_file)."""
    if isinstance(path, str) and path.startswith(PACKAGE):
        return package_file(path)
    given = Path.cwd() / Path(path).expanduser()
    try:
        return given.resolve()
    except (RuntimeError, OSError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        loop = isinstance(exc, RuntimeError) or exc.errno == errno.ELOOP
        what = "is a loop of symbolic links" if loop else f"cannot be resolved ({exc})"
        raise MarketDataError(
            f"{given} (market.path) {what}; point market.path at the quotes file itself"
        ) from exc


def read_quotes_file(
    path: str | Path,
    tick_size: float | None,
    min_rows: int,
    *,
    timestamp_format: str | None = None,
    timezone: str | None = None,
    columns: Mapping[str, str] | None = None,
    default_size: float | None = None,
    session_gap: str | float | None = None,
    spread: float | None = None,
) -> Book:
    """The Book [T, L] of a quotes file (market/formats.py: FORMATS); MarketDataError names file,
    row and column."""
    file = resolve_path(path)
    renames = dict(columns or {})
    try:
        check_columns(renames)
        check_format(timestamp_format)
        check_default_size(default_size)
        zone, gap = parse_zone(timezone), parse_gap(session_gap)
    except MarketDataError as exc:
        raise MarketDataError(f"{file}: {exc}") from exc
    frame = _table(file, renames, timestamp_format, default_size, spread)
    sides, stamps, breaks = _checked(file, frame, renames, timestamp_format=timestamp_format,
                                     zone=zone, gap=gap, session_gap=session_gap)  # fmt: skip
    if len(frame) < min_rows:
        raise MarketDataError(
            f"{file}: {len(frame)} data rows, fewer than market.min_rows={min_rows}; "
            "use a longer file or lower market.min_rows"
        )
    tick = tick_size if tick_size is not None else _inferred_tick(file, sides)
    doubt = tick_warning(tick, tick_size is None, sides)
    if doubt:
        log.warning("%s: %s", file, doubt)
    stamp_values = None if stamps is None else stamps.values
    return Book(**sides, tick_size=float(tick), source=str(file), timestamps=stamp_values,
                breaks=breaks, times=stamps is not None and stamps.times,
                zone=None if zone is None else str(zone))  # fmt: skip


def _checked(file: Path, frame: pd.DataFrame, renames: dict[str, str], *,
             timestamp_format: str | None, zone: ZoneInfo | None, gap: Gap | None,
             session_gap: str | float | None,
             ) -> tuple[dict[str, np.ndarray], Stamps | None, np.ndarray]:  # fmt: skip
    """The book's sides [T, L] by family, its stamps and its session breaks, every value checked
    (`gap`: the parsed session gap, `session_gap` as configured, for the messages)."""
    levels = _count_levels(file, [str(c) for c in frame.columns])
    if gap is not None and TIMESTAMP not in frame.columns:
        raise MarketDataError(
            f"{file}: market.session_gap={session_gap!r} needs timestamps, but the file has no "
            f"{TIMESTAMP} column (columns: {[str(c) for c in frame.columns]}); map one with "
            "market.columns={<its time column>: timestamp} or set market.session_gap=null"
        )
    where = Where(file_format(file).lines, {t: s for s, t in renames.items()})
    names = [f"{family}_{level}" for family in FAMILIES for level in range(levels)]
    values, problems = numbers(frame, names, where, levels)
    stamps = None
    if TIMESTAMP in frame.columns:
        stamps, stamp_problems = _timestamps(file, frame[TIMESTAMP], where, timestamp_format, zone)
        problems += stamp_problems
    sides = {f: np.stack([values[f"{f}_{lv}"] for lv in range(levels)], axis=1) for f in FAMILIES}
    problems += book_problems(sides, where)
    warning, breaks = None, np.zeros(0, dtype=np.int64)
    if not problems:  # the moves of valid prices only, within a session (a break is a gap)
        breaks = _breaks(file, stamps, gap, where, session_gap)
        problems, warning = move_problems(sides, where, breaks)
    if problems:
        raise MarketDataError(
            f"{file}: malformed quotes, the first offending row of each problem: "
            + " | ".join(problems)
            + "; fix the file, or point market.path at another one"
        )
    if warning:
        log.warning("%s: %s", file, warning)
    return sides, stamps, breaks


def check_columns(columns: Mapping[str, str]) -> None:
    """Refuse a market.columns with a target not ours or two file columns onto one of ours."""
    unknown = {s: t for s, t in columns.items()
               if t not in (TIMESTAMP, PRICE) and not LEVEL_COLUMN.match(t)}  # fmt: skip
    if unknown:
        raise key_error(
            "columns",
            dict(columns),
            f"{unknown} map onto no column of a quotes file; targets must be bid_px_<l>, "
            f"ask_px_<l>, bid_sz_<l>, ask_sz_<l> (levels l = 0, 1, ...), {TIMESTAMP} or {PRICE} "
            "(with market.spread)",
        )
    doubled = [t for t, n in Counter(columns.values()).items() if n > 1]
    if doubled:
        sources = [s for s, t in columns.items() if t == doubled[0]]
        raise key_error(
            "columns",
            dict(columns),
            f"{', '.join(map(repr, sources))} all map onto {doubled[0]}; each of our columns "
            "takes one column of the file",
        )


def check_default_size(size: float | None) -> None:
    """Refuse a negative market.default_size."""
    if size is not None and not size >= 0:
        raise key_error(
            "default_size",
            size,
            "expected a size >= 0 (lots) for the size columns an export lacks, or null (the "
            "file must have bid_sz_<l> and ask_sz_<l>)",
        )


def _table(
    file: Path,
    renames: dict[str, str],
    fmt: str | None,
    size: float | None,
    spread: float | None = None,
) -> pd.DataFrame:
    """The file's table with market.columns applied, a price column quoted at market.spread,
    and absent sizes filled (default_size)."""
    source = next((s for s, t in renames.items() if t == TIMESTAMP), TIMESTAMP)
    used = lambda n: n in (TIMESTAMP, PRICE) or n in renames or bool(LEVEL_COLUMN.match(n))  # noqa: E731
    frame = read_frame(file, source if fmt is not None else None, used)
    frame = _quoted(file, _rename(file, frame, renames), spread, renames)
    return _fill_sizes(file, frame, size)


def _quoted(file: Path, frame: pd.DataFrame, spread: float | None,
            renames: dict[str, str]) -> pd.DataFrame:  # fmt: skip
    """With market.spread: the `price` column as a one-level book, bid_px_0 = price - spread / 2
    and ask_px_0 = price + spread / 2 (the price left as read: its checks are the book's)."""
    found = [str(c) for c in frame.columns]
    if spread is None:
        if PRICE in found and not any(LEVEL_COLUMN.match(c) for c in found):
            raise MarketDataError(
                f"{file}: has a {PRICE} column but no bid/ask columns; a file of one price per "
                "row needs the spread it is traded at: set market.spread (in market.currency)"
            )
        return frame
    if PRICE not in found:
        raise MarketDataError(
            f"{file}: market.spread={spread} quotes a {PRICE} column, which the file does not "
            f"have (columns: {found}); map its price column with market.columns={{<name>: "
            f"{PRICE}}}, or set market.spread=null for a file of bid/ask columns"
        )
    quoted = [c for c in found if c.startswith(("bid_px_", "ask_px_"))]
    if quoted:
        raise MarketDataError(
            f"{file}: has bid/ask columns {quoted} and market.spread={spread}: take one or the "
            f"other (market.spread=null to read its quotes, or drop the columns)"
        )
    price = pd.to_numeric(frame[PRICE], errors="coerce")
    bad = np.flatnonzero(price.isna().to_numpy() & frame[PRICE].notna().to_numpy())
    if bad.size:
        row, where = int(bad[0]), Where(file_format(file).lines, {t: s for s, t in renames.items()})
        raise MarketDataError(
            f"{file}: {where.row(row)}, column {where.column(PRICE)}: "
            f"{show(frame[PRICE].iloc[row])} is not a number; fix the file, or point market.path "
            "at another one"
        )
    half = float(spread) / 2.0
    log.info("%s: %s quoted at market.spread=%s (bid = price - %s, ask = price + %s)", file,
             PRICE, spread, half, half)  # fmt: skip
    return frame.drop(columns=[PRICE]).assign(bid_px_0=price - half, ask_px_0=price + half)


def _rename(file: Path, frame: pd.DataFrame, renames: dict[str, str]) -> pd.DataFrame:
    """`frame` with the file's column names replaced by ours as market.columns says."""
    if not renames:
        return frame
    found = [str(c) for c in frame.columns]
    absent = [s for s in renames if s not in found]
    if absent:
        raise MarketDataError(
            f"{file}: market.columns names column(s) {absent} that the file does not have; its "
            f"columns are {found}"
        )
    clashes = [f"{s!r} onto {t}" for s, t in renames.items() if t in found and t not in renames]
    if clashes:
        raise MarketDataError(
            f"{file}: market.columns maps {', '.join(clashes)}, but the file already has a "
            "column of that name that is not renamed itself; drop the entry from "
            "market.columns or the column from the file"
        )
    log.info("%s: columns renamed by market.columns: %s", file, renames)
    return frame.set_axis(found, axis=1).rename(columns=renames)


def _fill_sizes(file: Path, frame: pd.DataFrame, size: float | None) -> pd.DataFrame:
    """`frame` with the absent size columns of each priced level set to market.default_size."""
    if size is None:
        return frame
    found = {str(c) for c in frame.columns}
    matches = [m for m in map(LEVEL_COLUMN.match, found) if m and m[1] in ("bid_px", "ask_px")]
    priced = sorted({int(m[2]) for m in matches})
    absent = [
        f"{f}_{lv}" for lv in priced for f in ("bid_sz", "ask_sz") if f"{f}_{lv}" not in found
    ]
    if not absent:
        log.info("%s: market.default_size=%s unused: the file has its sizes", file, size)
        return frame
    log.info("%s: %s set to market.default_size=%s lots", file, ", ".join(absent), size)
    return frame.assign(**{name: np.full(len(frame), float(size)) for name in absent})


def _count_levels(file: Path, found: list[str]) -> int:
    """L: levels 0..L-1 each present in all four column families, or MarketDataError."""
    levels: dict[str, set[int]] = {family: set() for family in FAMILIES}
    for name in found:
        match = LEVEL_COLUMN.match(name)
        if match:
            levels[match[1]].add(int(match[2]))
    missing = [f"{family}_0" for family in FAMILIES if 0 not in levels[family]]
    if missing:
        raise MarketDataError(
            f"{file}: missing required column(s) {', '.join(missing)}; found {found}. A quotes "
            "file needs bid_px_0, ask_px_0, bid_sz_0, ask_sz_0 (level 0 = the touch), the same "
            "four per deeper level 1, 2, ..., and optionally timestamp (market.columns maps a "
            "file's own names onto these; market.default_size fills absent sizes)"
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
    extra = [n for n in found if n != TIMESTAMP and not LEVEL_COLUMN.match(n)]
    if extra:
        log.info("%s: ignoring columns %s", file, ", ".join(extra))
    return count


def _timestamps(
    file: Path, series: pd.Series, where: Where, fmt: str | None, zone: ZoneInfo | None
) -> tuple[Stamps, list[str]]:
    """The timestamp column read (times.read_stamps) and its problems, each at its first row."""
    raw = series.to_numpy()
    stamps = read_stamps(str(file), series, fmt, zone)
    bad = stamps.unreadable | stamps.dst
    changed = unit_changes(stamps)  # seconds then milliseconds, ...: said as such, not "earlier"
    earlier = np.zeros(len(raw), dtype=bool)
    earlier[1:] = (stamps.values[1:] < stamps.values[:-1]) & ~bad[1:] & ~bad[:-1] & ~changed[1:]
    values = stamps.values

    def unreadable(r: int) -> str:
        if fmt is None and (pd.isna(raw[r]) or not stamps.times):
            return f"missing, non-numeric or not an ISO-8601 time: {show(raw[r])}"
        if pd.isna(raw[r]):
            return "missing time"
        proposal = propose_format(series, r, fmt, ~stamps.unreadable, where.row)
        if fmt is None:
            return f"{show(raw[r])} is not a number or an ISO-8601 time: {proposal}"
        return (
            f"{show(raw[r])} does not match market.timestamp_format={fmt!r}; fix "
            f"market.timestamp_format (or the file): {proposal}"
        )

    checks: list[tuple[np.ndarray, Callable[[int], str]]] = [
        (stamps.unreadable, unreadable),
        (stamps.dst, lambda r: f"{show(raw[r])} is ambiguous or does not exist in "
            f"market.timezone={zone} (a daylight-saving change); export UTC times or offsets"),
        (earlier, lambda r: f"decreasing timestamps: {show(raw[r])} after {show(raw[r - 1])}"),
        (changed, lambda r: f"{show(raw[r])} after {show(raw[r - 1])}: "
            f"{unit_change(float(values[r - 1]), float(values[r]))}"),
    ]  # fmt: skip
    problems = [line for mask, what in checks for line in where.problem([(TIMESTAMP, mask, what)])]
    if zone is not None and not stamps.times:
        log.warning("%s: market.timezone=%s not applied: the timestamps are numbers", file, zone)
    return stamps, problems


def _breaks(
    file: Path, stamps: Stamps | None, gap: Gap | None, where: Where, setting: object
) -> np.ndarray:
    """[S] int64 session breaks: none without market.session_gap (one session)."""
    if gap is None or stamps is None:
        return np.zeros(0, dtype=np.int64)
    return session_breaks(str(file), stamps, gap, where.row, setting)


def _inferred_tick(file: Path, sides: dict[str, np.ndarray]) -> float:
    """The smallest positive step between distinct prices of the file, logged."""
    tick = infer_tick(sides)
    log.info(
        "%s: tick_size inferred as %s (the smallest price step); set market.tick_size to choose it",
        file,
        tick,
    )
    return tick
