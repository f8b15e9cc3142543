"""reward_component_ema oracle on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

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
