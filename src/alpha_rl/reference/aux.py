"""Oracle of cuda/aux.cu: α, the aux head's bias on the directional actions' Q-values, and the
controller of w_aux_align (DESIGN §7).

The contract is the kernel file's header. The bias and the controller are the same float32
operations (no fused multiply-add); the aux signal's dot product and exp (alpha_rl.portable's),
and the gradient's sum, round apart from the device's, so they agree to a few parts in 10^6.
Every function works in its inputs' dtype (float64 for gradient checks).
"""

from __future__ import annotations

import numpy as np

from alpha_rl.abi import CONSTANTS, ENV_ACTIONS
from alpha_rl.portable import exp, matmul, total
from alpha_rl.reference.dqn import adam_step, target_sync

F32 = np.float32
BLOCK = CONSTANTS["aux"]["AUX_BLOCK"]
ACTIONS, FLAT = ENV_ACTIONS["ACTIONS"], ENV_ACTIONS["ACTION_FLAT"]
LONG, SHORT = ENV_ACTIONS["ACTION_LONG"], ENV_ACTIONS["ACTION_SHORT"]


def aux_signal(h, aux_w, M: int, H: int) -> np.ndarray:
    """aux = 2 sigmoid(aux_w . h + b) - 1 per row, in h's dtype."""
    x = h[: M * H].reshape(M, H)
    z = matmul(x, aux_w[:H].astype(x.dtype)) + x.dtype.type(aux_w[H])
    return (2 / (1 + exp(-z)) - 1).astype(x.dtype)


def aux_alpha_bias(h, aux_w, w, q, aux_out, M, H) -> None:
    """q[i, a] += w[a] aux_i in place; aux_out = aux (None: not kept)."""
    M, H = int(M), int(H)
    aux = aux_signal(h, aux_w, M, H)
    qa = q[: M * ACTIONS].reshape(M, ACTIONS)
    qa += w[:ACTIONS].astype(qa.dtype)[None, :] * aux[:, None]
    if aux_out is not None:
        aux_out[:M] = aux


def alpha_grad(dq, aux, M: int) -> np.ndarray:
    """g[a] = sum_i dq[i, a] aux_i (the loss's gradient wrt w_α)."""
    return total(dq[: M * ACTIONS].reshape(M, ACTIONS) * aux[:M, None], axis=0)


def aux_alpha_update(dq, aux, counters, w, m, v, target, isv, M, adam_idx, long_idx,
                     short_idx) -> None:  # fmt: skip
    """Adam on w_α's directional entries (FLAT's stays), clamped to [-bound, bound], then the
    target's sync; the two weights into the ISV (lr, beta1, beta2, eps, bound, tau, period at
    isv[adam_idx + k])."""
    M, a = int(M), int(adam_idx)
    lr, beta1, beta2, eps, bound, tau = (F32(x) for x in isv[a : a + 6])
    period = int(isv[a + 6])
    g = alpha_grad(dq, aux, M).astype(F32)
    d = np.array([LONG, SHORT])  # FLAT's entry is never updated
    md, vd = m[d], v[d]
    stepped = adam_step(g[d], counters, md, vd, w[d], lr, beta1, beta2, eps)
    m[d], v[d] = md, vd
    w[d] = np.where(np.isfinite(stepped), np.clip(stepped, -F32(bound), F32(bound)), stepped)
    td = target[d]
    target_sync(w[d], counters, td, d.size, tau, period)
    target[d] = td
    for a, idx in ((LONG, long_idx), (SHORT, short_idx)):
        if idx >= 0:
            isv[idx] = w[a]


def aux_controller(isv, aux_ema_idx, abs_idx, weight_idx, core, w_idx, share_idx,
                   numbers_idx) -> None:  # fmt: skip
    """share = w |aux EMA| / (w |aux EMA| + sum_c |w_c| |c| EMA) over the `core` components, w =
    isv[w_idx]; w <- clamp(w + gain (target - share), 0, w_max) (gain, target, w_max at
    isv[numbers_idx + k])."""
    gain, target, w_max = isv[numbers_idx : numbers_idx + 3]
    w = F32(isv[w_idx])
    aux = F32(w * F32(abs(isv[aux_ema_idx])))
    total = aux
    for c in range(int(core)):
        total = F32(total + F32(F32(abs(isv[weight_idx + c])) * isv[abs_idx + c]))
    share = F32(aux / total) if total > 0 else F32(0)
    isv[share_idx] = share
    isv[w_idx] = min(max(F32(w + F32(F32(gain) * F32(F32(target) - share))), F32(0)), F32(w_max))
