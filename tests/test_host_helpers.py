"""What production computes on the host (the RNG's draws, the sum tree's levels, episode starts,
the projection, the reward table's shape) is stated apart from the oracles; each agrees with its
oracle's own statement bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl import rng
from alpha_rl.kernels import experience, per, perception, reward
from alpha_rl.reference import experience as ref_experience
from alpha_rl.reference import per as ref_per
from alpha_rl.reference import perception as ref_perception
from alpha_rl.reference import reward as ref_reward
from alpha_rl.reference import rng as ref_rng

INDICES = np.concatenate(
    [
        np.arange(4096, dtype=np.uint64),
        np.array([2**32 - 1, 2**32, 2**40 + 7, 2**64 - 1], np.uint64),
    ]
)


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**32 + 5, 2**63 - 1])
def test_the_host_rng_draws_the_oracles_bits(seed: int) -> None:
    for stream in rng.Stream:
        np.testing.assert_array_equal(
            rng.draw_u32(seed, stream, INDICES), ref_rng.rng_u32(seed, stream, INDICES)
        )
        np.testing.assert_array_equal(
            rng.draw_uniform(seed, stream, INDICES).view(np.uint32),
            ref_rng.rng_uniform(seed, stream, INDICES).view(np.uint32),
        )


def test_a_changed_draw_is_seen() -> None:
    assert not np.array_equal(rng.draw_u32(1, rng.Stream.ACT, INDICES),
                              ref_rng.rng_u32(2, rng.Stream.ACT, INDICES))  # fmt: skip


@pytest.mark.parametrize("capacity", [1, 5, 1024, 1025, 2**17, 2**20 + 3, 2**30])
def test_the_sum_trees_levels(capacity: int) -> None:
    ours, theirs = per.tree_layout(capacity), ref_per.tree_layout(capacity)
    np.testing.assert_array_equal(ours[0], theirs[0])
    assert ours[1] == theirs[1]
    assert (per.HEAD, per.STATUS, per.STATE_WORDS, per.STATUS_EMPTY_SAMPLE) == (
        ref_per.HEAD, ref_per.STATUS, ref_per.STATE_WORDS, ref_per.STATUS_EMPTY_SAMPLE)  # fmt: skip


def test_episode_starts() -> None:
    last = np.repeat([40, 90, 91, 200], [40, 50, 1, 109]).astype(np.int32)
    for history in (0, 3, 60):
        np.testing.assert_array_equal(
            experience.start_ticks(last, history), ref_experience.start_ticks(last, history)
        )
    envs, episodes = np.arange(300), np.arange(300) % 7
    for seed, count in ((0, 1), (9, 17), (2**40, 123457)):
        np.testing.assert_array_equal(
            experience.start_index(seed, envs, episodes, count),
            ref_experience.start_index(seed, envs, episodes, count),
        )
    assert experience.MIN_EPISODE_TICKS == ref_experience.MIN_EPISODE_TICKS


def test_the_projection_and_feature_count() -> None:
    for seed, features, hidden in ((0, 9, 4), (7, 12, 64), (2**33, 31, 128)):
        w, b = perception.projection_weights(seed, features, hidden)
        rw, rb = ref_perception.projection_weights(seed, features, hidden)
        np.testing.assert_array_equal(w.view(np.uint32), rw.view(np.uint32))
        np.testing.assert_array_equal(b, rb)
    assert [perception.feature_count(k) for k in range(1, 9)] == [
        ref_perception.feature_count(k) for k in range(1, 9)
    ]
    assert (perception.EXTRA_FEATURES, perception.MAX_FEATURES) == (
        ref_perception.EXTRA_FEATURES, ref_perception.MAX_FEATURES)  # fmt: skip


@pytest.mark.parametrize("stride", [6, 7])
def test_the_reward_tables_shape(stride: int) -> None:
    assert reward.has_aux_align(stride) == ref_reward.has_aux_align(stride)
    assert reward.decomp_cols(stride) == ref_reward.decomp_cols(stride)
    assert reward.block_sums(stride) == ref_reward.block_sums(stride)
    assert [reward.blocks(n) for n in (0, 1, 511, 512, 513, 4096, 262145)] == [
        ref_reward.blocks(n) for n in (0, 1, 511, 512, 513, 4096, 262145)
    ]
