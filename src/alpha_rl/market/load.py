"""Loading the configured market and dividing it by time into training and held-out parts."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from alpha_rl.market.book import Book
from alpha_rl.market.config import FileMarketConfig, SyntheticWavesConfig, market_config
from alpha_rl.market.files import read_quotes_file
from alpha_rl.market.folds import Fold, Validation
from alpha_rl.market.synthetic import synthetic_waves

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Market:
    """The series the agent trains on, the later series it is evaluated on, and the fold that
    divided them (with the source series' timestamps, when it has them)."""

    train: Book
    heldout: Book
    fold: Fold
    book: Book  # the whole source series

    def params(self) -> dict[str, object]:
        """The fold's ranges as MLflow params."""
        return self.fold.params(self.book.timestamps)


def divide(book: Book, validation: Validation) -> Market:
    """The book divided by the validation's fold: train and held-out parts (views)."""
    fold = validation.fold(book.T, book.source)
    train = book.slice(fold.train.start, fold.train.stop)
    heldout = book.slice(fold.heldout.start, fold.heldout.stop)
    return Market(train, heldout, fold, book)


def load_market(cfg: DictConfig | Mapping[str, Any], seed: int, validation: Validation) -> Market:
    """The composed `market` node's series divided by `validation` (the run plan's); a set
    `market.seed` overrides `seed`."""
    typed = market_config(cfg)
    if isinstance(typed, SyntheticWavesConfig):
        book = synthetic_waves(typed, seed if typed.seed is None else typed.seed)
    else:
        assert isinstance(typed, FileMarketConfig)
        book = read_quotes_file(
            typed.path,
            typed.tick_size,
            typed.min_rows,
            timestamp_format=typed.timestamp_format,
            timezone=typed.timezone,
            columns=dict(typed.columns),
            default_size=typed.default_size,
            session_gap=typed.session_gap,
            spread=typed.spread,
        )
    market = divide(book, validation)
    log.info(
        "market: %s, %d ticks x %d levels, tick %s %s, %d session(s); %s",
        book.source,
        book.T,
        book.L,
        book.tick_size,
        typed.currency,
        book.breaks.size + 1,
        market.fold.describe(book.timestamps),
    )
    return market
