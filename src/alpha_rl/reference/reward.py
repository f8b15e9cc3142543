"""Oracle of cuda/reward.cu: reward-component diagnostics over the RC_STRIDE layout (DESIGN §4).

rc is the flat reward-component buffer, rc[b * rc_stride + c]; components 0..5 are the core
components (pnl_close, mtm, cost, opp_cost, inventory, drawdown) and, at stride 7, c = 6 is
aux_align, which the core diagnostics leave out on purpose.
"""

from __future__ import annotations

import numpy as np

RC_CORE = 6


def core_components(rc: np.ndarray, n: int, rc_stride: int) -> np.ndarray:
    """The [n, 6] view of components 0..5 of a flat rc buffer of stride `rc_stride`."""
    return rc[: n * rc_stride].reshape(n, rc_stride)[:, :RC_CORE]


def reward_component_ema(
    rc: np.ndarray,
    isv: np.ndarray | None,
    n: int,
    ema_idx: int,
    alpha_idx: int,
    *,
    rc_stride: int,
) -> None:
    """isv[ema_idx + c] = (1 - a) * isv[ema_idx + c] + a * mean_b rc[b, c] for c < 6.

    a = isv[alpha_idx]; the mean is taken in float64. n == 0 or isv None changes nothing.
    """
    if isv is None or n <= 0:
        return
    mean = core_components(rc, n, rc_stride).astype(np.float64).mean(axis=0)
    a = np.float64(isv[alpha_idx])
    old = isv[ema_idx : ema_idx + RC_CORE].astype(np.float64)
    isv[ema_idx : ema_idx + RC_CORE] = ((1.0 - a) * old + a * mean).astype(np.float32)
