"""Loading the configured market and splitting it by time into training and held-out parts."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from alpha_rl.errors import MarketDataError
from alpha_rl.market.book import Book
from alpha_rl.market.config import FileMarketConfig, SyntheticWavesConfig, market_config
from alpha_rl.market.files import read_quotes_file
from alpha_rl.market.synthetic import synthetic_waves

log = logging.getLogger(__name__)

MIN_PART_TICKS = 2  # a part needs a current and a next tick to step through


@dataclass(frozen=True)
class Market:
    """The series the agent trains on and the later series it is evaluated on."""

    train: Book
    heldout: Book


def split_book(book: Book, train_fraction: float) -> tuple[Book, Book]:
    """First round(T*train_fraction) ticks for training, the rest held out (by time, no overlap)."""
    if not 0 < train_fraction < 1:
        raise MarketDataError(
            f"market.split={train_fraction!r}: the training fraction must be in (0, 1)"
        )
    cut = round(book.T * train_fraction)
    if min(cut, book.T - cut) < MIN_PART_TICKS:
        raise MarketDataError(
            f"{book.source}: market.split={train_fraction} of {book.T} ticks leaves "
            f"{cut} for training and {book.T - cut} held out; each part needs at least "
            f"{MIN_PART_TICKS} ticks: use a longer series (market.ticks, or a longer file) "
            "or move market.split toward 0.5"
        )
    return book.slice(0, cut), book.slice(cut, book.T)


def load_market(cfg: DictConfig | Mapping[str, Any], seed: int) -> Market:
    """The composed `market` node's series split by time; a set `market.seed` overrides `seed`."""
    typed = market_config(cfg)
    if isinstance(typed, SyntheticWavesConfig):
        book = synthetic_waves(typed, seed if typed.seed is None else typed.seed)
    else:
        assert isinstance(typed, FileMarketConfig)
        book = read_quotes_file(typed.path, typed.tick_size, typed.min_rows)
    train, heldout = split_book(book, typed.split)
    log.info(
        "market: %s, %d ticks x %d levels, tick %s USD; train %d ticks, held out %d",
        book.source,
        book.T,
        book.L,
        book.tick_size,
        train.T,
        heldout.T,
    )
    return Market(train, heldout)
