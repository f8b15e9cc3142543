"""Oracle of cuda/nstep.cu: n-step returns (DESIGN §7).

The contract is the kernel file's header; the returns and discounts are the same float32
operations in the same order (Horner from the newest reward, no fused multiply-add), so every
output equals the GPU's to the last bit.
"""

from __future__ import annotations

import numpy as np

from alpha_rl.abi import CONSTANTS

F32 = np.float32
BLOCK = CONSTANTS["nstep"]["NSTEP_BLOCK"]


def nstep_accumulate(h_t, h_tp1, eff_action, reward, done, episode, isv, ring_h, ring_action,
                     ring_reward, pos, count, episode_seen, flags, out_h_t, out_h_tp1,
                     out_action, out_reward, out_done, out_discount,
                     B, H, n, gamma_idx) -> None:  # fmt: skip
    """Write step t into each env's ring and emit the transitions that end now, in place."""
    B, H, n, gamma = int(B), int(H), int(n), F32(isv[gamma_idx])
    rh = ring_h.reshape(n, B, H)
    oh_t, oh_tp1 = out_h_t.reshape(B * n, H), out_h_tp1.reshape(B * n, H)
    ht, htp1 = h_t.reshape(-1, H), h_tp1.reshape(-1, H)
    ra, rr = ring_action.reshape(n, B), ring_reward.reshape(n, B)
    for b in range(B):
        p, held = int(pos[b]), int(count[b]) + 1
        closed, restarted = done[b] != 0, episode[b] != episode_seen[b]
        boundary = closed or restarted
        cut = 1 if restarted and not closed else 0  # a truncation: returns end at t - 1, at h_t
        emit = held - cut if boundary else (1 if held == n else 0)
        rh[p, b] = ht[b]
        ra[p, b], r_t = eff_action[b], F32(reward[b])
        for j in range(n):
            row = b * n + j
            flags[row] = 1 if j < emit else 0
            if j >= emit:
                continue
            steps, first = held - j - cut, (p - held + 1 + j) % n
            ret, discount = (F32(rr[(p - 1) % n, b]) if cut else r_t), F32(1)
            for i in range(steps - 2, -1, -1):  # the earlier rewards, newest first
                ret = F32(rr[(p - cut - (steps - 1 - i)) % n, b] + F32(gamma * ret))
            for _ in range(steps):
                discount = F32(discount * gamma)
            oh_t[row], oh_tp1[row] = rh[first, b], (ht[b] if cut else htp1[b])
            out_action[row], out_reward[row] = ra[first, b], ret
            out_done[row], out_discount[row] = done[b], discount
        rr[p, b] = r_t
        count[b] = 0 if boundary else (n - 1 if held == n else held)
        pos[b] = (p + 1) % n
        episode_seen[b] = episode[b]
