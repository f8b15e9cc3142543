"""Quotes files: good CSV and Parquet files load; each kind of bad file is named precisely."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from alpha_rl.errors import MarketDataError
from alpha_rl.market import SingleSplit, load_market, read_quotes_file
from tests.helpers import compose_train

ROWS = 20


def _quotes(rows: int = ROWS, levels: int = 2, timestamps: bool = True) -> pd.DataFrame:
    """A valid book: prices on a 0.01 grid, spread 1-2 ticks, sizes in lots."""
    t = np.arange(rows)
    bid0 = 10_000 + (t * 7) % 5  # ticks
    ask0 = bid0 + 1 + t % 2
    columns: dict[str, np.ndarray] = {"timestamp": 1_700_000_000 + t} if timestamps else {}
    for level in range(levels):
        columns[f"bid_px_{level}"] = (bid0 - level) / 100
        columns[f"ask_px_{level}"] = (ask0 + level) / 100
        columns[f"bid_sz_{level}"] = (3.0 + (t + level) % 4).astype(np.float64)
        columns[f"ask_sz_{level}"] = (2.0 + (t * 3 + level) % 5).astype(np.float64)
    return pd.DataFrame(columns)


def _csv(tmp_path: Path, frame: pd.DataFrame, name: str = "quotes.csv") -> Path:
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path


def _parquet(tmp_path: Path, frame: pd.DataFrame, name: str = "quotes.parquet") -> Path:
    path = tmp_path / name
    frame.to_parquet(path, index=False)
    return path


def _error(path: Path, tick_size: float | None = None, min_rows: int = 1) -> str:
    with pytest.raises(MarketDataError) as info:
        read_quotes_file(path, tick_size, min_rows)
    message = str(info.value)
    assert str(path) in message
    return message


# --- good files ---


def test_a_csv_file_loads_with_its_values_and_timestamps(tmp_path: Path) -> None:
    frame = _quotes()
    book = read_quotes_file(_csv(tmp_path, frame), tick_size=0.01, min_rows=ROWS)
    assert (book.T, book.L, book.tick_size, book.start) == (ROWS, 2, 0.01, 0)
    assert book.source == str(tmp_path / "quotes.csv")
    np.testing.assert_array_equal(book.bid_px[:, 1], frame["bid_px_1"].to_numpy())
    np.testing.assert_array_equal(book.ask_sz[:, 0], frame["ask_sz_0"].to_numpy())
    assert book.timestamps is not None and book.timestamps.dtype == np.int64
    np.testing.assert_array_equal(book.timestamps, frame["timestamp"].to_numpy())


def test_an_l1_only_file_without_timestamps_loads(tmp_path: Path) -> None:
    book = read_quotes_file(_csv(tmp_path, _quotes(levels=1, timestamps=False)), 0.01, 1)
    assert (book.T, book.L, book.timestamps) == (ROWS, 1, None)


def test_parquet_loads_identically_to_the_same_csv(tmp_path: Path) -> None:
    frame = _quotes(levels=3)
    from_csv = read_quotes_file(_csv(tmp_path, frame), None, 1)
    for name in ("quotes.parquet", "quotes.pq"):
        from_parquet = read_quotes_file(_parquet(tmp_path, frame, name), None, 1)
        for side in ("bid_px", "ask_px", "bid_sz", "ask_sz", "timestamps"):
            np.testing.assert_array_equal(getattr(from_parquet, side), getattr(from_csv, side))
        assert from_parquet.tick_size == from_csv.tick_size


def test_tick_size_is_inferred_and_logged_when_null(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _csv(tmp_path, _quotes())
    with caplog.at_level(logging.INFO, logger="alpha_rl.market"):
        assert read_quotes_file(path, None, 1).tick_size == 0.01
    assert "tick_size inferred as 0.01" in caplog.text
    assert read_quotes_file(path, 0.005, 1).tick_size == 0.005


def test_iso_timestamps_become_nanoseconds(tmp_path: Path) -> None:
    frame = _quotes(rows=3)
    frame["timestamp"] = ["2024-01-02T09:30:00Z", "2024-01-02T09:30:00.5Z", "2024-01-02T09:30:01Z"]
    book = read_quotes_file(_csv(tmp_path, frame), 0.01, 1)
    assert book.timestamps is not None
    np.testing.assert_array_equal(np.diff(book.timestamps), [500_000_000, 500_000_000])


def test_a_relative_path_resolves_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "data").mkdir()
    _csv(tmp_path / "data", _quotes())
    monkeypatch.chdir(tmp_path)
    assert read_quotes_file("data/quotes.csv", 0.01, 1).source == str(tmp_path / "data/quotes.csv")
    message = _error(tmp_path / "data" / "other.csv")
    assert "not found" in message
    with pytest.raises(MarketDataError, match=str(tmp_path / "other.csv")):
        read_quotes_file("other.csv", 0.01, 1)


def test_load_market_through_the_real_config(tmp_path: Path) -> None:
    path = _csv(tmp_path, _quotes(rows=1000))
    cfg, choices = compose_train(["market=file", f"market.path={path}"])
    assert choices["market"] == "file"
    market = load_market(cfg.market, cfg.seed, SingleSplit(0.8))
    assert (market.train.T, market.heldout.T, market.heldout.start) == (800, 200, 800)
    assert market.train.tick_size == 0.01 and market.train.source == str(path)
    cfg, _ = compose_train(["market=file", f"market.path={path}", "market.min_rows=1001"])
    with pytest.raises(MarketDataError, match=r"1000 data rows.*market\.min_rows=1001"):
        load_market(cfg.market, cfg.seed, SingleSplit(0.8))


def test_an_unset_path_says_how_to_set_it() -> None:
    cfg, _ = compose_train(["market=file"])
    with pytest.raises(MarketDataError, match=r"market\.path is not set"):
        load_market(cfg.market, cfg.seed, SingleSplit(0.8))


# --- bad values: each reported at its first offending row, with its column ---


def _set(column: str, rows: list[int], value: object) -> Callable[[pd.DataFrame], None]:
    def mutate(frame: pd.DataFrame) -> None:
        if isinstance(value, str):
            frame[column] = frame[column].astype(object)
        for row in rows:
            frame.loc[row, column] = value(frame, row) if callable(value) else value

    return mutate


BAD_VALUES = {
    "nan": (_set("ask_px_1", [12, 4], np.nan), 4, "ask_px_1", "nan"),
    "non-numeric": (_set("bid_sz_0", [6], "abc"), 6, "bid_sz_0", "non-numeric value 'abc'"),
    "non-positive price": (_set("bid_px_1", [9, 3], 0.0), 3, "bid_px_1", "prices must be > 0"),
    "crossed": (
        _set("ask_px_0", [5], lambda f, r: f.loc[r, "bid_px_0"]),
        5,
        "ask_px_0",
        "crossed book",
    ),
    "bid levels": (
        _set("bid_px_1", [8], lambda f, r: f.loc[r, "bid_px_0"] + 0.01),
        8,
        "bid_px_1",
        "strictly decreasing",
    ),
    "ask levels": (
        _set("ask_px_1", [11, 15], lambda f, r: f.loc[r, "ask_px_0"]),
        11,
        "ask_px_1",
        "strictly increasing",
    ),
    "negative size": (_set("ask_sz_1", [2], -1.0), 2, "ask_sz_1", "negative size"),
    "timestamps": (
        _set("timestamp", [9], lambda f, r: f.loc[r - 1, "timestamp"] - 1),
        9,
        "timestamp",
        "decreasing timestamps",
    ),
    "bad time": (_set("timestamp", [7], "noon"), 7, "timestamp", "'noon'"),
}


@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_bad_values_name_file_row_line_and_column(tmp_path: Path, case: str) -> None:
    mutate, index, column, what = BAD_VALUES[case]
    frame = _quotes()
    mutate(frame)
    message = _error(_csv(tmp_path, frame))
    line = next(x for x in message.splitlines() if what in x)
    assert f"row {index + 1} (line {index + 2}), column {column}:" in line


@pytest.mark.parametrize("case", ["nan", "crossed", "negative size"])
def test_bad_parquet_values_name_file_row_and_column(tmp_path: Path, case: str) -> None:
    mutate, index, column, what = BAD_VALUES[case]
    frame = _quotes()
    mutate(frame)
    message = _error(_parquet(tmp_path, frame))
    assert f"row {index + 1}, column {column}: " in next(
        x for x in message.splitlines() if what in x
    )


def test_a_blank_line_is_reported_not_skipped(tmp_path: Path) -> None:
    path = _csv(tmp_path, _quotes())
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:4], "", *lines[4:]]) + "\n")
    assert "row 4 (line 5), column bid_px_0: missing or nan value" in _error(path)
    path.write_text("\n".join([*lines[:4], "", *lines[4:], "", ""]) + "\n")  # and at the end
    assert "row 4 (line 5), column bid_px_0: missing or nan value" in _error(path)


@pytest.mark.parametrize(  # appended to a file that ends with its last row's newline
    ("ending", "blanks"), [("\n\n\n", 3), (",,,,,,,,\n\n", 2), ("\r\n\r\n", 2), ("\n", 1)]
)
def test_blank_lines_that_end_a_csv_are_ignored(
    tmp_path: Path, ending: str, blanks: int, caplog: pytest.LogCaptureFixture
) -> None:
    frame = _quotes(timestamps=False).assign(timestamp=1_700_000_000_000_000_000 + np.arange(ROWS))
    path = _csv(tmp_path, frame)
    path.write_bytes(path.read_bytes() + ending.encode())
    with caplog.at_level(logging.INFO, logger="alpha_rl.market"):
        book = read_quotes_file(path, tick_size=0.01, min_rows=ROWS)
    assert book.T == ROWS
    np.testing.assert_array_equal(book.timestamps, frame["timestamp"])  # ns kept exactly
    assert f"{blanks} blank line(s) at the end ignored" in caplog.text


# --- bad files ---


def test_missing_columns_are_listed_with_what_was_found(tmp_path: Path) -> None:
    message = _error(_csv(tmp_path, _quotes().drop(columns=["ask_sz_0", "bid_px_0"])))
    assert "missing required column(s) bid_px_0, ask_sz_0" in message
    assert "found ['timestamp', 'ask_px_0'" in message


def test_a_level_missing_one_column_names_it(tmp_path: Path) -> None:
    message = _error(_csv(tmp_path, _quotes(levels=3).drop(columns=["bid_sz_1"])))
    assert "missing column(s) bid_sz_1 while bid_px_1, ask_px_1, ask_sz_1 exist" in message


def test_a_gap_between_levels_is_an_error(tmp_path: Path) -> None:
    frame = _quotes(levels=3).drop(columns=["bid_px_1", "ask_px_1", "bid_sz_1", "ask_sz_1"])
    assert "missing column(s) bid_px_1, ask_px_1, bid_sz_1, ask_sz_1" in _error(
        _csv(tmp_path, frame)
    )


def test_unknown_extension_unreadable_and_directory(tmp_path: Path) -> None:
    text = tmp_path / "quotes.txt"
    text.write_text("bid_px_0\n1\n")
    assert "unknown file extension '.txt'" in _error(text)
    garbage = tmp_path / "quotes.parquet"
    garbage.write_bytes(b"not parquet at all")
    assert "cannot be read as Parquet" in _error(garbage)
    (tmp_path / "folder.csv").mkdir()
    assert "is not a file" in _error(tmp_path / "folder.csv")


def test_too_few_rows_names_the_key(tmp_path: Path) -> None:
    message = _error(_csv(tmp_path, _quotes()), min_rows=100)
    assert f"{ROWS} data rows, fewer than market.min_rows=100" in message
    assert "0 data rows" in _error(_csv(tmp_path, _quotes(rows=0), "empty.csv"))
