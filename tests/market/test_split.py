"""The single split of a book by time into training and held-out parts; the Book container."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.errors import ConfigError, MarketDataError
from alpha_rl.market import Book, SingleSplit, divide, load_market, market_config, synthetic_waves
from alpha_rl.pipeline.configure.config import plan_run
from tests.helpers import compose_train


def _book(T: int, L: int = 2, timestamps: bool = True) -> Book:
    """A book whose every value encodes its tick, so that slices can be traced back."""
    t = np.arange(T, dtype=np.float64)[:, None]
    level = np.arange(L, dtype=np.float64)[None, :]
    return Book(
        bid_px=1000.0 + t - level,
        ask_px=1001.0 + t + level,
        bid_sz=1.0 + t + 0 * level,
        ask_sz=2.0 + t + 0 * level,
        tick_size=1.0,
        source="hand-made",
        timestamps=np.arange(T, dtype=np.int64) * 10 if timestamps else None,
    )


@pytest.mark.parametrize(("T", "fraction"), [(10, 0.8), (11, 0.5), (1000, 0.7), (7, 0.3)])
def test_parts_cover_the_series_in_order_without_overlap(T: int, fraction: float) -> None:
    book = _book(T)
    market = divide(book, SingleSplit(fraction))
    train, heldout = market.train, market.heldout
    assert market.fold.index is None and market.fold.test == market.fold.heldout
    assert len(train.mid) == round(T * fraction)
    assert train.T + heldout.T == T
    assert (train.start, heldout.start) == (0, train.T)
    for side in ("bid_px", "ask_px", "bid_sz", "ask_sz", "timestamps"):
        joined = np.concatenate([getattr(train, side), getattr(heldout, side)])
        np.testing.assert_array_equal(joined, getattr(book, side))
    assert train.timestamps is not None and heldout.timestamps is not None
    assert train.timestamps.max() < heldout.timestamps.min()
    assert heldout.source == book.source and heldout.tick_size == book.tick_size


def test_slices_keep_their_offset_in_the_source_series() -> None:
    book = _book(50)
    heldout = divide(book, SingleSplit(0.6)).heldout
    part = heldout.slice(5, 12)
    assert (part.start, part.T) == (35, 7)
    np.testing.assert_array_equal(part.bid_px, book.bid_px[35:42])
    np.testing.assert_array_equal(part.mid, book.mid[35:42])
    with pytest.raises(MarketDataError, match=r"slice \[5, 30\)"):
        heldout.slice(5, 30)


@pytest.mark.parametrize(("T", "fraction"), [(5, 0.9), (5, 0.1), (3, 0.5)])
def test_a_part_under_two_ticks_is_an_error(T: int, fraction: float) -> None:
    with pytest.raises(MarketDataError, match=r"at least 2 ticks.*validation\.split"):
        divide(_book(T), SingleSplit(fraction))


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.2, 1.5])
def test_the_fraction_must_be_inside_zero_one(fraction: float) -> None:
    cfg, _ = compose_train([f"validation.split={fraction}"])
    with pytest.raises(ConfigError, match=r"validation\.split"):
        plan_run(cfg)


def test_the_configured_split_is_applied() -> None:
    cfg, _ = compose_train(["market.ticks=1000", "validation.split=0.65"])
    market = load_market(cfg.market, cfg.seed, plan_run(cfg).validation)
    assert (market.train.T, market.heldout.T, market.heldout.start) == (650, 350, 650)
    whole = synthetic_waves(market_config(cfg.market), cfg.seed)
    np.testing.assert_array_equal(market.train.ask_sz, whole.ask_sz[:650])
    np.testing.assert_array_equal(market.heldout.bid_px, whole.bid_px[650:])


def test_a_book_refuses_inconsistent_shapes() -> None:
    good = _book(4)
    with pytest.raises(MarketDataError, match="ask_sz has shape"):
        Book(good.bid_px, good.ask_px, good.bid_sz, good.ask_sz[:, :1], 1.0, "x")
    with pytest.raises(MarketDataError, match="timestamps have shape"):
        Book(good.bid_px, good.ask_px, good.bid_sz, good.ask_sz, 1.0, "x", np.zeros(3))
    assert "T=4, L=2" in repr(good)
