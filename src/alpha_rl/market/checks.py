"""The values of a quotes file checked: each problem named at its first offending row and column.

Cells must be numbers (not text, not True/False), finite, and fit in float32 (the kernels' type);
the book must be uncrossed with ordered levels and sizes >= 0. Beyond the cells, a price that
moves by an absurd multiple of the series' typical move is refused (a fat finger, a sentinel
price, a change of units) or warned about, and a tick size far from the prices' own grid is
warned about (docs/markets.md says why these thresholds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from pandas.api.types import is_bool_dtype, is_numeric_dtype, is_object_dtype

from alpha_rl.convert import F32_MAX

# a step between prices below this fraction of the median price is float noise, not a tick:
# real ticks are 1e-8 of the price or more (0.01 on a 700,000 USD share), float64 noise 1e-12 or
# less
NOISE = 1e-9
# price moves, in multiples of the median non-zero move of the level-0 mid: news jumps and
# weekend or overnight gaps stay below ~1e3; a crash or a 50% gap may pass 1e4 (warned); nothing
# traded moves 1e6 typical moves in one tick (refused: a fat finger, a sentinel, a unit change)
WARN_MOVE = 1e4
REFUSE_MOVE = 1e6
TICK_FAR = 10.0  # a given tick this many times coarser or finer than the prices' grid: warned
TICK_DIGITS = 9  # significant digits kept of an inferred tick size (drops float noise)

# a check: (column, [T] bool mask of offending rows, description of the value at a row)
Hit = tuple[str, np.ndarray, Callable[[int], str]]


@dataclass(frozen=True)
class Where:
    """How to name a data row: CSV files also give the line (the header is line 1)."""

    csv: bool
    sources: Mapping[str, str] = field(default_factory=dict)  # our column -> the file's name

    def row(self, index: int) -> str:
        """'row r (line n)' of 0-based data row `index`."""
        return f"row {index + 1} (line {index + 2})" if self.csv else f"row {index + 1}"

    def problem(self, hits: list[Hit]) -> list[str]:
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
        return [f"{self.row(best[0])}, column {self.column(column)}: {describe(best[0])}"]

    def column(self, name: str) -> str:
        """Our column `name`, with the file's own name where market.columns renamed it."""
        return f"{self.sources[name]!r} (mapped to {name})" if name in self.sources else name


def show(value: object) -> str:
    """repr of a cell, NumPy scalars shown as plain Python values."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def booleans(series: pd.Series) -> np.ndarray:
    """[T] bool: the cells that hold True or False (a bool column, or bools among objects)."""
    if is_bool_dtype(series):
        return series.notna().to_numpy()
    if is_object_dtype(series):
        return np.fromiter((isinstance(v, bool | np.bool_) for v in series), bool, len(series))
    return np.zeros(len(series), dtype=bool)


def numbers(
    frame: pd.DataFrame, names: list[str], where: Where, levels: int
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Each column as [T] float64 (NaN where unusable) and its problems: text or True/False
    cells, then missing, infinite or beyond float32 values."""
    columns: dict[str, np.ndarray] = {}
    text_hits: list[Hit] = []
    value_hits: list[Hit] = []
    for name in names:
        series = frame[name]
        raw = series.to_numpy()
        flags = booleans(series)
        if is_numeric_dtype(series) and not is_bool_dtype(series):
            values = series.to_numpy(dtype=np.float64, na_value=np.nan)
            text = np.zeros(len(series), dtype=bool)
        else:
            coerced = pd.to_numeric(series, errors="coerce")
            values = coerced.to_numpy(dtype=np.float64, na_value=np.nan)
            text = (coerced.isna() & series.notna()).to_numpy()
        unusable = text | flags
        values = np.where(unusable, np.nan, values)
        columns[name] = values
        size = "_sz_" in name
        kind = "a size is a number of lots" if size else "a price is a number"
        # a row's 2L sizes are summed in float32 (the depth imbalance): each must leave room
        limit = F32_MAX / (2 * levels) if size else F32_MAX
        why = (
            f"the kernels sum a row's {2 * levels} sizes in float32, so each must be"
            if size
            else "the kernels compute in float32, where"
        )
        text_hits.append((name, unusable, lambda r, raw=raw, f=flags, k=kind: (
            f"boolean {show(raw[r])}: {k}, not True/False" if f[r] or _says_bool(raw[r])
            else f"non-numeric value {show(raw[r])}")))  # fmt: skip
        with np.errstate(invalid="ignore"):
            bad = (~np.isfinite(values) | (np.abs(values) > limit)) & ~unusable
        value_hits.append((name, bad, lambda r, v=values, m=limit, w=why: _bad(v[r], m, w)))
    return columns, where.problem(text_hits) + where.problem(value_hits)


def _says_bool(cell: object) -> bool:
    """A text cell that reads as a boolean (True, false, ...): pandas' own spellings."""
    return isinstance(cell, str) and cell.strip() in ("True", "False", "TRUE", "FALSE",
                                                        "true", "false")  # fmt: skip


def _bad(value: float, limit: float, why: str) -> str:
    """What is wrong with a number that is missing, infinite or beyond `limit` (`why`)."""
    if np.isnan(value):
        return "missing or nan value"
    if np.isinf(value):
        return f"{value} is not finite"
    return f"{value:.6g} is too large: {why} |x| <= {limit:.3g}"


def book_problems(sides: dict[str, np.ndarray], where: Where) -> list[str]:
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
    crossed = lambda r: f"crossed book: {value('ask_px', r, 0)} <= {value('bid_px', r, 0)}"  # noqa: E731
    problems += where.problem([("ask_px_0", bid[:, 0] >= ask[:, 0], crossed)])
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
    negative = lambda r, f, lv: f"negative size {value(f, r, lv)}"  # noqa: E731
    problems += where.problem(
        [
            (f"{f}_{lv}", sides[f][:, lv] < 0, lambda r, f=f, lv=lv: negative(r, f, lv))
            for f in ("bid_sz", "ask_sz")
            for lv in levels
        ]
    )
    return problems


# --- moves and ticks: plausible for a traded price series? ---


def median_move(sides: dict[str, np.ndarray]) -> float | None:
    """The median non-zero |move| of the level-0 mid between rows (moves below NOISE x the
    median price ignored), or None when it never moves."""
    mid = (sides["bid_px"][:, 0] + sides["ask_px"][:, 0]) / 2.0
    if mid.size < 2:
        return None
    moves = np.abs(np.diff(mid))
    moves = moves[moves > NOISE * float(np.median(mid))]
    return float(np.median(moves)) if moves.size else None


def move_problems(
    sides: dict[str, np.ndarray], where: Where, breaks: np.ndarray
) -> tuple[list[str], str | None]:
    """The first price that moves REFUSE_MOVE or more times the median mid move from the row
    before (a problem), and a warning naming the first of those that move WARN_MOVE or more;
    the rows that begin a session ([S] int64 `breaks`) are left out: a gap may move anything."""
    base = median_move(sides)
    if base is None:
        return [], None
    hits: list[Hit] = []
    warned = np.zeros(sides["bid_px"].shape[0], dtype=bool)
    for family in ("bid_px", "ask_px"):
        for lv in range(sides[family].shape[1]):
            px = sides[family][:, lv]
            moves = np.concatenate([[0.0], np.abs(np.diff(px))]) / base
            moves[breaks] = 0.0
            warned |= moves >= WARN_MOVE

            def describe(r: int, px: np.ndarray = px, moves: np.ndarray = moves) -> str:
                return (
                    f"{px[r]:.10g} after {px[r - 1]:.10g}, a move of {moves[r]:.3g} times the "
                    f"median mid move {base:.3g}: a fat finger, a placeholder price or a change "
                    f"of units? ({REFUSE_MOVE:.0e} typical moves in one row are refused)"
                )

            hits.append((f"{family}_{lv}", moves >= REFUSE_MOVE, describe))
    problems = where.problem(hits)
    if problems or not warned.any():
        return problems, None
    first = int(warned.argmax())
    return [], (
        f"{np.count_nonzero(warned)} row(s) where a price moves {WARN_MOVE:.0e} or more times the "
        f"median mid move {base:.3g} from the row before, the first at {where.row(first)}; "
        f"check those rows (a crash or a gap can do that, a fat finger too; "
        f"{REFUSE_MOVE:.0e} times is refused)"
    )


def infer_tick(sides: dict[str, np.ndarray]) -> float:
    """The smallest positive step between distinct prices, to TICK_DIGITS significant digits."""
    prices = np.unique(np.concatenate([sides["bid_px"].ravel(), sides["ask_px"].ravel()]))
    step = float(np.diff(prices).min())  # bid < ask on every row: at least two distinct prices
    return float(f"{step:.{TICK_DIGITS}g}")


def tick_warning(tick: float, inferred: bool, sides: dict[str, np.ndarray]) -> str | None:
    """Why `tick` is implausible for these prices (below NOISE x the median price: not a grid;
    a given tick TICK_FAR times coarser or finer than the prices' own grid), or None."""
    prices = np.unique(np.concatenate([sides["bid_px"].ravel(), sides["ask_px"].ravel()]))
    median = float(np.median((sides["bid_px"][:, 0] + sides["ask_px"][:, 0]) / 2.0))
    steps = np.diff(prices)
    steps = steps[steps > NOISE * median]
    grid = float(f"{steps.min():.{TICK_DIGITS}g}") if steps.size else None
    if inferred:
        if tick > NOISE * median:
            return None
        beyond = f"; beyond that noise their smallest step is {grid}" if grid else ""
        return (
            f"tick_size inferred as {tick} is less than {NOISE:.0e} of the median price "
            f"{median:.10g}: the prices are not on a grid (float noise?){beyond}; set "
            "market.tick_size to the instrument's tick"
        )
    if grid is None or max(tick / grid, grid / tick) < TICK_FAR:
        return None
    how = f"{tick / grid:.3g} times coarser" if tick > grid else f"{grid / tick:.3g} times finer"
    return (
        f"market.tick_size={tick} is {how} than the prices' own grid {grid} (their smallest "
        f"step; median price {median:.10g}); the features count price moves in ticks: check "
        "market.tick_size"
    )
