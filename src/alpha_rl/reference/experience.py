"""Oracle of cuda/experience.cu: one step of B trading environments (DESIGN §3, §4).

The arithmetic is float32, one rounding per operation, in the kernel's order, so on the same
inputs every output equals the kernel's exactly. See the kernel's header for the full contract;
in short, for env b at tick t with position d and target position `target` (the action's
direction, or d between decisions, (tick0 + t) % interval != 0 with tick0 row 0's tick in the
source series, and while a trade is younger than min_hold steps; 0 on an episode's last step
whatever the rules):
    close (target != d, d != 0) at the touch of t:  c0 = d * (exit - entry_px) * lot_mult,
        c5 = -rho * (d * (peak_mid - entry_px) * lot_mult - c0),
        c6 = scale_b * max(0, (2 p_up - 1) * d) * max(0, c0)            (stride 7 only)
    open (target != d, target != 0) at the touch of t:  entry_px = ask (long) / bid (short)
    c1 = target * (mid_{t+1} - ref) * lot_mult, ref = entry_px when just opened else mid_t
    c2 = -fee * lot * fills;  c3 = -kappa * |mid_{t+1} - mid_t| * lot_mult when flat after;
    c4 = -lambda * lot while in a trade;  reward = (sum_c w_c rc_c) * scale;  done = closed;
    stored = 0 on an episode's last step that closes nothing (its next state is another episode's).
"""

from __future__ import annotations

import numpy as np

from alpha_rl.abi import ENV_ACTIONS
from alpha_rl.reference.reward import RC_AUX_ALIGN, RC_CORE, has_aux_align
from alpha_rl.reference.rng import Stream, rng_u32

F32 = np.float32
ACTION_FLAT, ACTION_LONG, ACTION_SHORT = (
    ENV_ACTIONS[k] for k in ("ACTION_FLAT", "ACTION_LONG", "ACTION_SHORT")
)


def start_index(seed: int, env: np.ndarray, episode: np.ndarray, count: int) -> np.ndarray:
    """Index into the start-tick table of each env's episode: (u32 draw * count) >> 32, int64."""
    index = (np.asarray(episode, np.int64).astype(np.uint64) << np.uint64(32)) | np.asarray(
        env, np.int64
    ).astype(np.uint64)
    bits = rng_u32(seed, Stream.ENV, index).astype(np.uint64)
    return ((bits * np.uint64(count)) >> np.uint64(32)).astype(np.int64)


# ticks of a session an episode needs beyond its history: a start tick t with t + 1 <
# session_last[t] (start_ticks), so t, t + 1 and the session's last tick
MIN_EPISODE_TICKS = 3


def start_ticks(session_last: np.ndarray, history: int) -> np.ndarray:
    """[S] int32: the ticks an episode may start at: t >= history whose first step is not the
    forced close (t + 1 < session_last[t]). Without sessions, history .. T - 3."""
    t = np.arange(len(session_last))
    return t[(t >= history) & (t + 1 < session_last)].astype(np.int32)


def action_direction(action: np.ndarray) -> np.ndarray:
    """Target direction of each action: LONG -> +1, SHORT -> -1, anything else -> 0."""
    return np.where(action == ACTION_LONG, 1, np.where(action == ACTION_SHORT, -1, 0)).astype(
        np.int32
    )


def _isv(isv: np.ndarray | None, idx: int, fallback: float) -> np.float32:
    return F32(fallback) if isv is None or idx < 0 else isv[idx]


def _touch(bid_px: np.ndarray, ask_px: np.ndarray, t: np.ndarray, L: int):
    bid, ask = bid_px[t * L], ask_px[t * L]
    return bid, ask, F32(0.5) * (bid + ask)


def experience_env_step(
    bid_px, ask_px, session_last, starts, action, aux_prob, isv, run_seed,
    cursor, pos, trade_len, episode, entry_px, entry_mid, peak_mid,
    rc, reward_raw, reward, done, opened, closed, stored, prev_dir, closed_dir, eff_action,
    fill_mid, post_mid, stat_trades, stat_realised, stat_available, stat_duration,
    n, T, L, tick0, costs_idx, trading_idx,
    w_idx, scale_idx, kappa_idx, lambda_idx, rho_idx, w_aux_idx, beta_scale_idx,
    n_starts,
    *, rc_stride,
) -> None:  # fmt: skip
    """Advance envs 0..n-1 by one tick in place (the math is in the module docstring)."""
    n, L = int(n), int(L)
    if n <= 0:
        return
    lot, lot_mult, fee = (F32(v) for v in isv[costs_idx : costs_idx + 3])  # ENV_COSTS
    rules = trading_idx >= 0  # ENV_TRADING; absent: every tick, no minimum
    interval, min_hold = (int(isv[trading_idx]), int(isv[trading_idx + 1])) if rules else (1, 0)
    t, d = cursor[:n].copy(), pos[:n].copy()
    last = t + 1 >= session_last[t]
    holds = ((int(tick0) + t) % interval != 0) | ((d != 0) & (trade_len[:n] < min_hold))
    target = np.where(last, 0, np.where(holds, d, action_direction(action[:n]))).astype(np.int32)
    bid, ask, mid = _touch(bid_px, ask_px, t, L)
    _, _, next_mid = _touch(bid_px, ask_px, t + 1, L)
    e_px, e_mid, peak = entry_px[:n].copy(), entry_mid[:n].copy(), peak_mid[:n].copy()
    length = trade_len[:n].copy()
    c = np.zeros((n, rc_stride), dtype=F32)

    close = (target != d) & (d != 0)
    dir_d = d.astype(F32)
    exit_px = np.where(d > 0, bid, ask)
    pnl = (dir_d * (exit_px - e_px)) * lot_mult
    peak_unrealised = (dir_d * (peak - e_px)) * lot_mult
    available = (dir_d * (peak - e_mid)) * lot_mult
    c[:, 0] = np.where(close, pnl, F32(0))
    c[:, 5] = np.where(close, -(_isv(isv, rho_idx, 0.0) * (peak_unrealised - pnl)), F32(0))
    if (
        has_aux_align(rc_stride)
        and aux_prob is not None
        and isv is not None
        and beta_scale_idx >= 0
    ):
        scale_beta = isv[beta_scale_idx]
        if scale_beta != 0:
            aux = F32(2) * aux_prob[:n] - F32(1)
            c6 = (scale_beta * np.fmax(F32(0), aux * dir_d)) * np.fmax(F32(0), pnl)
            c[:, RC_AUX_ALIGN] = np.where(close, c6, F32(0))
    stat_trades[:n] = np.where(close, stat_trades[:n] + F32(1), stat_trades[:n])
    stat_realised[:n] = np.where(close, stat_realised[:n] + pnl, stat_realised[:n])
    stat_available[:n] = np.where(close, stat_available[:n] + available, stat_available[:n])
    stat_duration[:n] = np.where(close, stat_duration[:n] + length.astype(F32), stat_duration[:n])
    fills = np.where(close, F32(1), F32(0))

    open_ = (target != d) & (target != 0)
    e_px = np.where(open_, np.where(target > 0, ask, bid), e_px)
    e_mid = np.where(open_, mid, e_mid)
    peak = np.where(open_, mid, peak)
    length = np.where(open_, 0, length)
    fills = np.where(open_, fills + F32(1), fills)
    c[:, 2] = -((fee * lot) * fills)

    in_trade = target != 0
    dir_t = target.astype(F32)
    ref = np.where(open_, e_px, mid)
    c[:, 1] = np.where(in_trade, (dir_t * (next_mid - ref)) * lot_mult, F32(0))
    c[:, 4] = np.where(in_trade, -(_isv(isv, lambda_idx, 0.0) * lot), F32(0))
    moved = np.where(target > 0, np.fmax(peak, next_mid), np.fmin(peak, next_mid))
    peak = np.where(in_trade, moved, peak)
    length = np.where(in_trade, length + 1, length)
    opp = -((_isv(isv, kappa_idx, 0.0) * np.abs(next_mid - mid)) * lot_mult)
    c[:, 3] = np.where(in_trade, F32(0), opp)

    raw = np.zeros(n, dtype=F32)
    for k in range(RC_CORE):
        raw = raw + _isv(isv, w_idx + k, 1.0) * c[:, k]
    if has_aux_align(rc_stride):
        raw = raw + _isv(isv, w_aux_idx, 1.0) * c[:, RC_AUX_ALIGN]
    rc[: n * rc_stride] = c.ravel()
    reward_raw[:n] = raw
    reward[:n] = raw * _isv(isv, scale_idx, 1.0)
    done[:n] = close.astype(F32)
    opened[:n] = open_
    closed[:n] = close
    stored[:n] = ~(last & ~close)
    prev_dir[:n] = d
    closed_dir[:n] = np.where(close, d, 0)
    eff_action[:n] = np.where(target > 0, ACTION_LONG, np.where(target < 0, ACTION_SHORT, 0))
    fill_mid[:n] = mid
    post_mid[:n] = next_mid

    cursor[:n] = t + 1
    ended = np.flatnonzero(last)
    if ended.size:  # new episodes at fresh offsets
        episode[ended] += 1
        cursor[ended] = starts[start_index(int(run_seed[0]), ended, episode[ended], int(n_starts))]
    pos[:n] = target
    trade_len[:n] = np.where(in_trade, length, 0)
    entry_px[:n], entry_mid[:n], peak_mid[:n] = e_px, e_mid, peak
