"""The oracles of cuda/reward.cu on hand-computed cases: reward_diagnostics and its four parts."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.reference import reward as ref
from alpha_rl.reference.reward import reward_component_ema


@pytest.mark.parametrize("stride", [6, 7])
def test_ema_of_core_components_by_hand(stride: int) -> None:
    rows = np.array(
        [
            [1.0, 2.0, -1.0, 0.0, -0.5, -2.0, 100.0][:stride],
            [3.0, 0.0, -1.0, -4.0, -0.5, 0.0, 200.0][:stride],
        ],
        dtype=np.float32,
    )
    isv = np.zeros(16, dtype=np.float32)
    isv[2] = 0.25  # alpha
    isv[4:10] = [4.0, 0.0, 0.0, 0.0, 0.0, 8.0]
    reward_component_ema(rows.ravel(), isv, 2, 4, 2, rc_stride=stride)
    # mean = [2, 1, -1, -2, -0.5, -1]; ema = 0.75 * old + 0.25 * mean; c6 (100, 200) ignored
    assert isv[4:10].tolist() == [3.5, 0.25, -0.25, -0.5, -0.125, 5.75]
    assert isv[:4].tolist() == [0, 0, 0.25, 0] and isv[10:].tolist() == [0] * 6


def test_no_rows_or_no_isv_changes_nothing() -> None:
    isv = np.arange(8, dtype=np.float32)
    reward_component_ema(np.ones(12, np.float32), isv, 0, 0, 7, rc_stride=6)
    assert isv.tolist() == list(range(8))
    reward_component_ema(np.ones(12, np.float32), None, 2, 0, 7, rc_stride=6)


def test_aux_align_ema_and_mag_ratio_by_hand() -> None:
    from alpha_rl.reference.reward import reward_aux_align_ema, reward_mag_ratio

    rows = np.array([[2, -1, 0, 0, -1, 0, 3], [0, -3, -2, 0, -1, 0, 1]], np.float32)
    isv = np.zeros(32, np.float32)
    isv[0] = 0.5  # alpha
    reward_aux_align_ema(rows.ravel(), isv, 2, 1, 0, rc_stride=7)
    assert isv[1] == 1.0  # 0.5 * 0 + 0.5 * mean(3, 1)
    six = rows[:, :6].ravel()
    before = isv.copy()
    reward_aux_align_ema(six, isv, 2, 1, 0, rc_stride=6)
    np.testing.assert_array_equal(isv, before)
    reward_mag_ratio(rows.ravel(), isv, 2, 8, 16, 0, rc_stride=7)
    # mean |c| = [1, 2, 1, 0, 1, 0]; abs EMA = half of it; ratio_c = ema_c / (sum - ema_c)
    np.testing.assert_allclose(isv[8:14], [0.5, 1.0, 0.5, 0.0, 0.5, 0.0])
    np.testing.assert_allclose(isv[16:22], [0.5 / 2.0, 1.0 / 1.5, 0.5 / 2.0, 0.0, 0.5 / 2.0, 0.0])


def test_decomp_by_position_before_the_step() -> None:
    from alpha_rl.reference.reward import reward_decomp_diag

    rc = np.array([[1, 0, -1, 0, 0, 0, 2], [0, 2, 0, 0, -1, 0, 0], [0, -2, 0, 0, -1, 0, 0]],
                  np.float32).ravel()  # fmt: skip
    reward = np.array([2.0, 1.0, -3.0], np.float32)
    prev = np.array([0, 1, 1], np.int32)
    diag = np.full(33, np.nan, np.float32)
    reward_decomp_diag(rc, reward, prev, diag, 3, rc_stride=7)
    table = diag.reshape(3, 11)
    np.testing.assert_allclose(table[0], [1, 2, 2, 4, 1, 0, -1, 0, 0, 0, 2])  # flat
    np.testing.assert_allclose(table[1], [2, -1, 2, 3, 0, 0, 0, 0, -1, 0, 0])  # long
    np.testing.assert_array_equal(table[2], np.zeros(11))  # short: empty


# ISV slots of the reward_diagnostics cases below: alpha, 6 component EMAs, the aux-align EMA,
# 6 abs EMAs, 6 ratios
SLOTS = {"ema_idx": 2, "aux_ema_idx": 8, "abs_idx": 10, "ratio_idx": 16, "alpha_idx": 0}
ROWS = np.array([[2, -1, 0, 0, -1, 0, 3], [0, -3, -2, 0, -1, 0, 1]], np.float32)


def _diagnostics(stride: int, isv: np.ndarray | None, slots: dict) -> tuple:
    """reward_diagnostics on the two ROWS (rewards 1, -2; long then short): isv, diag, scratch."""
    rc, reward = ROWS[:, :stride].ravel(), np.array([1, -2], np.float32)
    prev = np.array([1, -1], np.int32)
    diag = np.full(ref.DECOMP_ROWS * ref.decomp_cols(stride), np.nan, np.float32)
    partial, done = np.zeros(ref.block_sums(stride), np.float32), np.zeros(1, np.uint64)
    ref.reward_diagnostics(rc, reward, prev, isv, diag, partial, done, 2, **slots, rc_stride=stride)
    return isv, diag, (partial, done)


@pytest.mark.parametrize("stride", [6, 7])
def test_diagnostics_by_hand_are_the_four_helpers_in_turn(stride: int) -> None:
    isv = np.zeros(24, np.float32)
    isv[0] = 0.5  # alpha
    isv, diag, (partial, done) = _diagnostics(stride, isv, SLOTS)
    # means [1, -2, -1, 0, -1, 0], c6 2; mean |c| [1, 2, 1, 0, 1, 0]; each EMA half of its mean
    assert isv[2:8].tolist() == [0.5, -1.0, -0.5, 0.0, -0.5, 0.0]
    assert isv[8] == (1.0 if stride == 7 else 0.0)  # stride 6: no aux_align, the slot left
    assert isv[10:16].tolist() == [0.5, 1.0, 0.5, 0.0, 0.5, 0.0]
    np.testing.assert_allclose(isv[16:22], [0.25, 1.0 / 1.5, 0.25, 0.0, 0.25, 0.0])
    table = diag.reshape(3, 4 + stride)
    assert table[0].tolist() == [0.0] * (4 + stride)  # flat: empty
    assert table[1].tolist() == [1, 1, 1, 7 if stride == 7 else 4, *ROWS[0, :stride]]  # long
    assert table[2].tolist() == [1, -2, 2, 7 if stride == 7 else 6, *ROWS[1, :stride]]  # short
    assert not partial.any() and done.tolist() == [0]  # the kernel's scratch, left alone

    rc = ROWS[:, :stride].ravel()
    want, want_diag = np.zeros(24, np.float32), np.full_like(diag, np.nan)
    want[0] = 0.5
    ref.reward_component_ema(rc, want, 2, 2, 0, rc_stride=stride)
    ref.reward_aux_align_ema(rc, want, 2, 8, 0, rc_stride=stride)
    ref.reward_mag_ratio(rc, want, 2, 10, 16, 0, rc_stride=stride)
    ref.reward_decomp_diag(rc, np.array([1, -2], np.float32), np.array([1, -1], np.int32),
                           want_diag, 2, rc_stride=stride)  # fmt: skip
    np.testing.assert_array_equal(isv, want)
    np.testing.assert_array_equal(diag, want_diag)


# the slots each index writes (ratio_idx: only with abs_idx), by the SLOTS above
GROUPS = {"ema_idx": range(2, 8), "aux_ema_idx": range(8, 9), "abs_idx": range(10, 22),
          "ratio_idx": range(16, 22)}  # fmt: skip


@pytest.mark.parametrize("stride", [6, 7])
@pytest.mark.parametrize("skip", sorted(GROUPS))
def test_a_negative_slot_index_skips_its_group(stride: int, skip: str) -> None:
    gen = np.random.default_rng(3)
    start = gen.uniform(0.1, 1.0, 24).astype(np.float32)
    start[0] = 0.5
    full, full_diag, _ = _diagnostics(stride, start.copy(), SLOTS)
    got, diag, _ = _diagnostics(stride, start.copy(), SLOTS | {skip: -1})
    left = list(GROUPS[skip])
    np.testing.assert_array_equal(got[left], start[left])  # abs_idx -1: the ratios too
    kept = np.setdiff1d(np.arange(24), left)
    np.testing.assert_array_equal(got[kept], full[kept])  # the other groups as without the skip
    np.testing.assert_array_equal(diag, full_diag)  # diag always


def test_ratios_skipped_abs_ema_still_written() -> None:
    isv = np.zeros(24, np.float32)
    isv[0], isv[16:22] = 0.5, 9.0
    isv, _, _ = _diagnostics(7, isv, SLOTS | {"ratio_idx": -1})
    assert isv[10:16].tolist() == [0.5, 1.0, 0.5, 0.0, 0.5, 0.0]  # abs EMA, as by hand above
    assert isv[16:22].tolist() == [9.0] * 6


@pytest.mark.parametrize("stride", [6, 7])
def test_diagnostics_without_isv_or_envs_write_only_diag(stride: int) -> None:
    _, diag, _ = _diagnostics(stride, None, SLOTS)
    assert diag[4 + stride] == 1.0  # the long row's count: diag written without an ISV
    isv = np.arange(24, dtype=np.float32) / 32
    before = isv.copy()
    diag = np.full(ref.DECOMP_ROWS * ref.decomp_cols(stride), np.nan, np.float32)
    ref.reward_diagnostics(ROWS[:, :stride].ravel(), np.ones(2, np.float32),
                           np.ones(2, np.int32), isv, diag, np.zeros(0, np.float32),
                           np.zeros(1, np.uint64), 0, **SLOTS, rc_stride=stride)  # fmt: skip
    np.testing.assert_array_equal(isv, before)
    assert diag.tolist() == [0.0] * diag.size  # n == 0: every row empty
