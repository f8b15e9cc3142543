"""Quote files as users export them: day-first times, time zones, own column names, no sizes,
trading sessions; each bad setting refused with the file and the row, column or key."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from alpha_rl.errors import MarketDataError
from alpha_rl.market import SingleSplit, load_market, market_config, read_quotes_file
from alpha_rl.market.checks import Where
from alpha_rl.market.times import FORMATS, check_format, propose_format
from tests.helpers import compose_train

DAY_FIRST = "%d.%m.%Y %H:%M:%S.%f"
S = 1_000_000_000  # ns per second
JAN_1_2017 = 1_483_228_800  # 2017-01-01T00:00:00Z, s since the epoch
JUL_1_2017 = JAN_1_2017 + 181 * 86_400  # 2017-07-01T00:00:00Z (Jan..Jun: 181 days)

# Dukascopy-style rows: local time, ask, bid, ask volume, bid volume
DUKASCOPY = [
    ("01.01.2017 22:00:00.000", 1.05212, 1.05160, 2.25, 1.5),
    ("01.01.2017 22:00:00.250", 1.05213, 1.05161, 3.0, 1.0),
    ("01.07.2017 12:00:00.500", 1.14100, 1.14090, 0.75, 4.5),
    ("02.07.2017 12:00:00.500", 1.14101, 1.14091, 1.0, 2.0),
]


def _write(tmp_path: Path, lines: list[str], name: str = "export.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _dukascopy(tmp_path: Path, rows: list[tuple] = DUKASCOPY) -> Path:
    body = [",".join(str(v) for v in row) for row in rows]
    return _write(tmp_path, ["Local time,Ask,Bid,AskVolume,BidVolume", *body])


DUKASCOPY_COLUMNS = {
    "Local time": "timestamp",
    "Ask": "ask_px_0",
    "Bid": "bid_px_0",
    "AskVolume": "ask_sz_0",
    "BidVolume": "bid_sz_0",
}


def _read(path: Path, **options: Any) -> Any:
    return read_quotes_file(path, 0.00001, 1, **options)


def _refused(path: Path, *parts: str, **options: Any) -> str:
    """The MarketDataError message of reading `path`; it names the file and every part."""
    with pytest.raises(MarketDataError) as info:
        _read(path, **options)
    message = str(info.value)
    for part in (str(path), *parts):
        assert part in message, f"{part!r} not in {message!r}"
    return message


def _same_book(a: Any, b: Any) -> None:
    for side in ("bid_px", "ask_px", "bid_sz", "ask_sz"):
        np.testing.assert_array_equal(getattr(a, side), getattr(b, side))
    if a.timestamps is None:
        assert b.timestamps is None
    else:
        np.testing.assert_array_equal(a.timestamps, b.timestamps)
        assert a.timestamps.dtype == b.timestamps.dtype == np.int64


# --- timestamps: a format, a time zone ---


def test_day_first_times_become_utc_nanoseconds(tmp_path: Path) -> None:
    book = _read(_dukascopy(tmp_path), columns=DUKASCOPY_COLUMNS, timestamp_format=DAY_FIRST)
    assert book.timestamps is not None and book.timestamps.dtype == np.int64
    assert book.timestamps[0] == (JAN_1_2017 + 22 * 3600) * S  # 1 Jan 22:00 UTC
    assert book.timestamps[2] == (JUL_1_2017 + 12 * 3600) * S + S // 2  # 1 Jul 12:00:00.5
    assert book.timestamps[3] - book.timestamps[2] == 86_400 * S  # 02.07 is 2 July, day first


def test_a_timezone_shifts_naive_times_by_its_offset_of_the_day(tmp_path: Path) -> None:
    path = _dukascopy(tmp_path)
    utc = _read(path, columns=DUKASCOPY_COLUMNS, timestamp_format=DAY_FIRST)
    zurich = _read(
        path, columns=DUKASCOPY_COLUMNS, timestamp_format=DAY_FIRST, timezone="Europe/Zurich"
    )
    assert zurich.timestamps[0] == (JAN_1_2017 + 21 * 3600) * S  # CET, UTC+1 in winter
    assert zurich.timestamps[2] == (JUL_1_2017 + 10 * 3600) * S + S // 2  # CEST, UTC+2
    np.testing.assert_array_equal(
        utc.timestamps - zurich.timestamps, [3600 * S, 3600 * S, 7200 * S, 7200 * S]
    )


def test_times_with_offsets_ignore_the_timezone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows = [
        ("2017-01-01T22:00:00+01:00", 1.2, 1.1, 1, 1),
        ("2017-07-01T22:00:00+02:00", 1.2, 1.1, 1, 1),
    ]
    path = _dukascopy(tmp_path, rows)
    with caplog.at_level(logging.WARNING, logger="alpha_rl.market"):
        book = _read(path, columns=DUKASCOPY_COLUMNS, timezone="America/New_York")
    assert "differing UTC offsets: each is converted to UTC by its own" in caplog.text
    np.testing.assert_array_equal(
        book.timestamps, [(JAN_1_2017 + 21 * 3600) * S, (JUL_1_2017 + 20 * 3600) * S]
    )


def test_a_parquet_datetime_column_takes_the_timezone(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "timestamp": pd.to_datetime(["2017-01-01 22:00", "2017-07-01 22:00"]),
            "bid_px_0": [1.1, 1.1],
            "ask_px_0": [1.2, 1.2],
            "bid_sz_0": [1.0, 1.0],
            "ask_sz_0": [1.0, 1.0],
        }
    )
    path = tmp_path / "quotes.parquet"
    frame.to_parquet(path, index=False)
    np.testing.assert_array_equal(
        _read(path, timezone="Europe/Zurich").timestamps,
        [(JAN_1_2017 + 21 * 3600) * S, (JUL_1_2017 + 20 * 3600) * S],
    )


def test_a_missing_time_with_a_format_is_named(tmp_path: Path) -> None:
    rows = [DUKASCOPY[0], ("", 1.05213, 1.05161, 3.0, 1.0)]
    _refused(
        _dukascopy(tmp_path, rows),
        "row 2 (line 3), column 'Local time' (mapped to timestamp): missing time",
        columns=DUKASCOPY_COLUMNS,
        timestamp_format=DAY_FIRST,
    )


# --- column names ---


def _canonical(tmp_path: Path, stamps: bool = True) -> Path:
    """DUKASCOPY with our column names and ISO-8601 UTC times."""
    header = (
        "timestamp,bid_px_0,ask_px_0,bid_sz_0,ask_sz_0"
        if stamps
        else "bid_px_0,ask_px_0,bid_sz_0,ask_sz_0"
    )
    body = []
    for time, ask, bid, ask_size, bid_size in DUKASCOPY:
        iso = pd.to_datetime(time, format=DAY_FIRST).isoformat() + "Z"
        cells = [iso] if stamps else []
        body.append(",".join(str(v) for v in [*cells, bid, ask, bid_size, ask_size]))
    return _write(tmp_path, [header, *body], "canonical.csv")


def test_a_dukascopy_export_loads_like_the_canonical_file(tmp_path: Path) -> None:
    mapped = _read(_dukascopy(tmp_path), columns=DUKASCOPY_COLUMNS, timestamp_format=DAY_FIRST)
    _same_book(mapped, _read(_canonical(tmp_path)))


def test_lowercase_stock_columns_load_like_the_canonical_file(tmp_path: Path) -> None:
    body = [f"{bid},{ask},{bs},{asz}" for _, ask, bid, asz, bs in DUKASCOPY]
    path = _write(tmp_path, ["bid,ask,bid_size,ask_size", *body])
    columns = {"bid": "bid_px_0", "ask": "ask_px_0", "bid_size": "bid_sz_0", "ask_size": "ask_sz_0"}
    _same_book(_read(path, columns=columns), _read(_canonical(tmp_path, stamps=False)))


def test_a_bad_cell_names_the_files_own_column(tmp_path: Path) -> None:
    rows = [*DUKASCOPY[:2], ("01.07.2017 12:00:00.500", 1.14100, -1.0, 0.75, 4.5)]
    _refused(
        _dukascopy(tmp_path, rows),
        "row 3 (line 4), column 'Bid' (mapped to bid_px_0): bid_px_0=-1 <= 0",
        columns=DUKASCOPY_COLUMNS,
        timestamp_format=DAY_FIRST,
    )


def test_default_size_fills_an_export_without_volumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _write(tmp_path, ["Bid,Ask", "1.1,1.2", "1.1,1.3"])
    columns = {"Bid": "bid_px_0", "Ask": "ask_px_0"}
    _refused(path, "missing required column(s) bid_sz_0, ask_sz_0", columns=columns)
    with caplog.at_level(logging.INFO, logger="alpha_rl.market"):
        book = _read(path, columns=columns, default_size=2.5)
    np.testing.assert_array_equal(book.bid_sz, [[2.5], [2.5]])
    np.testing.assert_array_equal(book.ask_sz, [[2.5], [2.5]])
    assert "bid_sz_0, ask_sz_0 set to market.default_size=2.5" in caplog.text
    np.testing.assert_array_equal(_read(path, columns=columns, default_size=0.0).bid_sz, [[0], [0]])


# --- sessions ---

WEEKEND = [  # Friday evening, a 30 min pause, Friday close; Sunday open; a lone tick on Monday
    "2024-01-05T21:00:00Z",
    "2024-01-05T21:30:00Z",
    "2024-01-05T21:59:00Z",
    "2024-01-07T22:00:00Z",
    "2024-01-07T22:00:01Z",
    "2024-01-07T22:05:00Z",
    "2024-01-08T09:00:00Z",
]


def _stamped(tmp_path: Path, stamps: list[object]) -> Path:
    body = [f"{t},1.1,1.2,1,1" for t in stamps]
    return _write(tmp_path, ["timestamp,bid_px_0,ask_px_0,bid_sz_0,ask_sz_0", *body])


def test_a_weekend_gap_begins_a_session(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _stamped(tmp_path, WEEKEND)
    assert _read(path).breaks.tolist() == []  # no session_gap: one session
    with caplog.at_level(logging.INFO, logger="alpha_rl.market"):
        book = _read(path, session_gap="1h")
    assert book.breaks.dtype == np.int64 and book.breaks.tolist() == [3, 6]
    assert book.session_last().tolist() == [2, 2, 2, 5, 5, 5, 6]
    assert "3 trading session(s)" in caplog.text and "2 days 00:01:00" in caplog.text
    warning = next(
        r for r in caplog.records
        if r.levelno == logging.WARNING and r.name == "alpha_rl.market.times"
    )  # fmt: skip
    assert "1 session(s) shorter than 3 ticks, the first beginning at row 7 (line 8)" in (
        warning.getMessage()
    )
    assert _read(path, session_gap="2D").breaks.tolist() == [3]
    assert _read(path, session_gap="3D").breaks.tolist() == []


def test_numeric_stamps_take_a_number_gap_in_their_units(tmp_path: Path) -> None:
    path = _stamped(tmp_path, [0, 1, 2, 10, 11, 12, 13, 30, 31, 32])
    assert _read(path, session_gap=5).breaks.tolist() == [3, 7]
    assert _read(path, session_gap=8.0).breaks.tolist() == [7]
    assert _read(path, session_gap=17).breaks.tolist() == []  # 13 -> 30 is not more than 17


@pytest.mark.parametrize(
    ("stamps", "gap", "spacing", "wide"),
    [(list(range(1_700_000_000, 1_700_000_010)), 0.5, "is 1)", 2),  # 1-second stamps, every tick
     ([0, 1, 5, 6, 10, 11, 15, 16], 3, "is 1)", 5),  # sessions of 2 ticks: none steps
     ([f"2024-01-05T21:00:{s:02d}Z" for s in range(10)], "500ms", "is 0 days 00:00:01)", "2s")],
)  # fmt: skip
def test_a_gap_that_leaves_no_session_to_step_in_is_refused_naming_it(
    tmp_path: Path, stamps: list[object], gap: object, spacing: str, wide: object
) -> None:
    path = _stamped(tmp_path, stamps)
    usual = f"set it above the ticks' usual spacing (the median gap between ticks {spacing}"
    says = (f"market.session_gap={gap!r}: it splits the {len(stamps)} ticks of",
            "an env needs 3 ticks of a session to step", usual)  # fmt: skip
    message = _refused(path, *says, session_gap=gap)
    assert "\n" not in message
    assert _read(path, session_gap=wide).breaks.size == 0  # a gap above the spacing: one session


# --- bad settings and bad cells ---


def test_a_time_not_in_the_format_names_row_line_column_and_value(tmp_path: Path) -> None:
    rows = [*DUKASCOPY[:2], ("2017-07-01 12:00:00", 1.14100, 1.14090, 0.75, 4.5)]
    _refused(
        _dukascopy(tmp_path, rows),
        "row 3 (line 4), column 'Local time' (mapped to timestamp): '2017-07-01 12:00:00' does "
        f"not match market.timestamp_format={DAY_FIRST!r}; fix market.timestamp_format",
        "market.timestamp_format='%Y-%m-%d %H:%M:%S' would read it, but not row 1 (line 2): "
        "'01.01.2017 22:00:00.000': the column mixes forms",
        columns=DUKASCOPY_COLUMNS,
        timestamp_format=DAY_FIRST,
    )


@pytest.mark.parametrize(
    ("local", "row"),
    [("29.10.2017 02:30:00.000", 2), ("26.03.2017 02:30:00.000", 2)],
    ids=["ambiguous", "nonexistent"],
)
def test_a_local_time_at_a_dst_change_names_its_row(tmp_path: Path, local: str, row: int) -> None:
    rows = [(local.replace("02:30", "01:00"), 1.2, 1.1, 1, 1), (local, 1.2, 1.1, 1, 1)]
    _refused(
        _dukascopy(tmp_path, rows),
        f"row {row} (line {row + 1}), column 'Local time' (mapped to timestamp): {local!r} is "
        "ambiguous or does not exist in market.timezone=Europe/Zurich",
        columns=DUKASCOPY_COLUMNS,
        timestamp_format=DAY_FIRST,
        timezone="Europe/Zurich",
    )


# --- a format proposed for text times that do not read ---

# exports whose times are not ISO-8601: (cells, the format they are written in); a day above 12
# (or a 12-hour clock) tells day-first from month-first
EXPORTS = {
    "day-first": (["01.01.2017 22:00:00.000", "13.01.2017 22:00:00.250"], DAY_FIRST),
    "month-first": (["01/02/2017 22:00", "01/13/2017 22:00"], "%m/%d/%Y %H:%M"),
    "dashes, 2-digit year": (["02-01-17 22:00:05", "13-01-17 22:00:06"], "%d-%m-%y %H:%M:%S"),
    "12-hour clock": (["1/13/2017 10:00:00 PM", "1/14/2017 1:00:00 AM"], "%m/%d/%Y %I:%M:%S %p"),
    "compact, milliseconds": (["20170101 220000123", "20170101 220001000"], "%Y%m%d %H%M%S%f"),
}
PROPOSED = re.compile(r"market\.timestamp_format='[^']*'")


@pytest.mark.parametrize("export", list(EXPORTS))
def test_the_format_proposed_for_unread_times_loads_the_file(tmp_path: Path, export: str) -> None:
    cells, written = EXPORTS[export]
    path = _stamped(tmp_path, cells)
    message = _refused(path, f"row 1 (line 2), column timestamp: {cells[0]!r} is not a number "
                       "or an ISO-8601 time: pass market.timestamp_format=", "which reads every "
                       "time of the column")  # fmt: skip
    override = PROPOSED.findall(message)
    assert override == [f"market.timestamp_format='{written}'"], message
    # the override as typed, through Hydra and the typed config, reads the file
    cfg, _ = compose_train(["market=file", f"market.path={path}", override[0]])
    fmt = market_config(cfg.market).timestamp_format
    check_format(fmt)
    want = pd.to_datetime(pd.Series(cells), format=written).dt.as_unit("ns").astype("int64")
    np.testing.assert_array_equal(_read(path, timestamp_format=fmt).timestamps, want.to_numpy())


def test_a_file_that_cannot_tell_day_first_from_month_first_gets_both(tmp_path: Path) -> None:
    message = _refused(
        _dukascopy(tmp_path),  # 01.01, 01.07, 02.07: no day above 12
        "'01.01.2017 22:00:00.000' is not a number or an ISO-8601 time",
        "if the export writes the day first",
        "so the file cannot tell them apart",
        columns=DUKASCOPY_COLUMNS,
    )
    day, month = PROPOSED.findall(message)
    assert (day, month) == (
        f"market.timestamp_format='{DAY_FIRST}'",
        "market.timestamp_format='%m.%d.%Y %H:%M:%S.%f'",
    )
    read = {fmt: _read(_dukascopy(tmp_path), columns=DUKASCOPY_COLUMNS,
                       timestamp_format=fmt.split("=", 1)[1].strip("'")).timestamps
            for fmt in (day, month)}  # fmt: skip
    assert read[day][2] == (JUL_1_2017 + 12 * 3600) * S + S // 2  # 1 July
    assert read[month][2] == (JAN_1_2017 + 6 * 86_400 + 12 * 3600) * S + S // 2  # 7 January


def test_a_format_that_reads_no_cell_gets_the_one_that_reads_them_all(tmp_path: Path) -> None:
    path = _stamped(tmp_path, EXPORTS["day-first"][0])
    _refused(
        path,
        "row 1 (line 2), column timestamp: '01.01.2017 22:00:00.000' does not match "
        "market.timestamp_format='%m/%d/%Y %H:%M'",
        f"pass market.timestamp_format='{DAY_FIRST}', which reads every time of the column",
        timestamp_format="%m/%d/%Y %H:%M",
    )


def test_times_no_common_form_reads_point_at_the_key(tmp_path: Path) -> None:
    _refused(
        _stamped(tmp_path, ["Jan 1 2017 22:00", "Jan 2 2017 22:00"]),
        "row 1 (line 2), column timestamp: 'Jan 1 2017 22:00' is not a number or an ISO-8601 "
        "time: no common form reads it: pass the strptime format of the column's times, e.g. "
        f"market.timestamp_format='{DAY_FIRST}' for '01.01.2017 22:00:00.000'",
    )
    _refused(
        _stamped(tmp_path, ["01.01.2017 22:00", "Jan 2 2017 22:00"]),
        "row 2 (line 3), column timestamp: 'Jan 2 2017 22:00' does not match "
        "market.timestamp_format='%d.%m.%Y %H:%M'; fix market.timestamp_format (or the file): "
        "no common form reads it either",
        timestamp_format="%d.%m.%Y %H:%M",
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_form_proposed_is_taken_and_proposed_for_its_own_times(fmt: str) -> None:
    check_format(fmt)
    text = pd.Series([pd.Timestamp(2017, 1, 13, 22, 5, 7, 250_000).strftime(fmt),
                      pd.Timestamp(2017, 2, 1, 9, 0, 0).strftime(fmt)])  # fmt: skip
    proposal = propose_format(text, 0, None, np.zeros(2, dtype=bool), Where(csv=True).row)
    assert proposal == f"pass market.timestamp_format='{fmt}', which reads every time of the column"


BAD_SETTINGS = {
    "unknown timezone": ({"timezone": "Mars/Base"}, "market.timezone='Mars/Base'", "IANA"),
    "lowercase timezone": ({"timezone": "europe/zurich"}, "market.timezone=", "case matters"),
    "format without codes": ({"timestamp_format": "dd.mm.yyyy"}, "market.timestamp_format=", "%"),
    "bad format code": (
        {"timestamp_format": "%Q"},
        "market.timestamp_format='%Q'",
        "bad directive",
    ),
    "unknown target": (
        {"columns": {"Bid": "bid"}},
        "market.columns=",
        "{'Bid': 'bid'} map onto no",
    ),
    "duplicate target": (
        {"columns": {"Bid": "bid_px_0", "bid": "bid_px_0"}},
        "market.columns=",
        "'Bid', 'bid' all map onto bid_px_0",
    ),
    "gap without unit": ({"session_gap": "3600"}, "market.session_gap='3600'", "needs a unit"),
    "gap unparseable": ({"session_gap": "soon"}, "market.session_gap='soon'", "positive duration"),
    "gap negative": ({"session_gap": "-1h"}, "market.session_gap='-1h'", "positive duration"),
    "gap zero": ({"session_gap": 0}, "market.session_gap=0", "positive number"),
    "gap negative number": ({"session_gap": -5.0}, "market.session_gap=-5.0", "positive number"),
    "default_size < 0": ({"default_size": -1.0}, "market.default_size=-1.0", ">= 0 (lots)"),
}


@pytest.mark.parametrize("case", list(BAD_SETTINGS))
def test_a_bad_setting_names_file_and_key(tmp_path: Path, case: str) -> None:
    options, key, what = BAD_SETTINGS[case]
    _refused(_canonical(tmp_path), key, what, **options)


@pytest.mark.parametrize("case", list(BAD_SETTINGS))
def test_market_config_refuses_a_bad_setting_before_reading(case: str) -> None:
    options, key, what = BAD_SETTINGS[case]
    cfg, _ = compose_train(["market=file", "market.path=never_read.csv"])
    node = {**dict(cfg.market), **options}
    with pytest.raises(MarketDataError) as info:
        market_config(node)
    assert key in str(info.value) and what in str(info.value)


def test_a_missing_source_column_lists_the_files_columns(tmp_path: Path) -> None:
    _refused(
        _dukascopy(tmp_path),
        "market.columns names column(s) ['Time']",
        "its columns are ['Local time', 'Ask', 'Bid', 'AskVolume', 'BidVolume']",
        columns={"Time": "timestamp", "Ask": "ask_px_0", "Bid": "bid_px_0"},
    )


def test_a_target_the_file_already_has_is_refused(tmp_path: Path) -> None:
    _refused(
        _canonical(tmp_path),
        "market.columns maps 'bid_sz_0' onto ask_sz_0",
        "already has a column of that name",
        columns={"bid_sz_0": "ask_sz_0"},
    )
    swapped = _read(_canonical(tmp_path), columns={"bid_sz_0": "ask_sz_0", "ask_sz_0": "bid_sz_0"})
    np.testing.assert_array_equal(swapped.ask_sz[:, 0], [r[4] for r in DUKASCOPY])


def test_a_session_gap_needs_a_timestamp_column(tmp_path: Path) -> None:
    _refused(
        _canonical(tmp_path, stamps=False),
        "market.session_gap='1h' needs timestamps",
        "map one with market.columns",
        session_gap="1h",
    )


def test_a_gap_of_the_wrong_kind_says_which_to_use(tmp_path: Path) -> None:
    _refused(_stamped(tmp_path, [0, 1, 2]), "market.session_gap='1h'", "plain numbers", "3600",
             session_gap="1h")  # fmt: skip
    _refused(_canonical(tmp_path), "market.session_gap=3600:", "are times", "'30min'",
             session_gap=3600)  # fmt: skip


# --- the composed config ---


def test_the_composed_config_takes_the_new_keys(tmp_path: Path) -> None:
    # two more ticks on 2 July: a session of 3 ticks, the fewest an env steps in
    later = [("02.07.2017 12:00:01.500", 1.14102, 1.14092, 1.0, 2.0),
             ("02.07.2017 12:00:02.500", 1.14103, 1.14093, 1.0, 2.0)]  # fmt: skip
    path = _dukascopy(tmp_path, [*DUKASCOPY, *later])
    overrides = [
        "market=file",
        f"market.path={path}",
        "market.columns={Bid: bid_px_0, Ask: ask_px_0, BidVolume: bid_sz_0, AskVolume: "
        "ask_sz_0, Local time: timestamp}",
        f"market.timestamp_format='{DAY_FIRST}'",
        "market.timezone=Europe/Zurich",
        "market.session_gap=1h",
        "market.default_size=1",
        "market.min_rows=4",
    ]
    cfg, _ = compose_train(overrides)
    typed = market_config(cfg.market)
    assert typed.columns == tuple(
        {"Bid": "bid_px_0", "Ask": "ask_px_0", "BidVolume": "bid_sz_0", "AskVolume": "ask_sz_0",
         "Local time": "timestamp"}.items()
    )  # fmt: skip
    assert (typed.timestamp_format, typed.timezone, typed.session_gap) == (
        DAY_FIRST,
        "Europe/Zurich",
        "1h",
    )
    assert typed.default_size == 1.0
    market = load_market(cfg.market, 0, SingleSplit(0.5))
    assert market.book.timestamps[0] == (JAN_1_2017 + 21 * 3600) * S
    assert market.book.breaks.tolist() == [2, 3]  # 1 Jan -> 1 Jul -> 2 Jul
    assert market.train.breaks.tolist() == [2] and market.heldout.breaks.tolist() == []


def test_the_defaults_leave_a_canonical_file_as_it_was(tmp_path: Path) -> None:
    cfg, _ = compose_train(["market=file", f"market.path={_canonical(tmp_path)}"])
    typed = market_config(cfg.market)
    assert (typed.timestamp_format, typed.timezone, typed.columns) == (None, None, ())
    assert (typed.default_size, typed.session_gap) == (None, None)


@pytest.mark.parametrize("columns", [["Bid", "bid_px_0"], {1: "bid_px_0"}, {"Bid": 0}, "Bid"])
def test_market_config_wants_columns_as_a_mapping_of_names(columns: object) -> None:
    cfg, _ = compose_train(["market=file", "market.path=never_read.csv"])
    with pytest.raises(MarketDataError, match=r"market\.columns=.*expected a mapping"):
        market_config({**dict(cfg.market), "columns": columns})
