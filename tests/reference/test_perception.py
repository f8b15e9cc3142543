"""Perception oracle on a hand-computed case; the frozen projection's determinism and scale."""

from __future__ import annotations

import numpy as np

from alpha_rl.reference.perception import (
    feature_count,
    features,
    perception_observe,
    projection_weights,
)


def _book():
    # 6 ticks, 2 levels, tick 0.5; prices as offsets. mids: 0.25, 0.75, 1.25, 0.75, 1.75, 2.25
    bid0 = np.array([0.0, 0.5, 1.0, 0.5, 1.0, 2.0], np.float32)
    ask0 = np.array([0.5, 1.0, 1.5, 1.0, 2.5, 2.5], np.float32)
    bid = np.stack([bid0, bid0 - 0.5], axis=1).ravel()
    ask = np.stack([ask0, ask0 + 0.5], axis=1).ravel()
    bid_sz = np.array([[1, 1], [2, 2], [3, 1], [4, 4], [6, 2], [1, 1]], np.float32).ravel()
    ask_sz = np.array([[1, 1], [2, 2], [1, 3], [4, 4], [2, 2], [1, 1]], np.float32).ravel()
    return bid, ask, bid_sz, ask_sz


def test_features_by_hand() -> None:
    bid, ask, bid_sz, ask_sz = _book()
    cursor = np.array([4, 1], np.int32)
    pos = np.array([1, 0], np.int32)
    trade_len = np.array([3, 9], np.int32)
    entry_px = np.array([0.5, 0.0], np.float32)
    peak = np.array([2.0, 0.0], np.float32)
    horizons = np.array([1, 4], np.int32)
    one = np.zeros(6, np.int32)  # one session
    x = features(bid, ask, bid_sz, ask_sz, one, cursor, pos, trade_len, entry_px, peak, horizons,
                 2, 2, 0.5, 0.5, 0.25)  # fmt: skip
    assert x.shape == (2, feature_count(2)) == (2, 9)
    # env 0 at t=4: mid 1.75; t-1 mid 0.75 -> (1.0/0.5)/1 = 2; t-4 mid 0.25 -> (1.5/0.5)/2 = 1.5
    # spread (2.5-1.0)/0.5 - 1 = 2; imbalance (6-2)/8 = 0.5; all levels (8-4)/12 = 1/3;
    # long: unrealised (1.75-0.5)/0.5*0.5 = 1.25; time 3*0.25; peak gap (2.0-1.75)/0.5*0.5 = 0.25
    np.testing.assert_allclose(x[0], [2.0, 1.5, 2.0, 0.5, 1 / 3, 1.0, 1.25, 0.75, 0.25], rtol=1e-6)
    # env 1 at t=1, flat: t-4 clamps to tick 0; the position features are 0
    np.testing.assert_allclose(x[1], [1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], rtol=1e-6)
    # a session break before tick 3: env 0 at t=4 reaches back to tick 3 at most (mid 0.75),
    # t-1 is tick 3 -> 2, t-4 clamps to tick 3 -> (1.0/0.5)/2 = 1; the other features unchanged
    split = np.array([0, 0, 0, 3, 3, 3], np.int32)
    y = features(bid, ask, bid_sz, ask_sz, split, cursor, pos, trade_len, entry_px, peak,
                 horizons, 2, 2, 0.5, 0.5, 0.25)  # fmt: skip
    np.testing.assert_allclose(y[0], [2.0, 1.0, *x[0, 2:]], rtol=1e-6)
    np.testing.assert_array_equal(y[1], x[1])  # tick 1 is in the first session


def test_a_session_is_observed_as_if_the_data_began_at_it() -> None:
    """At every tick of a later session the features equal those of the same tick of a book cut
    at the session's first tick (returns padded as at the start of the data)."""
    bid, ask, bid_sz, ask_sz = _book()
    L, horizons, T = 2, np.array([1, 4], np.int32), 6
    split = np.array([0, 0, 0, 3, 3, 3], np.int32)
    ticks = np.arange(3, T, dtype=np.int32)
    state = [np.zeros(3, np.int32)] * 2 + [np.zeros(3, np.float32)] * 2
    whole = features(bid, ask, bid_sz, ask_sz, split, ticks, state[0], state[1], state[2],
                     state[3], horizons, 3, L, 0.5, 0.5, 0.25)  # fmt: skip
    cut = [a[3 * L :] for a in (bid, ask, bid_sz, ask_sz)]
    alone = features(*cut, np.zeros(3, np.int32), ticks - 3, state[0], state[1], state[2],
                     state[3], horizons, 3, L, 0.5, 0.5, 0.25)  # fmt: skip
    np.testing.assert_array_equal(whole, alone)


def test_projection_is_frozen_seeded_and_scaled() -> None:
    w, b = projection_weights(3, 11, 64)
    assert w.shape == (64 * 11,) and w.dtype == np.float32 and not b.any()
    np.testing.assert_array_equal(w, projection_weights(3, 11, 64)[0])
    assert not np.array_equal(w, projection_weights(4, 11, 64)[0])
    assert abs(w.std() - 1 / np.sqrt(11)) < 0.03 and abs(w.mean()) < 0.03


def test_observe_writes_features_or_their_projection() -> None:
    bid, ask, bid_sz, ask_sz = _book()
    state = (np.array([4], np.int32), np.array([1], np.int32), np.array([3], np.int32),
             np.array([0.5], np.float32), np.array([2.0], np.float32))  # fmt: skip
    horizons = np.array([1, 4], np.int32)
    one = np.zeros(6, np.int32)
    x = features(bid, ask, bid_sz, ask_sz, one, *state, horizons, 1, 2, 0.5, 0.5, 0.25)
    h = np.zeros(9, np.float32)
    scales = np.array([9.0, 0.5, 0.25], np.float32)  # 1 / pnl scale, 1 / time scale at [1:3]
    perception_observe(bid, ask, bid_sz, ask_sz, one, *state, horizons, None, None, scales, h,
                       1, 6, 2, 2, 9, 0.5, 1)  # fmt: skip
    np.testing.assert_array_equal(h, x[0])
    w, b = projection_weights(1, 9, 5)
    h5 = np.zeros(5, np.float32)
    perception_observe(bid, ask, bid_sz, ask_sz, one, *state, horizons, w, b, scales, h5,
                       1, 6, 2, 2, 5, 0.5, 1)  # fmt: skip
    np.testing.assert_allclose(h5, np.tanh(w.reshape(5, 9).astype(np.float64) @ x[0]), rtol=1e-5)
