"""Oracle of cuda/dqn.cu: batch gather, double-DQN TD loss, gradient norm, Adam, target sync,
epsilon-greedy action selection and the aux direction head. The math is in the kernel file's
header; dqn_td works in its inputs' dtype (float64 for gradient checks)."""

from __future__ import annotations

import numpy as np

from alpha_rl.abi import DQN
from alpha_rl.portable import exp, log, matmul, mean, power, total
from alpha_rl.reference.rng import Stream, rng_uniform

F32 = np.float32
ADAM_STEP, ACT_STEP, ACT_DONE, AUX_DONE = (
    DQN[f"DQN_{k}"] for k in ("ADAM_STEP", "ACT_STEP", "ACT_DONE", "AUX_DONE")
)  # counters[]


def dqn_gather(idx, s_h_t, s_h_tp1, s_action, s_reward, s_done, s_synthetic, s_discount, x_t,
               x_tp1, action, reward, done, synthetic, discount, M, H) -> None:  # fmt: skip
    """Rows idx[i] of the replay storage (zeros for a negative index)."""
    M, H = int(M), int(H)
    i = idx[:M]
    ok = i >= 0
    safe = np.where(ok, i, 0)
    x_t[: M * H] = np.where(ok[:, None], s_h_t.reshape(-1, H)[safe], 0).ravel()
    x_tp1[: M * H] = np.where(ok[:, None], s_h_tp1.reshape(-1, H)[safe], 0).ravel()
    action[:M] = np.where(ok, s_action[safe], 0)
    reward[:M] = np.where(ok, s_reward[safe], 0)
    done[:M] = np.where(ok, s_done[safe], 0)
    synthetic[:M] = np.where(ok, s_synthetic[safe], 0)
    if discount is not None:
        discount[:M] = np.where(ok, s_discount[safe], 0)


def dqn_td(q_t, q_tp1, q_tp1_target, action, reward, done, weight, synthetic, discount, delta,
           dq, isv, M, A, gamma_idx, cut_idx, kappa_idx, loss_idx, real_idx, synthetic_idx,
           frac_idx) -> None:  # fmt: skip
    """delta_i = r + g_i (1 - cut*done) Q_target(s', argmax Q(s')) - Q(s, a), g_i = discount[i]
    (None: gamma);
    dq = d(sum w * huber_kappa(delta) / M) / d q_t. Into the ISV: l_q = sum w huber / sum w over
    the batch (0 without weight), the same over its real and its synthetic rows (NaN when there
    are none; synthetic None: every row real) and the synthetic share of the rows."""
    M, A = int(M), int(A)
    dt = q_t.dtype
    gamma, kappa, cut_on_done = isv[gamma_idx], isv[kappa_idx], bool(isv[cut_idx] != 0)
    qt = q_t[: M * A].reshape(M, A)
    best = np.argmax(q_tp1[: M * A].reshape(M, A), axis=1)
    cont = (1 - done[:M]) if cut_on_done else np.ones(M, dt)
    target = q_tp1_target[: M * A].reshape(M, A)[np.arange(M), best]
    g = dt.type(gamma) if discount is None else discount[:M]
    y = reward[:M] + g * cont * target
    a = action[:M]
    d = y - qt[np.arange(M), a]
    k = dt.type(kappa)
    ad = np.abs(d)
    huber = np.where(ad <= k, dt.type(0.5) * d * d, k * (ad - dt.type(0.5) * k))
    delta[:M] = d
    grad = np.zeros((M, A), dt)
    w = weight[:M]
    grad[np.arange(M), a] = -(w / dt.type(M)) * np.clip(d, -k, k)
    dq[: M * A] = grad.ravel()
    td_loss_slots(isv, huber, w, synthetic, M, loss_idx, real_idx, synthetic_idx, frac_idx)


def td_loss_slots(isv, loss, w, synthetic, M, loss_idx, real_idx, synthetic_idx,
                  frac_idx) -> None:  # fmt: skip
    """cuda/td_loss.cuh: l_q = sum w loss / sum w over the batch (0 without weight), the same over
    its real and its synthetic rows (NaN when there are none; synthetic None: every row real)
    and the synthetic share of the rows, into the ISV (a slot < 0 is skipped)."""
    if isv is None:
        return
    syn = np.zeros(M, bool) if synthetic is None else synthetic[:M] != 0
    wl, w64 = w.astype(np.float64) * loss, w.astype(np.float64)
    s_r, w_r, s_s, w_s = total(wl[~syn]), total(w64[~syn]), total(wl[syn]), total(w64[syn])
    n_s = int(np.count_nonzero(syn))
    values = (
        (loss_idx, (s_r + s_s) / (w_r + w_s) if w_r + w_s > 0 else 0.0),
        (real_idx, s_r / w_r if n_s < M and w_r > 0 else np.nan),
        (synthetic_idx, s_s / w_s if n_s > 0 and w_s > 0 else np.nan),
        (frac_idx, n_s / M),
    )
    for idx, value in values:
        if idx >= 0:
            isv[idx] = value


def dqn_grad_norm(grad, stats, counters, isv, P, norm_idx) -> None:
    """stats[0] = ||grad||; Adam's step counters[0] += 1."""
    g = grad[: int(P)].astype(np.float64)
    norm = np.sqrt(total(g * g))
    stats[0] = norm
    if isv is not None and norm_idx >= 0:
        isv[norm_idx] = norm
    counters[ADAM_STEP] += np.uint64(1)


def dqn_adam(grad, stats, counters, isv, param, m, v, target, P, adam_idx) -> None:
    """One bias-corrected Adam step on param[:P] (step t = counters[0], already advanced), then
    the target network's sync from the new parameters (target_sync); the numbers lr, beta1,
    beta2, eps, clip, tau, period at isv[adam_idx + k]."""
    P, a = int(P), int(adam_idx)
    lr, beta1, beta2, eps, clip, tau = (F32(x) for x in isv[a : a + 6])
    period = int(isv[a + 6])
    norm = F32(stats[0])
    scale = F32(clip) / norm if clip > 0 and norm > clip else F32(1)
    g = grad[:P] * scale
    param[:P] = adam_step(g, counters, m[:P], v[:P], param[:P], lr, beta1, beta2, eps)
    target_sync(param, counters, target, P, tau, period)


def adam_step(g, counters, m, v, p, lr, beta1, beta2, eps) -> np.ndarray:
    """cuda/adam.cuh: bias-corrected Adam at step t = counters[0] on parameters p (float32) with
    gradient g; m and v (views) in place; returns the new parameters."""
    t = F32(counters[ADAM_STEP])
    b1, b2 = F32(beta1), F32(beta2)
    m[:] = b1 * m + (F32(1) - b1) * g
    v[:] = b2 * v + (F32(1) - b2) * g * g
    m_hat = m / (F32(1) - power(b1, t))
    v_hat = v / (F32(1) - power(b2, t))
    return p - F32(lr) * m_hat / (np.sqrt(v_hat) + F32(eps))


def target_sync(param, counters, target, P, tau, period) -> None:
    """Polyak average (tau > 0) or a hard copy when Adam's step is a multiple of `period`."""
    P = int(P)
    if tau > 0:
        target[:P] = F32(tau) * param[:P] + (F32(1) - F32(tau)) * target[:P]
    elif int(counters[ADAM_STEP]) % int(period) == 0:
        target[:P] = param[:P]


def epsilon(step: int, eps_start: float, eps_end: float, decay: float) -> np.float32:
    """The schedule: eps_end + (eps_start - eps_end) * max(0, 1 - step / decay), in float32."""
    frac = max(F32(0), F32(1) - F32(step) / F32(decay))
    return F32(eps_end) + (F32(eps_start) - F32(eps_end)) * frac


def dqn_act(q, h, aux_w, run_seed, action, counters, isv, p_up, B, A, H, schedule_idx,
            eps_idx) -> None:  # fmt: skip
    """Epsilon-greedy over q [B, A]: draws (seed, ACT, 2 (s B + b) + {0, 1}), s = counters[1],
    epsilon's start, end and decay steps at isv[schedule_idx + k] (schedule_idx < 0: greedy);
    with p_up, the aux head's prediction (aux_predict) too."""
    B, A = int(B), int(A)
    s = int(counters[ACT_STEP])
    eps = epsilon(s, *isv[schedule_idx : schedule_idx + 3]) if schedule_idx >= 0 else F32(0)
    base = np.uint64(2) * (np.uint64(s * B) + np.arange(B, dtype=np.uint64))
    seed = int(run_seed[0])  # the agent's own
    u1 = rng_uniform(seed, Stream.ACT, base)
    u2 = rng_uniform(seed, Stream.ACT, base + np.uint64(1))
    greedy = np.argmax(q[: B * A].reshape(B, A), axis=1)
    random = np.minimum(A - 1, (u2 * F32(A)).astype(np.int32))
    action[:B] = np.where(u1 < eps, random, greedy)
    counters[ACT_STEP] = np.uint64(s + 1)
    if isv is not None and eps_idx >= 0:
        isv[eps_idx] = eps
    if p_up is not None:
        aux_predict(h, aux_w, p_up, B, H)


def aux_predict(h, w, p_up, B, H) -> None:
    """p_up = sigmoid(w[H] + h @ w[:H]): the product in float32 (portable.matmul), the rest in
    float64."""
    B, H = int(B), int(H)
    z = matmul(h[: B * H].reshape(B, H), w[:H]).astype(np.float64) + np.float64(w[H])
    p_up[:B] = (1.0 / (1.0 + exp(-z))).astype(F32)


def dqn_aux_train(h, p_up, fill_mid, post_mid, w, partial, counters, isv, B, H, lr_idx,
                  loss_idx) -> None:  # fmt: skip
    """One SGD step of the aux head on rows whose mid moved; l_aux = their mean BCE."""
    B, H = int(B), int(H)
    up, before = post_mid[:B], fill_mid[:B]
    labeled = up != before
    if not labeled.any():
        return
    y = (up > before).astype(np.float64)[labeled]
    p = p_up[:B].astype(np.float64)[labeled]
    hl = h[: B * H].reshape(B, H).astype(np.float64)[labeled]
    # the rows' products (exact in float64) added in the project's order
    g = np.concatenate([total((p - y)[:, None] * hl, axis=0), [total(p - y)]])
    g = g / np.count_nonzero(labeled)
    pc = np.clip(p, 1e-7, 1 - 1e-7)
    loss = -mean(y * log(pc) + (1 - y) * log(1 - pc))
    w[: H + 1] = (w[: H + 1].astype(np.float64) - float(isv[lr_idx]) * g).astype(F32)
    if loss_idx >= 0:
        isv[loss_idx] = loss
