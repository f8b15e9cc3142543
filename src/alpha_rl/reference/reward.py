"""Oracle of cuda/reward.cu: reward-component diagnostics over the RC_STRIDE layout (DESIGN §4).

rc is the flat reward-component buffer, rc[b * rc_stride + c]; components 0..5 are the core
components (pnl_close, mtm, cost, opp_cost, inventory, drawdown) and, at stride 7, c = 6 is
aux_align, which the core diagnostics leave out on purpose.
"""

from __future__ import annotations

import numpy as np

from alpha_rl.reference.abi import REWARD

# cuda/reward_layout.cuh: components 0..RC_CORE-1 are the core ones; RC_AUX_ALIGN is c6, which
# only a layout of more than RC_AUX_ALIGN components (stride 7) has
RC_CORE, RC_AUX_ALIGN = REWARD["RC_CORE"], REWARD["RC_AUX_ALIGN"]
DECOMP_ROWS, DECOMP_LEAD = REWARD["DECOMP_ROWS"], REWARD["DECOMP_LEAD"]


def has_aux_align(rc_stride: int) -> bool:
    """Whether a layout of `rc_stride` components carries c6 aux_align (stride 7)."""
    return rc_stride > RC_AUX_ALIGN


def decomp_cols(rc_stride: int) -> int:
    """Columns of one row of the reward decomposition (reward_decomp_diag)."""
    return DECOMP_LEAD + rc_stride


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
    isv[ema_idx : ema_idx + RC_CORE] = _ema(isv[ema_idx : ema_idx + RC_CORE], isv[alpha_idx], mean)


def _ema(old: np.ndarray, a: np.float32, mean: np.ndarray) -> np.ndarray:
    return ((1.0 - np.float64(a)) * old.astype(np.float64) + np.float64(a) * mean).astype(
        np.float32
    )


def reward_aux_align_ema(
    rc: np.ndarray,
    isv: np.ndarray | None,
    n: int,
    ema_idx: int,
    alpha_idx: int,
    *,
    rc_stride: int,
) -> None:
    """Stride 7: isv[ema_idx] = (1 - a) * isv[ema_idx] + a * mean_b rc[b, 6]; stride 6: nothing."""
    if not has_aux_align(rc_stride) or isv is None or n <= 0:
        return
    mean = rc[: n * rc_stride].reshape(n, rc_stride)[:, RC_AUX_ALIGN].astype(np.float64).mean()
    isv[ema_idx] = _ema(isv[ema_idx : ema_idx + 1], isv[alpha_idx], np.array([mean]))[0]


def reward_mag_ratio(
    rc: np.ndarray,
    isv: np.ndarray | None,
    n: int,
    abs_idx: int,
    ratio_idx: int,
    alpha_idx: int,
    *,
    rc_stride: int,
) -> None:
    """abs EMA of |rc_c| (c < 6) into isv[abs_idx + c]; isv[ratio_idx + c] = that over the sum
    of the other five (0 when the others sum to 0)."""
    if isv is None or n <= 0:
        return
    mean_abs = np.abs(core_components(rc, n, rc_stride).astype(np.float64)).mean(axis=0)
    abs_ema = _ema(isv[abs_idx : abs_idx + RC_CORE], isv[alpha_idx], mean_abs)
    isv[abs_idx : abs_idx + RC_CORE] = abs_ema
    values = abs_ema.astype(np.float64)
    others = values.sum() - values
    ratio = np.divide(values, others, out=np.zeros(RC_CORE), where=others > 0)
    isv[ratio_idx : ratio_idx + RC_CORE] = ratio.astype(np.float32)


def reward_decomp_diag(
    rc: np.ndarray,
    reward: np.ndarray,
    prev_dir: np.ndarray,
    diag: np.ndarray,
    n: int,
    *,
    rc_stride: int,
) -> None:
    """diag[row, :] for rows flat / long / short (by prev_dir): count, mean reward, mean |reward|,
    mean sum_c |rc_c| over all rc_stride components, then the mean of each component."""
    cols = decomp_cols(rc_stride)
    table = np.zeros((DECOMP_ROWS, cols), dtype=np.float64)
    comps = rc[: n * rc_stride].reshape(n, rc_stride).astype(np.float64)
    r = reward[:n].astype(np.float64)
    row = np.where(prev_dir[:n] > 0, 1, np.where(prev_dir[:n] < 0, 2, 0))
    for k in range(DECOMP_ROWS):
        mask = row == k
        count = int(mask.sum())
        table[k, 0] = count
        if count:
            table[k, 1] = r[mask].mean()
            table[k, 2] = np.abs(r[mask]).mean()
            table[k, 3] = np.abs(comps[mask]).sum(axis=1).mean()
            table[k, DECOMP_LEAD:] = comps[mask].mean(axis=0)
    diag[: DECOMP_ROWS * cols] = table.ravel().astype(np.float32)
