"""Oracle of cuda/reward.cu: reward-component diagnostics over the RC_STRIDE layout (DESIGN §4).

rc is the flat reward-component buffer, rc[b * rc_stride + c]; components 0..5 are the core
components (pnl_close, mtm, cost, opp_cost, inventory, drawdown) and, at stride 7, c = 6 is
aux_align, which the core diagnostics leave out on purpose. The one kernel, reward_diagnostics,
computes the four diagnostics below in one launch; its oracle runs them in turn, with float64
means (the kernel adds in float32, by block, so the two agree to float32 rounding, not bit for
bit).
"""

from __future__ import annotations

import numpy as np

from alpha_rl.abi import REWARD
from alpha_rl.portable import mean as mean_of
from alpha_rl.portable import total

# cuda/reward_layout.cuh: components 0..RC_CORE-1 are the core ones; RC_AUX_ALIGN is c6, which
# only a layout of more than RC_AUX_ALIGN components (stride 7) has
RC_CORE, RC_AUX_ALIGN = REWARD["RC_CORE"], REWARD["RC_AUX_ALIGN"]
DECOMP_ROWS, DECOMP_LEAD = REWARD["DECOMP_ROWS"], REWARD["DECOMP_LEAD"]
ROWS = REWARD["REWARD_ROWS"]  # envs per block of reward_diagnostics


def has_aux_align(rc_stride: int) -> bool:
    """Whether a layout of `rc_stride` components carries c6 aux_align (stride 7)."""
    return rc_stride > RC_AUX_ALIGN


def decomp_cols(rc_stride: int) -> int:
    """Columns of one row of the reward decomposition (reward_decomp_diag)."""
    return DECOMP_LEAD + rc_stride


def block_sums(rc_stride: int) -> int:
    """The sums each block of reward_diagnostics leaves in `partial` (REWARD_SUMS): components
    0..5, c6 at stride 7, |components 0..5|, then the decomposition table."""
    return RC_CORE + rc_stride + DECOMP_ROWS * decomp_cols(rc_stride)


def blocks(n: int) -> int:
    """Blocks of a reward_diagnostics launch over n envs (at least one, which writes diag)."""
    return max(1, -(-n // ROWS))


def reward_diagnostics(
    rc: np.ndarray,
    reward: np.ndarray,
    prev_dir: np.ndarray,
    isv: np.ndarray | None,
    diag: np.ndarray,
    partial: np.ndarray,
    done: np.ndarray,
    n: int,
    ema_idx: int,
    aux_ema_idx: int,
    abs_idx: int,
    ratio_idx: int,
    alpha_idx: int,
    *,
    rc_stride: int,
) -> None:
    """Step 5 in one call: the component EMAs, the aux-align EMA (stride 7), the magnitude EMAs
    and ratios into the ISV (each group skipped when its slot index is < 0, the ratios also when
    abs_idx is), and the decomposition table into diag (always). `partial` and `done` are the
    kernel's scratch: the oracle leaves them alone."""
    del partial, done
    if ema_idx >= 0:
        reward_component_ema(rc, isv, n, ema_idx, alpha_idx, rc_stride=rc_stride)
    if aux_ema_idx >= 0:
        reward_aux_align_ema(rc, isv, n, aux_ema_idx, alpha_idx, rc_stride=rc_stride)
    if abs_idx >= 0:
        ratio = ratio_idx if ratio_idx >= 0 else None
        reward_mag_ratio(rc, isv, n, abs_idx, ratio, alpha_idx, rc_stride=rc_stride)
    reward_decomp_diag(rc, reward, prev_dir, diag, n, rc_stride=rc_stride)


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
    mean = mean_of(core_components(rc, n, rc_stride).astype(np.float64), axis=0)
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
    mean = mean_of(rc[: n * rc_stride].reshape(n, rc_stride)[:, RC_AUX_ALIGN].astype(np.float64))
    isv[ema_idx] = _ema(isv[ema_idx : ema_idx + 1], isv[alpha_idx], np.array([mean]))[0]


def reward_mag_ratio(
    rc: np.ndarray,
    isv: np.ndarray | None,
    n: int,
    abs_idx: int,
    ratio_idx: int | None,
    alpha_idx: int,
    *,
    rc_stride: int,
) -> None:
    """abs EMA of |rc_c| (c < 6) into isv[abs_idx + c]; isv[ratio_idx + c] = that over the sum
    of the other five (0 when the others sum to 0; not written when ratio_idx is None)."""
    if isv is None or n <= 0:
        return
    mean_abs = mean_of(np.abs(core_components(rc, n, rc_stride).astype(np.float64)), axis=0)
    abs_ema = _ema(isv[abs_idx : abs_idx + RC_CORE], isv[alpha_idx], mean_abs)
    isv[abs_idx : abs_idx + RC_CORE] = abs_ema
    if ratio_idx is None:
        return
    values = abs_ema.astype(np.float64)
    others = total(values) - values
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
        count = int(np.count_nonzero(mask))
        table[k, 0] = count
        if count:
            table[k, 1] = mean_of(r[mask])
            table[k, 2] = mean_of(np.abs(r[mask]))
            table[k, 3] = mean_of(total(np.abs(comps[mask]), axis=1))
            table[k, DECOMP_LEAD:] = mean_of(comps[mask], axis=0)
    diag[: DECOMP_ROWS * cols] = table.ravel().astype(np.float32)
