"""The quotes file formats market=file reads: each format's reader (a file into a table of named
columns, a name it has twice refused) and the columns the rest of the reading knows
(market/files.py: renames, levels, values, timestamps, sessions, each row checked).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from alpha_rl.errors import MarketDataError

log = logging.getLogger(__name__)

FAMILIES = ("bid_px", "ask_px", "bid_sz", "ask_sz")
TIMESTAMP = "timestamp"
PRICE = "price"  # one price per row (closes, mids): quoted at market.spread around it
LEVEL_COLUMN = re.compile(r"^(bid_px|ask_px|bid_sz|ask_sz)_(0|[1-9][0-9]*)$")


def _read_csv(file: Path, text_column: str | None, used: Callable[[str], bool]) -> pd.DataFrame:
    header = pd.read_csv(file, header=None, nrows=1, dtype=str, skip_blank_lines=False)
    unique_names(file, [str(n) for n in header.iloc[0]], "the header (line 1)", used)
    dtype = None if text_column is None else {text_column: str}
    options = {"skip_blank_lines": False, "low_memory": False, "dtype": dtype}
    frame = pd.read_csv(file, **options)
    filled = np.flatnonzero(frame.notna().any(axis=1).to_numpy())
    end = int(filled[-1]) + 1 if filled.size else 0
    if end == len(frame):
        return frame
    # blank lines (or lines of separators alone) end the file: read again without them, so that
    # a column is typed as its values are (their NaN would make integer stamps float64)
    log.info("%s: %d blank line(s) at the end ignored", file, len(frame) - end)
    return pd.read_csv(file, nrows=end, **options)


def _read_parquet(file: Path, text_column: str | None, used: Callable[[str], bool]) -> pd.DataFrame:
    unique_names(file, pq.read_schema(file).names, "the Parquet schema", lambda _: True)
    return pd.read_parquet(file, engine="pyarrow")


@dataclass(frozen=True)
class FileFormat:
    """A quotes file format: its name, the file endings it is chosen by, how its table is read
    (`read(file, text_column, used)`: `text_column` read as text, not numbers; a repeated column
    name refused, in CSV only where `used`), and whether its rows are lines of text (a problem
    is then reported with its line of the file too)."""

    name: str
    suffixes: tuple[str, ...]
    read: Callable[[Path, str | None, Callable[[str], bool]], pd.DataFrame]
    lines: bool


FORMATS = (
    FileFormat("CSV", (".csv", ".csv.gz"), _read_csv, lines=True),  # .gz: pandas unzips it
    FileFormat("Parquet", (".parquet", ".pq"), _read_parquet, lines=False),
)


def file_format(file: Path) -> FileFormat:
    """The format of `file`, by its ending; MarketDataError lists the formats read."""
    suffix = file.suffix.lower()
    for fmt in FORMATS:
        if any(file.name.lower().endswith(ending) for ending in fmt.suffixes):
            return fmt
    known = " or ".join(f"{f.name} ({', '.join(f.suffixes)})" for f in FORMATS)
    raise MarketDataError(f"{file}: unknown file extension {suffix!r}; market=file reads {known}")


def read_frame(file: Path, text_column: str | None, used: Callable[[str], bool]) -> pd.DataFrame:
    """The file's table; a CSV's `text_column` (if any) is read as text, not as numbers. A
    column name the header has twice is refused: any in Parquet, a `used` one in CSV."""
    fmt = file_format(file)
    try:
        exists, is_file = file.exists(), file.is_file()
    except OSError as exc:  # a directory on the way that cannot be searched, ...
        what = f"{file}: cannot be opened ({exc.strerror}); check market.path"
        raise MarketDataError(what) from exc
    if not exists:
        raise MarketDataError(
            f"market data file not found: {file} (market.path resolves relative paths "
            f"against the working directory, {Path.cwd()})"
        )
    if not is_file:
        raise MarketDataError(f"{file} is not a file; market.path must name a quotes file")
    try:
        return fmt.read(file, text_column, used)
    except (OSError, ValueError) as exc:  # parser, encoding, Arrow and permission errors
        what = str(exc).replace("\n", "; ")
        raise MarketDataError(f"{file}: cannot be read as {fmt.name}: {what}") from exc


def unique_names(file: Path, names: list[str], where: str, used: Callable[[str], bool]) -> None:
    """Refuse a `used` column name that `names` holds twice (pandas would keep one of them)."""
    doubled = [n for n, k in Counter(names).items() if k > 1 and used(n)]
    if doubled:
        at = [str(i + 1) for i, n in enumerate(names) if n == doubled[0]]
        times = "twice" if len(at) == 2 else f"{len(at)} times"
        raise MarketDataError(
            f"{file}: {where} has column {doubled[0]!r} {times} (columns {', '.join(at[:-1])} "
            f"and {at[-1]}); only one would be read: drop or rename the others"
        )
