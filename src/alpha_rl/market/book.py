"""The order book series every market source produces: T ticks of an L-level book."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from alpha_rl.errors import MarketDataError

_SIDES = ("bid_px", "ask_px", "bid_sz", "ask_sz")


@dataclass(frozen=True, eq=False)
class Book:
    """An L-level order book series: T ticks, absolute prices (float64) and sizes (float64)."""

    bid_px: np.ndarray  # [T, L] float64, best bid at level 0, strictly decreasing with level
    ask_px: np.ndarray  # [T, L] float64, best ask at level 0, strictly increasing with level
    bid_sz: np.ndarray  # [T, L] float64, >= 0 (lots)
    ask_sz: np.ndarray  # [T, L] float64, >= 0 (lots)
    tick_size: float  # price increment (USD)
    source: str  # "synthetic_waves(seed=0)" or the file path
    timestamps: np.ndarray | None = None  # [T] int64 or float64, non-decreasing
    start: int = 0  # index of row 0 of this book within its source series (for splits)
    # [S] int64, strictly increasing ticks in 1..T-1 that begin a new trading session (the time
    # since the tick before exceeded market.session_gap); empty: one session
    breaks: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    times: bool = False  # True: `timestamps` are times, int64 ns since the epoch, UTC (else the
    # file's own numbers, which name no date)
    zone: str | None = None  # market.timezone: the zone its days are dated in (None: UTC)

    def __post_init__(self) -> None:
        for name in _SIDES:
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=np.float64))
        shape = self.bid_px.shape
        if len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
            raise MarketDataError(
                f"{self.source}: a book needs arrays [T, L] with T, L >= 1, got bid_px {shape}"
            )
        for name in _SIDES[1:]:
            if getattr(self, name).shape != shape:
                raise MarketDataError(
                    f"{self.source}: {name} has shape {getattr(self, name).shape}, "
                    f"bid_px has {shape}; every side must be [T, L]"
                )
        if self.timestamps is not None and np.shape(self.timestamps) != (shape[0],):
            raise MarketDataError(
                f"{self.source}: timestamps have shape {np.shape(self.timestamps)}, "
                f"expected ({shape[0]},)"
            )
        breaks = np.asarray(self.breaks, dtype=np.int64).ravel()
        object.__setattr__(self, "breaks", breaks)
        if breaks.size and (breaks[0] < 1 or breaks[-1] > shape[0] - 1 or
                            np.any(np.diff(breaks) <= 0)):  # fmt: skip
            raise MarketDataError(
                f"{self.source}: session breaks must be strictly increasing ticks in "
                f"1..{shape[0] - 1}, got {breaks[:5].tolist()}..."
            )
        if not self.tick_size > 0:
            raise MarketDataError(f"{self.source}: tick_size must be > 0, got {self.tick_size}")

    @property
    def T(self) -> int:
        """Number of ticks."""
        return int(self.bid_px.shape[0])

    @property
    def L(self) -> int:
        """Number of book levels per side."""
        return int(self.bid_px.shape[1])

    @property
    def mid(self) -> np.ndarray:
        """[T] float64: (best bid + best ask) / 2."""
        return (self.bid_px[:, 0] + self.ask_px[:, 0]) / 2.0

    def _session_of_tick(self) -> np.ndarray:
        """[T]: per tick, the index of its session (0 before the first break)."""
        return np.searchsorted(self.breaks, np.arange(self.T), side="right")

    def session_first(self) -> np.ndarray:
        """[T] int32: per tick, the index of the first tick of its session (0 without breaks):
        perception's returns reach back no further."""
        return np.append(0, self.breaks)[self._session_of_tick()].astype(np.int32)

    def session_last(self) -> np.ndarray:
        """[T] int32: per tick, the index of the last tick of its session (T - 1 without breaks):
        an env force-closes at the step that reaches it, as at the end of the data."""
        ends = np.append(self.breaks - 1, self.T - 1)
        return ends[self._session_of_tick()].astype(np.int32)

    def slice(self, start: int, stop: int) -> Book:
        """Ticks [start, stop) of this book (views); `start` stays counted in the source series."""
        if not 0 <= start < stop <= self.T:
            raise MarketDataError(
                f"{self.source}: slice [{start}, {stop}) is not a non-empty range of 0..{self.T}"
            )
        return replace(
            self,
            bid_px=self.bid_px[start:stop],
            ask_px=self.ask_px[start:stop],
            bid_sz=self.bid_sz[start:stop],
            ask_sz=self.ask_sz[start:stop],
            timestamps=None if self.timestamps is None else self.timestamps[start:stop],
            start=self.start + start,
            breaks=self.breaks[(self.breaks > start) & (self.breaks < stop)] - start,
        )

    def __repr__(self) -> str:
        stamps = "with timestamps" if self.timestamps is not None else "no timestamps"
        return (
            f"Book({self.source}, T={self.T}, L={self.L}, start={self.start}, "
            f"tick_size={self.tick_size}, {stamps}, {self.breaks.size + 1} session(s))"
        )
