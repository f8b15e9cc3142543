"""Oracle of cuda/her.cu: bidirectional hindsight experience replay (DESIGN §8).

The contract is the kernel file's header; these functions follow it with the same float32
operations (the PnLs compare exactly) and the replay push of reference/per.py, so slots, rows,
flags and counts equal the GPU's; only the boosted leaf (powf) may differ by an ulp.
"""

from __future__ import annotations

import numpy as np

from alpha_rl.abi import ENV_ACTIONS, HER
from alpha_rl.reference.per import boosted_leaf, claim, write_rows

F32 = np.float32
RING, BLOCK = HER["HER_RING"], HER["HER_BLOCK"]
STEP, BACKWARD_TOTAL, FORWARD_TOTAL = (
    HER["HER_STEP"],
    HER["HER_BACKWARD_TOTAL"],
    HER["HER_FORWARD_TOTAL"],
)
# the kernels' scratch words: the last launch's totals; the forward ring's judged claims
LAUNCH_TOTAL, RING_TOTAL = HER["HER_LAUNCH_TOTAL"], HER["HER_RING_TOTAL"]
RING_TAIL = HER["HER_RING_TAIL"]
# what became of the forward ring's claims: judged in their window, expired, episode ended,
# overwritten before judgement
JUDGED, EXPIRED, ENDED, OVERWRITTEN = (
    HER[f"HER_FORWARD_{k}"] for k in ("JUDGED", "EXPIRED", "ENDED", "OVERWRITTEN")
)
ACTION_LONG, ACTION_SHORT = ENV_ACTIONS["ACTION_LONG"], ENV_ACTIONS["ACTION_SHORT"]


def her_track(opened, closed, pos, episode, fill_mid, post_mid, mid_ring, count, entry_mid,
              peak_mid, dir, snap_entry, snap_peak, snap_dir, snap_episode, last_episode,
              counters, B) -> None:  # fmt: skip
    """Snapshot closing trades, open new ones at the fill mid, track the peak, advance the step."""
    B = int(B)
    c = closed[:B] != 0
    snap_entry[:B] = np.where(c, entry_mid[:B], snap_entry[:B])
    snap_peak[:B] = np.where(c, peak_mid[:B], snap_peak[:B])
    snap_dir[:B] = np.where(c, dir[:B], snap_dir[:B])
    snap_episode[:B] = np.where(c, last_episode[:B], snap_episode[:B])
    o = opened[:B] != 0
    entry_mid[:B] = np.where(o, fill_mid[:B], entry_mid[:B])
    peak_mid[:B] = np.where(o, fill_mid[:B], peak_mid[:B])
    count[:B] = np.where(o, 0, count[:B])
    p = pos[:B]
    live = np.flatnonzero(p != 0)
    mid = post_mid[live]
    mid_ring[live * RING + (count[live] & (RING - 1))] = mid
    count[live] += 1
    peak_mid[live] = np.where(
        p[live] > 0, np.fmax(peak_mid[live], mid), np.fmin(peak_mid[live], mid)
    )
    dir[:B] = np.sign(p).astype(np.int32)
    count[:B] = np.where(p != 0, count[:B], 0)
    last_episode[:B] = episode[:B]
    counters[STEP] += np.uint64(1)


def _push_synthetic(
    fires, rows_src, h, H, action, reward, max_leaf, storage, mask, alpha, boost, gamma
):
    """Push the firing rows (states from h) as synthetic one-step transitions; return how many."""
    (s_h_t, s_h_tp1, s_action, s_reward, s_done, s_synthetic, leaves, s_discount, rstate,
     rlookback) = storage  # fmt: skip
    slots = claim(fires, rstate, rlookback, BLOCK) & int(mask)
    rows = np.flatnonzero(fires)
    dst = slots[rows]
    src = rows_src[rows]
    write_rows(src, dst, h, h, H, s_h_t, s_h_tp1)
    s_action[dst], s_reward[dst] = action[rows], reward[rows]
    s_done[dst], s_synthetic[dst] = F32(1), 1
    leaves[dst] = boosted_leaf(max_leaf, boost, alpha)
    if s_discount is not None:
        s_discount[dst] = F32(gamma)
    return len(rows)


def her_inject(closed, snap_entry, snap_peak, snap_dir, snap_episode, rc, h_t, eff_action,
               max_leaf, s_h_t, s_h_tp1, s_action, s_reward, s_done, s_synthetic, leaves,
               s_discount, rstate, rlookback, ring_state, ring_lookback, f_entry, f_exit_step,
               f_dir, f_actual, f_env, f_episode, f_h, counters, isv,
               B, H, S, R, mask, alpha_idx, gamma_idx, lot_mult_idx, threshold_idx, boost_idx,
               scale_idx, count_idx, backward_idx, forward_idx) -> None:  # fmt: skip
    """Backward HER on this step's closes (isv[backward_idx] != 0); with forward's flag
    (isv[forward_idx] != 0), the closes into the forward ring (see module docstring). A flag
    whose slot is absent (index < 0) is off."""
    B, H, S, R = int(B), int(H), int(S), int(R)
    push_backward, record_forward = (
        idx >= 0 and isv[idx] != 0 for idx in (backward_idx, forward_idx)
    )
    alpha, gamma, lot_mult = isv[alpha_idx], isv[gamma_idx], isv[lot_mult_idx]
    was_closed = closed[:B] != 0
    d = snap_dir[:B].astype(F32)
    peak_pnl = (d * (snap_peak[:B] - snap_entry[:B])) * F32(lot_mult)
    actual = rc[: B * S : S]
    fires = was_closed & (peak_pnl > 0) & (peak_pnl > isv[threshold_idx] * actual)
    if not push_backward:
        fires[:] = False
    storage = (s_h_t, s_h_tp1, s_action, s_reward, s_done, s_synthetic, leaves, s_discount,
               rstate, rlookback)  # fmt: skip
    total = _push_synthetic(fires, np.arange(B), h_t, H, eff_action[:B],
                            peak_pnl * isv[scale_idx], max_leaf, storage, mask, alpha,
                            isv[boost_idx], gamma)  # fmt: skip
    if record_forward:
        claims = claim(was_closed, ring_state, ring_lookback, BLOCK)
        counters[RING_TOTAL] = np.uint64(np.count_nonzero(was_closed))
        rows = np.flatnonzero(claims >= 0)
        s = claims[rows] & (R - 1)  # R >= B: distinct slots
        counters[OVERWRITTEN] += np.uint64(np.count_nonzero(f_dir[s]))  # live: never judged
        f_entry[s], f_dir[s], f_episode[s] = snap_entry[rows], snap_dir[rows], snap_episode[rows]
        f_exit_step[s] = int(counters[STEP])
        f_actual[s] = rc[rows * S]
        f_env[s] = rows
        f_h.reshape(-1, H)[s] = h_t.reshape(-1, H)[rows]
    counters[LAUNCH_TOTAL] = np.uint64(total)
    counters[BACKWARD_TOTAL] += np.uint64(total)
    if count_idx >= 0:
        isv[count_idx] = total


def visit_order(tail: int, head: int, W: int, R: int) -> tuple[int, int, np.ndarray]:
    """her_forward's visit: lo, how many claims it visits, and the claim of each of its W
    threads (those below the visited count in slot order)."""
    lo = max(tail, head - R)
    visited = min(W, head - lo)
    wrap_at = (lo // R + 1) * R  # the first claim after lo in slot 0
    wrapped = max(0, lo + visited - wrap_at)
    i = np.arange(W)
    return lo, visited, np.where(i < wrapped, wrap_at + i, lo + i - wrapped)


def her_forward(f_entry, f_exit_step, f_actual, f_env, f_episode, f_h, episode, post_mid,
                max_leaf, ring_state, f_dir, s_h_t, s_h_tp1, s_action, s_reward, s_done,
                s_synthetic, leaves, s_discount, rstate, rlookback, counters, isv,
                W, R, H, mask, alpha_idx, gamma_idx, lot_mult_idx, threshold_idx, boost_idx,
                scale_idx, lookahead_idx, count_idx) -> None:  # fmt: skip
    """Judge the ring's oldest live trades `lookahead` steps after their close (see module
    docstring)."""
    W, R, H = int(W), int(R), int(H)
    alpha, gamma, lot_mult = isv[alpha_idx], isv[gamma_idx], isv[lot_mult_idx]
    lo, visited, claims = visit_order(int(counters[RING_TAIL]), int(ring_state[0]), W, R)
    slots = claims & (R - 1)
    d = np.where(np.arange(W) < visited, f_dir[slots], 0)
    age = int(counters[STEP]) - f_exit_step[slots]
    lookahead = int(isv[lookahead_idx])  # truncation, like the kernel's cast
    due = (d != 0) & (age >= lookahead)
    env = np.where(d != 0, f_env[slots], 0)
    expired = due & (age > 2 * lookahead)
    ended = due & ~expired & (episode[env] != f_episode[slots])
    live = due & ~expired & ~ended
    forward_pnl = (d.astype(F32) * (post_mid[env] - f_entry[slots])) * F32(lot_mult)
    fires = live & (forward_pnl > 0) & (forward_pnl > isv[threshold_idx] * f_actual[slots])
    action = np.where(d > 0, ACTION_LONG, ACTION_SHORT).astype(np.int32)
    storage = (s_h_t, s_h_tp1, s_action, s_reward, s_done, s_synthetic, leaves, s_discount,
               rstate, rlookback)  # fmt: skip
    total = _push_synthetic(fires, slots, f_h, H, action, forward_pnl * isv[scale_idx],
                            max_leaf, storage, mask, alpha, isv[boost_idx], gamma)  # fmt: skip
    f_dir[slots[due]] = 0
    waiting = claims[(d != 0) & ~due] - lo
    counters[RING_TAIL] = np.uint64(lo + min(int(waiting.min(initial=W)), visited))
    for word, which in ((JUDGED, live), (EXPIRED, expired), (ENDED, ended)):
        counters[word] += np.uint64(np.count_nonzero(which))
    counters[LAUNCH_TOTAL] = np.uint64(total)
    counters[FORWARD_TOTAL] += np.uint64(total)
    if count_idx >= 0:
        isv[count_idx] = total
