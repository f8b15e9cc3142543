"""Oracle of cuda/c51.cu: the distributional (C51) head (DESIGN §7).

The contract is the kernel file's header. The atoms and the projection's weights are the same
float32 operations as the kernels', and the projection adds its terms in the same order; the
softmaxes' exp and log are alpha_rl.portable's (the same on every CPU) and the device's warp
sums add in another order, so results agree with the GPU's to a few parts in 10^6.
c51_project's greedy action is the argmax of c51_q's own sums on the device, so where two
actions' Q lie within an ulp or two it may differ from this oracle's (whose exp is portable's).
Every function works in its inputs' dtype (float64 for gradient checks).
"""

from __future__ import annotations

import numpy as np

from alpha_rl.abi import CONSTANTS
from alpha_rl.portable import exp, log, total
from alpha_rl.reference.dqn import td_loss_slots

F32 = np.float32
BLOCK, MAX_ATOMS, PROJECT_BLOCK = (
    CONSTANTS["c51"][f"C51_{k}"] for k in ("BLOCK", "MAX_ATOMS", "PROJECT_BLOCK")
)


def atoms(v_min: float, v_max: float, Z: int, dtype=F32) -> np.ndarray:
    """z_j = v_min + j dz, dz = (v_max - v_min) / (Z - 1), rounded op by op in `dtype`."""
    t = np.dtype(dtype).type
    dz = (t(v_max) - t(v_min)) / t(Z - 1)
    return t(v_min) + np.arange(Z).astype(dtype) * dz


def softmax(logits: np.ndarray, M: int, Z: int, A: int) -> np.ndarray:
    """p [M, Z, A]: the softmax over atoms of each (row, action)."""
    x = logits[: M * Z * A].reshape(M, Z, A)
    e = exp(x - x.max(axis=1, keepdims=True))
    return e / total(e, axis=1, keepdims=True)


def expected_q(logits: np.ndarray, M: int, Z: int, A: int, v_min: float, v_max: float):
    """Q [M, A] = sum_j p_j z_j, the atoms added in order."""
    x = logits[: M * Z * A].reshape(M, Z, A)
    e = exp(x - x.max(axis=1, keepdims=True))
    z = atoms(v_min, v_max, Z, x.dtype)
    s, sz = np.zeros((M, A), x.dtype), np.zeros((M, A), x.dtype)
    for j in range(Z):
        s += e[:, j]
        sz += e[:, j] * z[j]
    return sz / s


def c51_q(logits, isv, q, M, A, Z, support_idx) -> None:
    """q = Q(i, a) of the logits [M, Z, A]."""
    M, A, Z = int(M), int(A), int(Z)
    v_min, v_max = isv[support_idx], isv[support_idx + 1]
    q[: M * A] = expected_q(logits, M, Z, A, v_min, v_max).ravel()


def project(p: np.ndarray, reward, scale, Z: int, v_min: float, v_max: float) -> np.ndarray:
    """m [M, Z]: the distribution p [M, Z] on the atoms, moved to r + scale z and projected back
    onto the atoms (scale = discount * (1 - done), per row)."""
    dt = p.dtype
    t = dt.type
    z = atoms(v_min, v_max, Z, dt)
    dz = (t(v_max) - t(v_min)) / t(Z - 1)
    tz = np.clip(reward[:, None] + scale[:, None] * z[None, :], t(v_min), t(v_max))
    b = np.clip((tz - t(v_min)) / dz, t(0), t(Z - 1))
    k = np.arange(Z).astype(dt)
    m = np.zeros((p.shape[0], Z), dt)
    for j in range(Z):
        w = np.maximum(t(0), t(1) - np.abs(b[:, j, None] - k[None, :]))
        m += p[:, j, None] * w
    return m


def c51_project(logits_tp1, logits_target, reward, done, discount, isv, m, M, A, Z, gamma_idx,
                cut_idx, support_idx) -> None:  # fmt: skip
    """m = the projected double-DQN target distribution of each row."""
    M, A, Z = int(M), int(A), int(Z)
    dt = logits_target.dtype
    gamma, cut_on_done = isv[gamma_idx], bool(isv[cut_idx] != 0)
    v_min, v_max = isv[support_idx], isv[support_idx + 1]
    best = np.argmax(expected_q(logits_tp1, M, Z, A, v_min, v_max), axis=1)
    p = softmax(logits_target, M, Z, A)[np.arange(M), :, best]
    g = np.full(M, gamma, dt) if discount is None else discount[:M]
    cont = (dt.type(1) - done[:M]) if cut_on_done else np.ones(M, dt)
    m[: M * Z] = project(p, reward[:M], (g * cont).astype(dt), Z, v_min, v_max).ravel()


def c51_loss(logits_t, action, m, weight, synthetic, delta, dlogits, isv, done, M, A, Z,
             loss_idx, real_idx, synthetic_idx, frac_idx) -> None:  # fmt: skip
    """Cross-entropy of the taken action's distribution against m; its gradient wrt the logits
    scaled by w_i / M; l_q and its parts as dqn_td's (td_loss_slots). `done` (the blocks'
    counter) ends at 0."""
    M, A, Z = int(M), int(A), int(Z)
    dt = logits_t.dtype
    x = logits_t[: M * Z * A].reshape(M, Z, A)
    a = action[:M]
    row = x[np.arange(M), :, a]  # [M, Z]
    shifted = row - row.max(axis=1, keepdims=True)
    log_p = shifted - log(total(exp(shifted), axis=1, keepdims=True))
    target = m[: M * Z].reshape(M, Z)
    ce = -total(target * log_p, axis=1)
    mass = total(target, axis=1)
    grad = np.zeros((M, Z, A), dt)
    w = weight[:M]
    grad[np.arange(M), :, a] = (w / dt.type(M))[:, None] * (exp(log_p) * mass[:, None] - target)
    dlogits[: M * Z * A] = grad.ravel()
    delta[:M] = ce
    td_loss_slots(isv, ce, w, synthetic, M, loss_idx, real_idx, synthetic_idx, frac_idx)
    done[0] = 0
