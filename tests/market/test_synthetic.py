"""The synthetic wave market: determinism, a well-formed book, waves and an imbalance signal."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from alpha_rl.errors import MarketDataError
from alpha_rl.market import (
    Book,
    SingleSplit,
    SyntheticWavesConfig,
    load_market,
    market_config,
    synthetic_waves,
)
from tests.helpers import compose_train

TICKS = 40_000

SINGLE = SingleSplit(0.8)  # the default validation=single


@pytest.fixture(scope="module")
def waves() -> SyntheticWavesConfig:
    """The default synthetic_waves config of conf/, shortened to TICKS."""
    cfg, _ = compose_train([f"market.ticks={TICKS}"])
    typed = market_config(cfg.market)
    assert isinstance(typed, SyntheticWavesConfig)
    return typed


@pytest.fixture(scope="module")
def book(waves: SyntheticWavesConfig) -> Book:
    return synthetic_waves(waves, seed=0)


def _level0_imbalance(book: Book) -> np.ndarray:
    return (book.bid_sz[:, 0] - book.ask_sz[:, 0]) / (book.bid_sz[:, 0] + book.ask_sz[:, 0])


def _k_return_autocorr(book: Book, k: int) -> float:
    """Correlation of consecutive non-overlapping k-tick mid returns."""
    mid = book.mid
    returns = mid[k::k] - mid[:-k:k]
    return float(np.corrcoef(returns[:-1], returns[1:])[0, 1])


def test_same_seed_same_book_other_seed_other_book(waves: SyntheticWavesConfig) -> None:
    small = dataclasses.replace(waves, ticks=2000)
    first, again, other = (synthetic_waves(small, s) for s in (5, 5, 6))
    for side in ("bid_px", "ask_px", "bid_sz", "ask_sz"):
        np.testing.assert_array_equal(getattr(first, side), getattr(again, side))
        assert not np.array_equal(getattr(first, side), getattr(other, side)), side
    assert first.source == "synthetic_waves(seed=5)"


def test_a_longer_series_starts_with_the_shorter_one(waves: SyntheticWavesConfig) -> None:
    short = synthetic_waves(dataclasses.replace(waves, ticks=1500), seed=2)
    long = synthetic_waves(dataclasses.replace(waves, ticks=4000), seed=2)
    np.testing.assert_array_equal(short.bid_px, long.bid_px[:1500])
    np.testing.assert_array_equal(short.ask_px, long.ask_px[:1500])
    # level-0 sizes of the last tick see the next move, which only the longer series has
    np.testing.assert_array_equal(short.bid_sz[:-1], long.bid_sz[:1499])
    np.testing.assert_array_equal(short.ask_sz[:, 1:], long.ask_sz[:1500, 1:])


def test_shape_prices_on_ticks_and_ordered_levels(book: Book, waves: SyntheticWavesConfig) -> None:
    assert book.T == TICKS
    assert book.bid_px.shape == (TICKS, waves.levels)
    assert book.tick_size == waves.tick_size and book.start == 0 and book.timestamps is None
    for prices in (book.bid_px, book.ask_px):
        assert prices.dtype == np.float64
        assert (prices > 0).all()
        ticks = prices / book.tick_size
        assert np.abs(ticks - np.round(ticks)).max() < 1e-6
    assert (np.diff(book.bid_px, axis=1) < 0).all()
    assert (np.diff(book.ask_px, axis=1) > 0).all()
    assert np.allclose(np.diff(book.ask_px, axis=1), book.tick_size)
    for sizes in (book.bid_sz, book.ask_sz):
        assert (sizes >= 1).all() and (sizes == np.round(sizes)).all()
    assert np.allclose(book.mid, (book.bid_px[:, 0] + book.ask_px[:, 0]) / 2)


def test_spreads_of_one_to_three_ticks_at_the_configured_rates(
    book: Book, waves: SyntheticWavesConfig
) -> None:
    spread = np.round((book.ask_px[:, 0] - book.bid_px[:, 0]) / book.tick_size)
    assert set(np.unique(spread)) <= {1.0, 2.0, 3.0}
    rates = [float(np.mean(spread == s)) for s in (1, 2, 3)]
    assert rates == pytest.approx(list(waves.spread_probs), abs=0.02)


def test_prices_stay_near_the_start_price(book: Book, waves: SyntheticWavesConfig) -> None:
    # the bias back toward start_price keeps the series stationary: no drift off to 0 or beyond
    distance = np.abs(book.mid - waves.start_price) / waves.tick_size
    assert distance.max() < 10 * waves.revert_ticks
    assert (
        abs(float(np.mean(book.mid)) - waves.start_price) / waves.tick_size < 2 * waves.revert_ticks
    )


def test_waves_make_returns_persist_and_flat_markets_do_not(
    book: Book, waves: SyntheticWavesConfig
) -> None:
    k = round(sum(waves.wave_len) / 2 / 4)  # a quarter of the mean wave length
    assert _k_return_autocorr(book, k) > 0.2
    flat = synthetic_waves(dataclasses.replace(waves, p_flat=1.0), seed=0)
    assert _k_return_autocorr(flat, k) < 0.05


def test_level0_imbalance_leans_toward_the_next_move(
    book: Book, waves: SyntheticWavesConfig
) -> None:
    move = np.sign(np.diff(book.mid))
    assert np.corrcoef(_level0_imbalance(book)[:-1], move)[0, 1] > 0.1
    blind = synthetic_waves(dataclasses.replace(waves, imbalance_signal=0.0), seed=0)
    blind_move = np.sign(np.diff(blind.mid))
    assert abs(np.corrcoef(_level0_imbalance(blind)[:-1], blind_move)[0, 1]) < 0.03


def test_load_market_through_the_real_config() -> None:
    cfg, choices = compose_train(["market.ticks=3000", "seed=4"])
    assert choices["market"] == "synthetic_waves"
    market = load_market(cfg.market, cfg.seed, SINGLE)
    assert market.train.source == "synthetic_waves(seed=4)"
    assert (market.train.T, market.heldout.T) == (2400, 600)
    assert (market.train.L, market.heldout.start) == (5, 2400)


def test_market_seed_overrides_the_run_seed() -> None:
    cfg, _ = compose_train(["market.ticks=3000", "seed=4", "market.seed=9"])
    assert load_market(cfg.market, cfg.seed, SINGLE).train.source == "synthetic_waves(seed=9)"
    cfg, _ = compose_train(["market.ticks=3000", "market.seed=null"])
    assert load_market(cfg.market, 11, SINGLE).train.source == "synthetic_waves(seed=11)"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("market.p_flat=1.5", "market.p_flat"),
        ("market.spread_probs=[0.5,0.3,0.1]", "market.spread_probs"),
        ("market.spread_probs=[0.5,0.5]", "market.spread_probs"),
        ("market.wave_len=[400,50]", "market.wave_len"),
        ("market.wave_len=[10.5,50]", "market.wave_len"),
        ("market.depth_size=[0.5,10]", "market.depth_size"),
        ("market.levels=0", "market.levels"),
        ("market.ticks=lots", "market.ticks"),
        ("market.tick_size=0", "market.tick_size"),
        ("market.imbalance_signal=0.95", "market.imbalance_signal"),
        ("market.fold=-1", "market.fold"),
        ("market.currency=' '", "market.currency"),
        ("+market.wave_length=3", "market.wave_length"),
        ("market.name=tape", "market.name"),
    ],
)
def test_bad_settings_name_the_key(override: str, key: str) -> None:
    cfg, _ = compose_train(["market.ticks=1000", override])
    with pytest.raises(MarketDataError, match=key.replace(".", r"\.")):
        load_market(cfg.market, cfg.seed, SINGLE)


def test_a_price_falling_to_zero_is_an_error(waves: SyntheticWavesConfig) -> None:
    low = dataclasses.replace(waves, ticks=5000, start_price=0.05)
    with pytest.raises(MarketDataError, match=r"raise market\.start_price"):
        synthetic_waves(low, seed=0)
