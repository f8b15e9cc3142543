"""Property: the quotes reader returns the book a valid file was written from, with no warning,
and a corrupted copy is either refused naming the corrupted row (or column, for the header) or,
where the corruption is harmless, read as the same book."""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from alpha_rl.errors import MarketDataError
from alpha_rl.market import Book, read_quotes_file

TICK = 0.01
SIDES = ("bid_px", "ask_px", "bid_sz", "ask_sz")
PROPERTY = settings(max_examples=60, deadline=None, database=None)


@dataclass(frozen=True)
class Quotes:
    """A valid file's table (our columns) and the arrays it must read as."""

    frame: pd.DataFrame
    levels: int
    parquet: bool
    sides: dict[str, np.ndarray]  # [T, L] float64 each
    stamps: np.ndarray | None  # [T] int64


@st.composite
def quotes(draw: st.DrawFn) -> Quotes:
    """1..3 levels, 8..24 rows on a 0.01 grid: the bid moves 1 or 2 ticks every row (so every
    mid move is one; a spike is plain against their median), a constant spread, levels 1..2
    ticks apart, sizes in half lots; epoch-second timestamps or none; CSV or Parquet."""
    rows, levels = draw(st.integers(8, 24)), draw(st.integers(1, 3))
    steps = draw(st.lists(st.sampled_from([-2, -1, 1, 2]), min_size=rows - 1, max_size=rows - 1))
    bid = draw(st.integers(1_000, 100_000)) + np.concatenate([[0], np.cumsum(steps)])
    ask = bid + draw(st.integers(1, 3))
    gaps = [draw(st.lists(st.integers(1, 2), min_size=levels, max_size=levels)) for _ in "ba"]
    halves = st.lists(st.integers(0, 100), min_size=rows * levels, max_size=rows * levels)
    sides = {
        "bid_px": (bid[:, None] - np.cumsum([0, *gaps[0][1:]])[None, :]) * TICK,
        "ask_px": (ask[:, None] + np.cumsum([0, *gaps[1][1:]])[None, :]) * TICK,
        "bid_sz": np.array(draw(halves), np.float64).reshape(rows, levels) / 2,
        "ask_sz": np.array(draw(halves), np.float64).reshape(rows, levels) / 2,
    }
    stamps = None
    if draw(st.booleans()):
        waits = draw(st.lists(st.integers(0, 5), min_size=rows - 1, max_size=rows - 1))
        start = draw(st.integers(1_600_000_000, 1_800_000_000))
        stamps = start + np.concatenate([[0], np.cumsum(waits)]).astype(np.int64)
    columns = {} if stamps is None else {"timestamp": stamps}
    for lv in range(levels):
        columns.update({f"{side}_{lv}": sides[side][:, lv] for side in SIDES})
    return Quotes(pd.DataFrame(columns), levels, draw(st.booleans()), sides, stamps)


def _write(frame: pd.DataFrame, path: Path, parquet: bool) -> None:
    if parquet:
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False)


@contextmanager
def _file(q: Quotes) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder) / ("quotes.parquet" if q.parquet else "quotes.csv")


class _Warnings(logging.Handler):
    """The WARNING records of alpha_rl.market while in use."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record.getMessage())


def _read(path: Path) -> tuple[Book, list[str]]:
    handler, logger = _Warnings(), logging.getLogger("alpha_rl.market")
    logger.addHandler(handler)
    try:
        return read_quotes_file(path, TICK, 1), handler.seen
    finally:
        logger.removeHandler(handler)


def _same(book: Book, q: Quotes) -> None:
    for side in SIDES:
        np.testing.assert_array_equal(getattr(book, side), q.sides[side])
    if q.stamps is None:
        assert book.timestamps is None
    else:
        np.testing.assert_array_equal(book.timestamps, q.stamps)


@PROPERTY
@given(quotes())
def test_a_valid_file_reads_as_the_book_it_was_written_from(q: Quotes) -> None:
    with _file(q) as path:
        _write(q.frame, path, q.parquet)
        book, warnings = _read(path)
    _same(book, q)
    assert (book.T, book.L, book.tick_size) == (len(q.frame), q.levels, TICK)
    assert warnings == []


# --- corruptions: each writes the file and says what must be named (a row index, a column
# name) or None where the book must come out unchanged ---

Writer = Callable[[Path], None]
Expect = int | str | None


def _cell(
    q: Quotes, draw: st.DrawFn, value: Callable[[object], object], stamps: bool = True
) -> tuple[Writer, Expect]:
    """One cell of a price or size column (or of the timestamps) replaced by value(old)."""
    frame = q.frame.astype(object)
    row = draw(st.integers(0, len(frame) - 1))
    column = draw(st.sampled_from([c for c in frame.columns if stamps or c != "timestamp"]))
    frame.loc[row, column] = value(frame.loc[row, column])
    if q.parquet:  # Arrow wants one type per column: text cells make the column text
        frame = frame.astype({c: str for c in frame if any(isinstance(v, str) for v in frame[c])})
    return (lambda path: _write(frame, path, q.parquet)), row


def _crossed(q: Quotes, draw: st.DrawFn) -> tuple[Writer, Expect]:
    frame, row = q.frame.copy(), draw(st.integers(0, len(q.frame) - 1))
    frame.loc[row, "ask_px_0"] = frame.loc[row, "bid_px_0"] - TICK * draw(st.integers(0, 2))
    return (lambda path: _write(frame, path, q.parquet)), row


def _boolean(q: Quotes, draw: st.DrawFn) -> tuple[Writer, Expect]:
    column = draw(st.sampled_from([c for c in q.frame.columns if c != "timestamp"]))
    if q.parquet:  # a whole column of True/False: refused at its first row
        frame = q.frame.assign(**{column: q.frame[column] > 0})
        return (lambda path: _write(frame, path, True)), 0
    return _cell(q, draw, lambda _: draw(st.sampled_from(["True", "False", "true"])), False)


def _doubled(q: Quotes, draw: st.DrawFn) -> tuple[Writer, Expect]:
    column = draw(st.sampled_from(list(q.frame.columns)))
    copy = q.frame[column].to_numpy()[::-1]  # other values under the same name

    def write(path: Path) -> None:
        if q.parquet:
            arrays = [pa.array(q.frame[c].to_numpy()) for c in q.frame.columns]
            pq.write_table(pa.table([*arrays, pa.array(copy)], [*q.frame.columns, column]), path)
        else:
            q.frame.assign(extra=copy).rename(columns={"extra": column}).to_csv(path, index=False)

    return write, column


def _deleted(q: Quotes, draw: st.DrawFn) -> tuple[Writer, Expect]:
    """A cell cut out of a CSV line (the cells after it shift left); in Parquet, a null."""
    row = draw(st.integers(0, len(q.frame) - 1))
    if q.parquet:
        return _cell(q, draw, lambda _: None)
    lines = q.frame.to_csv(index=False).splitlines()
    cells = lines[row + 1].split(",")
    del cells[draw(st.integers(0, len(cells) - 1))]
    lines[row + 1] = ",".join(cells)
    return (lambda path: path.write_text("\n".join(lines) + "\n")), row


def _stamps(q: Quotes, draw: st.DrawFn, how: str) -> tuple[Writer, Expect]:
    """A timestamp before the one above it, or the unit changed to milliseconds from a row."""
    row = draw(st.integers(1, len(q.frame) - 1))
    stamps = q.frame["timestamp"].to_numpy().copy()
    if how == "earlier":
        stamps[row] = stamps[row - 1] - draw(st.integers(1, 10))
    else:
        stamps[row:] *= 1_000
    frame = q.frame.assign(timestamp=stamps)
    return (lambda path: _write(frame, path, q.parquet)), row


def _spike(q: Quotes, draw: st.DrawFn) -> tuple[Writer, Expect]:
    """Every price of one row times 1e5 (a fat finger): refused at the move into it (at row 1,
    the move out of it, when it is row 0)."""
    frame, row = q.frame.copy(), draw(st.integers(0, len(q.frame) - 1))
    prices = [c for c in frame.columns if "_px_" in c]
    frame.loc[row, prices] = frame.loc[row, prices] * 1e5
    return (lambda path: _write(frame, path, q.parquet)), max(row, 1)


def _harmless(q: Quotes, draw: st.DrawFn) -> tuple[Writer, Expect]:
    """Columns in another order, an extra column, whole sizes written as integers."""
    order = draw(st.permutations(list(q.frame.columns)))
    frame = q.frame[order].assign(note="x")
    if draw(st.booleans()):
        sizes = [c for c in frame.columns if "_sz_" in c]
        frame[sizes] = frame[sizes].map(lambda v: int(v) if float(v).is_integer() else v)
    return (lambda path: _write(frame, path, q.parquet)), None


CORRUPTIONS: dict[str, Callable[[Quotes, st.DrawFn], tuple[Writer, Expect]]] = {
    "text": lambda q, draw: _cell(q, draw, lambda _: draw(st.sampled_from(["abc", "1,5", "-"]))),
    "nan": lambda q, draw: _cell(q, draw, lambda _: np.nan),
    "negative": lambda q, draw: _cell(q, draw, lambda v: -1 - abs(float(v)), False),
    "crossed": _crossed,
    "boolean": _boolean,
    "doubled header": _doubled,
    "deleted cell": _deleted,
    "earlier timestamp": lambda q, draw: _stamps(q, draw, "earlier"),
    "timestamp unit change": lambda q, draw: _stamps(q, draw, "unit"),
    "absurd price": _spike,
    "harmless": _harmless,
}


@PROPERTY
@given(quotes(), st.sampled_from(sorted(CORRUPTIONS)), st.data())
def test_a_corrupted_file_is_refused_at_the_corruption_or_reads_the_same(
    q: Quotes, kind: str, data: st.DataObject
) -> None:
    if q.stamps is None and "timestamp" in kind:
        kind = "harmless"
    write, expect = CORRUPTIONS[kind](q, data.draw)
    with _file(q) as path:
        write(path)
        try:
            book, warnings = _read(path)
        except MarketDataError as exc:
            message = str(exc)
            assert expect is not None, f"{kind}: a harmless change refused: {message}"
            assert message.startswith(str(path)) and "\n" not in message, message
            named = f"column '{expect}'" if isinstance(expect, str) else rf"\brow {expect + 1}\b"
            assert re.search(named, message), f"{kind}: {named} not in {message}"
            return
    assert expect is None, f"{kind}: not refused; read as {book!r}"
    _same(book, q)
    assert warnings == []
