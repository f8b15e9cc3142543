"""Values that parse but cannot be right: beyond float32, True/False, a column named twice,
timestamps that change units, absurd price moves, a tick size far from the prices' grid, a
path that loops. Each is refused with the file and its row or column, or warned about in one
line; real data (gaps, news jumps) passes without a word."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from alpha_rl.errors import MarketDataError
from alpha_rl.market import read_quotes_file

TICK = 0.01
ROWS = 400


def _walk(rows: int = ROWS, jumps: dict[int, int] | None = None, seed: int = 0) -> pd.DataFrame:
    """An L1 book near 100 on a 0.01 grid, one tick wide: the bid moves -1, 0 or +1 tick a
    row (the median mid move is one tick), `jumps` {row: ticks} set moves; epoch seconds."""
    rng = np.random.default_rng(seed)
    steps = rng.choice([-1, 0, 1], rows)
    for row, ticks in (jumps or {}).items():
        steps[row] = ticks
    bid = 10_000 + np.cumsum(steps)
    return pd.DataFrame(
        {
            "timestamp": 1_700_000_000 + np.arange(rows),
            "bid_px_0": bid * TICK,
            "ask_px_0": (bid + 1) * TICK,
            "bid_sz_0": 3.0 + np.arange(rows) % 4,
            "ask_sz_0": 2.0 + np.arange(rows) % 5,
        }
    )


def _csv(tmp_path: Path, frame: pd.DataFrame, name: str = "quotes.csv") -> Path:
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path


def _refused(path: Path, *parts: str, tick: float | None = TICK) -> str:
    """The one-line MarketDataError of reading `path`; it names the file and every part."""
    with pytest.raises(MarketDataError) as info:
        read_quotes_file(path, tick, 1)
    message = str(info.value)
    assert "\n" not in message, message
    for part in (str(path), *parts):
        assert part in message, f"{part!r} not in {message!r}"
    return message


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


# --- case 1: values float32 cannot hold; absurd moves ---


@pytest.mark.parametrize(
    ("column", "cell", "says"),
    [
        ("ask_px_0", "1e300", "1e+300 is too large: the kernels compute in float32"),
        ("bid_px_0", "1e400", "inf is not finite"),
        ("bid_px_0", "-inf", "-inf is not finite"),
        ("ask_sz_0", "2e38", "2e+38 is too large: the kernels sum a row's 2 sizes in float32"),
    ],
)
def test_a_value_float32_cannot_hold_is_refused_with_its_row(
    tmp_path: Path, column: str, cell: str, says: str
) -> None:
    frame = _walk().astype({column: object})
    frame.loc[200, column] = cell
    _refused(_csv(tmp_path, frame), f"row 201 (line 202), column {column}: {says}")


def test_a_fat_finger_price_is_refused_with_its_row(tmp_path: Path) -> None:
    frame = _walk()
    frame.loc[150, ["bid_px_0", "ask_px_0"]] = [9_999_999.99, 10_000_000.0]  # 100 -> 1e7
    _refused(
        _csv(tmp_path, frame),
        "row 151 (line 152), column bid_px_0: 9999999.99 after ",
        "times the median mid move 0.01: a fat finger",
    )
    frame = _walk()
    frame.loc[150, "ask_px_0"] = 2e9  # only a deep-looking ask: the mid moves by 1e9
    _refused(_csv(tmp_path, frame, "ask.csv"), "row 151 (line 152), column ask_px_0: 2000000000")


def test_gaps_and_news_jumps_pass_and_a_squeeze_is_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    jumps = {100: 300, 200: -1_000, 300: 3_000}  # 300 to 3,000 times the median move
    with caplog.at_level(logging.WARNING, logger="alpha_rl.market"):
        read_quotes_file(_csv(tmp_path, _walk(jumps=jumps)), TICK, 1)
    assert _warnings(caplog) == []
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="alpha_rl.market"):
        book = read_quotes_file(_csv(tmp_path, _walk(jumps={250: 20_000})), TICK, 1)  # x3
    assert book.T == ROWS
    (warning,) = _warnings(caplog)
    assert "1 row(s) where a price moves 1e+04 or more times the median mid move 0.01" in warning
    assert "the first at row 251 (line 252)" in warning


def test_a_move_across_a_session_break_is_a_gap_not_a_fat_finger(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    frame = _walk(jumps={250: 20_000})  # a weekend gap of 20,000 ticks at row 251
    frame.loc[250:, "timestamp"] += 2 * 86_400
    path = _csv(tmp_path, frame)
    with caplog.at_level(logging.WARNING, logger="alpha_rl.market"):
        book = read_quotes_file(path, TICK, 1, session_gap=3600)
    assert book.breaks.tolist() == [250] and _warnings(caplog) == []
    frame.loc[100, ["bid_px_0", "ask_px_0"]] = [9_999_999.99, 10_000_000.0]  # within a session
    _refused(_csv(tmp_path, frame, "fat.csv"), "row 101 (line 102), column bid_px_0: 9999999.99")


# --- case 2: the tick size against the prices' own grid ---


def test_a_tick_size_far_from_the_prices_grid_is_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _csv(tmp_path, _walk())
    for tick, how in ((1e6, "1e+08 times coarser"), (1e-13, "1e+11 times finer")):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="alpha_rl.market"):
            assert read_quotes_file(path, tick, 1).tick_size == tick  # warned, not changed
        (warning,) = _warnings(caplog)
        assert warning.startswith(f"{path}: market.tick_size={tick} is {how} than the prices' ")
        assert "own grid 0.01 (their smallest step; median price 100." in warning
        assert warning.endswith("check market.tick_size")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="alpha_rl.market"):
        read_quotes_file(path, 0.01, 1)
        read_quotes_file(path, 0.005, 1)  # a half-cent tick on cent prices: not far
        read_quotes_file(path, None, 1)
    assert _warnings(caplog) == []


def test_an_inferred_tick_of_float_noise_is_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    frame = _walk()
    frame["bid_px_0"] += np.random.default_rng(1).uniform(0, 1e-9, ROWS)  # off any grid
    path = _csv(tmp_path, frame)
    with caplog.at_level(logging.WARNING, logger="alpha_rl.market"):
        tick = read_quotes_file(path, None, 1).tick_size
    assert tick < 1e-9
    (warning,) = _warnings(caplog)
    assert f"{path}: tick_size inferred as {tick} is less than 1e-09 of the median price" in (
        warning
    )
    assert "not on a grid (float noise?)" in warning and "set market.tick_size" in warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="alpha_rl.market"):
        read_quotes_file(path, TICK, 1)  # the right tick given: noise within it is fine
    assert _warnings(caplog) == []


# --- case 3: a column named twice ---


def test_a_csv_header_with_a_column_twice_is_refused(tmp_path: Path) -> None:
    path = _csv(tmp_path, _walk())
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0] + ",bid_px_0", *(x + ",1.0" for x in lines[1:])]) + "\n")
    _refused(path, "the header (line 1) has column 'bid_px_0' twice (columns 2 and 6)")
    other = tmp_path / "notes.csv"
    other.write_text("\n".join([lines[0] + ",note,note", *(x + ",a,b" for x in lines[1:])]))
    assert read_quotes_file(other, TICK, 1).T == ROWS  # ignored columns may repeat
    export = tmp_path / "export.csv"
    export.write_text("Bid,Ask,Bid,bid_sz_0,ask_sz_0\n1.1,1.2,1.0,1,1\n")
    with pytest.raises(MarketDataError, match=r"has column 'Bid' twice \(columns 1 and 3\)"):
        read_quotes_file(export, TICK, 1, columns={"Bid": "bid_px_0", "Ask": "ask_px_0"})


def test_a_parquet_schema_with_a_column_twice_is_refused(tmp_path: Path) -> None:
    frame = _walk(rows=3)
    arrays = [pa.array(frame[c]) for c in frame.columns] + [pa.array(frame["ask_px_0"])]
    path = tmp_path / "quotes.parquet"
    pq.write_table(pa.table(arrays, names=[*frame.columns, "ask_px_0"]), path)
    _refused(path, "the Parquet schema has column 'ask_px_0' twice (columns 3 and 6)")


# --- case 4: True/False is neither a size nor a price ---


def test_boolean_cells_are_refused_with_column_and_row(tmp_path: Path) -> None:
    frame = _walk()
    frame["ask_sz_0"] = np.arange(ROWS) % 3 == 0  # a column of True/False: read as 1/0 before
    _refused(_csv(tmp_path, frame), "row 1 (line 2), column ask_sz_0: boolean True: a size is")
    frame = _walk().astype({"bid_sz_0": object})
    frame.loc[5, "bid_sz_0"] = "False"  # one among numbers
    _refused(_csv(tmp_path, frame, "one.csv"), "row 6 (line 7), column bid_sz_0: boolean 'False'")
    frame = _walk()
    frame["bid_px_0"] = [None, *([True] * (ROWS - 1))]  # bools with a gap: an object column
    path = tmp_path / "quotes.parquet"
    frame.to_parquet(path, index=False)
    _refused(path, "row 2, column bid_px_0: boolean True: a price is a number, not True/False")


def test_boolean_timestamps_are_refused(tmp_path: Path) -> None:
    frame = _walk()
    frame["timestamp"] = np.arange(ROWS) > 2
    _refused(_csv(tmp_path, frame), "row 1 (line 2), column timestamp: ", "False")


# --- case 5: timestamps that change units ---


@pytest.mark.parametrize(
    ("scale", "how"),
    [
        (1_000, "1000 times larger (epoch seconds then milliseconds)"),
        (1_000_000_000, "1e+09 times larger (epoch seconds then nanoseconds)"),
        (0.001, "1000 times smaller (epoch milliseconds then seconds)"),
    ],
)
def test_timestamps_that_change_units_are_refused_at_the_change(
    tmp_path: Path, scale: float, how: str
) -> None:
    frame = _walk()
    stamps = frame["timestamp"].to_numpy(np.int64) * (1 if scale > 1 else 1_000)
    stamps[300:] = (stamps[300:] * scale).astype(np.int64)
    frame["timestamp"] = stamps
    message = _refused(
        _csv(tmp_path, frame),
        f"row 301 (line 302), column timestamp: {stamps[300]} after {stamps[299]}: the "
        f"timestamps change units here, {how}",
        "write every timestamp in one unit",
    )
    assert "decreasing" not in message


def test_small_numbers_and_counters_are_not_unit_changes(tmp_path: Path) -> None:
    frame = _walk(rows=6)
    frame["timestamp"] = [0.001, 0.5, 2.0, 3_600.0, 86_000.0, 86_399.0]  # s since an open
    assert read_quotes_file(_csv(tmp_path, frame), TICK, 1).timestamps[-1] == 86_399.0
    frame["timestamp"] = [0, 1, 2, 1_000_000, 1_000_001, 1_000_002]  # a counter that skips
    assert read_quotes_file(_csv(tmp_path, frame), TICK, 1).T == 6


# --- case 6: a path that loops ---


def test_a_symlink_loop_as_the_path_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "loop.csv").symlink_to("loop")
    (tmp_path / "loop").symlink_to("loop.csv")
    monkeypatch.chdir(tmp_path)
    _refused(Path("loop.csv"), "market.path) is a loop of symbolic links", "point market.path")
