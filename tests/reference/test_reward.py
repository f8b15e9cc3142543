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
