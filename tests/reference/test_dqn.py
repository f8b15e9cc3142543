"""dqn oracles on hand-checked cases: Adam, target sync, epsilon-greedy, the aux head, gather."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.reference import dqn
from alpha_rl.reference.rng import Stream, rng_uniform

SEED = np.array([7], np.uint64)  # dqn_act's run_seed: the draws of rng_uniform(7, ACT, ...)


def test_adam_matches_the_textbook_update_with_clipping() -> None:
    gen = np.random.default_rng(0)
    p = gen.normal(size=6).astype(np.float32)
    m, v = np.zeros(6, np.float32), np.zeros(6, np.float32)
    counters, stats = np.zeros(4, np.uint64), np.zeros(1, np.float32)
    ref_p, ref_m, ref_v = p.astype(np.float64), np.zeros(6), np.zeros(6)
    for t in range(1, 4):
        g = gen.normal(0, 5, size=6).astype(np.float32)
        dqn.dqn_grad_norm(g, stats, counters, None, 6, -1)
        target = np.zeros(6, np.float32)
        numbers = np.float32([0.01, 0.9, 0.999, 1e-8, 2.0, 0.0, 1])  # ADAM_NUMBERS' order
        dqn.dqn_adam(g, stats, counters, numbers, p, m, v, target, 6, 0)
        assert target.tolist() == p.tolist()  # a hard sync every update, from the new p
        gc = g.astype(np.float64) * min(1.0, 2.0 / np.linalg.norm(g.astype(np.float64)))
        ref_m = 0.9 * ref_m + 0.1 * gc
        ref_v = 0.999 * ref_v + 0.001 * gc**2
        ref_p -= 0.01 * (ref_m / (1 - 0.9**t)) / (np.sqrt(ref_v / (1 - 0.999**t)) + 1e-8)
        assert int(counters[0]) == t
    np.testing.assert_allclose(p, ref_p, rtol=1e-5)


def test_target_sync_hard_every_period_and_polyak() -> None:
    param, target = np.ones(4, np.float32), np.zeros(4, np.float32)
    counters = np.zeros(4, np.uint64)
    for step in range(1, 6):
        counters[0] = step
        dqn.target_sync(param * step, counters, target, 4, 0.0, 3)
        assert target[0] == (3.0 if 3 <= step < 6 else 0.0)
    dqn.target_sync(param, counters, target, 4, 0.25, 3)
    assert target.tolist() == [0.25 + 0.75 * 3.0] * 4


def test_act_is_greedy_without_epsilon_and_follows_the_schedule() -> None:
    gen = np.random.default_rng(1)
    q = gen.normal(size=50 * 3).astype(np.float32)
    action, counters = np.zeros(50, np.int32), np.zeros(4, np.uint64)
    isv = np.float32([0.0, 0.0, 1.0, 0.1, 10.0])  # epsilon; the schedule 1 -> 0.1 at isv[2:5]
    dqn.dqn_act(q, None, None, SEED, action, counters, isv, None, 50, 3, 0, -1, 1)  # greedy
    assert action.tolist() == q.reshape(50, 3).argmax(1).tolist() and int(counters[1]) == 1
    assert dqn.epsilon(0, 1.0, 0.1, 10.0) == np.float32(1.0)
    assert dqn.epsilon(5, 1.0, 0.1, 10.0) == pytest.approx(0.55)
    assert dqn.epsilon(50, 1.0, 0.1, 10.0) == np.float32(0.1)
    counters[1] = 5
    dqn.dqn_act(q, None, None, SEED, action, counters, isv, None, 50, 3, 0, 2, 1)
    assert isv[1] == pytest.approx(0.55)
    base = 2 * (5 * 50 + np.arange(50, dtype=np.uint64))
    u1 = rng_uniform(7, Stream.ACT, base)
    u2 = rng_uniform(7, Stream.ACT, base + np.uint64(1))
    want = np.where(u1 < np.float32(0.55), np.minimum(2, (u2 * 3).astype(int)),
                    q.reshape(50, 3).argmax(1))  # fmt: skip
    assert action.tolist() == want.tolist()


def test_aux_head_step_by_hand() -> None:
    h = np.array([1.0, 0.0, 0.0, 2.0, 5.0, 5.0], np.float32)  # 3 rows, H = 2
    p_up = np.array([0.5, 0.25, 0.9], np.float32)
    fill, post = np.zeros(3, np.float32), np.array([1.0, -1.0, 0.0], np.float32)  # row 2: no move
    w, isv = np.zeros(3, np.float32), np.float32([0.0, 0.5])  # l_aux, then the lr
    dqn.dqn_aux_train(h, p_up, fill, post, w, None, None, isv, 3, 2, 1, 0)
    # labeled rows 0 (y=1, p-y=-0.5) and 1 (y=0, p-y=0.25): g = ([-0.5, 0.5], -0.25) / 2
    np.testing.assert_allclose(w, [0.125, -0.125, 0.0625])
    assert isv[0] == pytest.approx((-np.log(0.5) - np.log(0.75)) / 2)
    p, action, counters = np.zeros(3, np.float32), np.zeros(3, np.int32), np.zeros(4, np.uint64)
    q = np.array([0, 1, 0, 2, 0, 0, 0, 0, 3], np.float32)
    dqn.dqn_act(q, h, w, SEED, action, counters, None, p, 3, 3, 2, -1, -1)
    np.testing.assert_allclose(p, 1 / (1 + np.exp(-(h.reshape(3, 2) @ w[:2] + w[2]))), rtol=1e-6)
    assert action.tolist() == [1, 0, 2]  # the actions of the same call, greedy at epsilon 0


def test_gather_rows_and_invalid_index() -> None:
    s = np.arange(12, dtype=np.float32)  # 4 slots, H = 3
    out = [np.full(6, -1.0, np.float32), np.full(6, -1.0, np.float32), np.zeros(2, np.int32),
           np.zeros(2, np.float32), np.zeros(2, np.float32), np.full(2, 9, np.uint8)]  # fmt: skip
    synthetic = np.array([0, 0, 1, 0], np.uint8)
    dqn.dqn_gather(np.array([2, -1], np.int32), s, s + 100, np.arange(4, dtype=np.int32) * 10,
                   np.arange(4, dtype=np.float32), np.ones(4, np.float32), synthetic, None,
                   *out, None, 2, 3)  # fmt: skip
    assert out[0].tolist() == [6, 7, 8, 0, 0, 0] and out[1].tolist()[:3] == [106, 107, 108]
    assert out[2].tolist() == [20, 0] and out[3].tolist() == [2, 0] and out[4].tolist() == [1, 0]
    assert out[5].tolist() == [1, 0]


def td_batch(M: int, synthetic: np.ndarray | None, seed: int = 0) -> tuple[list, np.ndarray]:
    """A batch of M rows through dqn_td: (its float32 inputs, the ISV it wrote: l_q, l_q_real,
    l_q_synthetic, synthetic share)."""
    gen = np.random.default_rng(seed)
    f = lambda n, s=1.0: (gen.normal(size=n) * s).astype(np.float32)  # noqa: E731
    args = [f(M * 3), f(M * 3), f(M * 3), gen.integers(0, 3, M).astype(np.int32), f(M, 2.0),
            (gen.random(M) < 0.3).astype(np.float32), gen.uniform(0.1, 1, M).astype(np.float32),
            synthetic]  # fmt: skip
    isv = np.float32([-7.0, -7.0, -7.0, -7.0, 0.99, 1.0, 1.0])  # then gamma, cut, kappa
    dqn.dqn_td(*args, None, np.zeros(M, np.float32), np.zeros(M * 3, np.float32), isv, M, 3,
               4, 5, 6, 0, 1, 2, 3)  # fmt: skip
    return args, isv[:4]


def test_l_q_by_source_is_each_sources_weighted_mean() -> None:
    M = 8
    syn = np.array([0, 1, 0, 0, 1, 0, 0, 1], np.uint8)
    args, isv = td_batch(M, syn)
    q_t, q_tp1, q_tgt, action, reward, done, weight, _ = args
    best = q_tp1.reshape(M, 3).argmax(1)
    y = reward + np.float32(0.99) * (1 - done) * q_tgt.reshape(M, 3)[np.arange(M), best]
    d = (y - q_t.reshape(M, 3)[np.arange(M), action]).astype(np.float64)
    huber = np.where(np.abs(d) <= 1, 0.5 * d * d, np.abs(d) - 0.5)
    w, real = weight.astype(np.float64), syn == 0
    assert isv[0] == pytest.approx((w * huber).sum() / w.sum(), rel=1e-6)
    assert isv[1] == pytest.approx((w * huber)[real].sum() / w[real].sum(), rel=1e-6)
    assert isv[2] == pytest.approx((w * huber)[~real].sum() / w[~real].sum(), rel=1e-6)
    assert isv[3] == np.float32(3 / 8)
    # l_q is the weight-sum average of the two: between them
    assert min(isv[1], isv[2]) <= isv[0] <= max(isv[1], isv[2])


def test_a_batch_without_synthetic_rows_gives_l_q_real_equal_to_l_q_bit_for_bit() -> None:
    for synthetic in (None, np.zeros(33, np.uint8)):
        _, isv = td_batch(33, synthetic, seed=4)
        assert isv[0] == isv[1] and np.isnan(isv[2]) and isv[3] == 0.0


def test_a_batch_of_synthetic_rows_only_has_no_real_loss() -> None:
    _, isv = td_batch(5, np.ones(5, np.uint8))
    assert np.isnan(isv[1]) and isv[0] == isv[2] and isv[3] == 1.0
