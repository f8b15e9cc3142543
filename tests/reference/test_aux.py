"""α and the w_aux_align controller on the NumPy oracles: w_α's gradient against central finite
differences of the TD loss (float64), its Adam step, clamp and target sync, and the controller
on hand values."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.reference import aux as ref
from alpha_rl.reference import dqn as dqn_ref

A, H, M = ref.ACTIONS, 5, 13


def inputs(seed: int) -> dict:
    gen = np.random.default_rng(seed)
    return dict(
        h=gen.normal(size=2 * M * H), aux_w=gen.normal(0, 0.5, H + 1),
        q=gen.normal(size=2 * M * A), q_tgt=gen.normal(size=M * A),
        action=gen.integers(0, A, M).astype(np.int32), reward=gen.normal(0, 2, M),
        done=(gen.random(M) < 0.3).astype(np.float64), weight=gen.uniform(0.2, 1, M),
    )  # fmt: skip


def td(x: dict, w: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """(the TD loss sum w huber / M, dq, aux of the h_t rows) with Q' = Q + w aux online."""
    q = x["q"].copy()
    aux = np.zeros(2 * M)
    ref.aux_alpha_bias(x["h"], x["aux_w"], w, q, aux, 2 * M, H)
    delta, dq = np.zeros(M), np.zeros(M * A)
    dqn_ref.dqn_td(q[: M * A], q[M * A :], x["q_tgt"], x["action"], x["reward"], x["done"],
                   x["weight"], None, None, delta, dq, np.array([0.9, 1.0, 1.0]), M, A, 0, 1, 2,
                   -1, -1, -1, -1)  # gamma 0.9, cut on done, kappa 1  # fmt: skip
    ad = np.abs(delta)
    huber = np.where(ad <= 1, 0.5 * delta**2, ad - 0.5)
    return float((x["weight"] * huber).sum() / M), dq, aux[:M]


def test_the_bias_is_w_alpha_times_the_aux_heads_signal() -> None:
    x = inputs(1)
    q = x["q"].copy()
    w = np.array([0.0, 0.3, -0.2])
    aux = np.zeros(2 * M)
    ref.aux_alpha_bias(x["h"], x["aux_w"], w, q, aux, 2 * M, H)
    h = x["h"].reshape(2 * M, H)
    p_up = 1 / (1 + np.exp(-(h @ x["aux_w"][:H] + x["aux_w"][H])))
    np.testing.assert_allclose(aux, 2 * p_up - 1)
    np.testing.assert_allclose(q.reshape(-1, A), x["q"].reshape(-1, A) + w * aux[:, None])
    assert np.all(q.reshape(-1, A)[:, 0] == x["q"].reshape(-1, A)[:, 0])  # FLAT: w = 0


def test_w_alpha_gradient_matches_finite_differences() -> None:
    x = inputs(2)
    w = np.array([0.0, 0.2, -0.1])
    _, dq, aux = td(x, w)
    grad = ref.alpha_grad(dq, aux, M)
    eps = 1e-6
    for a in (ref.LONG, ref.SHORT):
        up, down = w.copy(), w.copy()
        up[a] += eps
        down[a] -= eps
        num = (td(x, up)[0] - td(x, down)[0]) / (2 * eps)
        assert abs(grad[a] - num) < 1e-8 * max(1.0, abs(num)), (a, grad[a], num)
        assert abs(num) > 1e-4, "the check must see a real gradient"


def adam(g_sign: float, w0: float, bound: float, lr: float = 0.1, step: int = 1, tau=0.0):
    aux = np.ones(4, np.float32)
    dq = np.zeros(4 * A, np.float32)
    dq.reshape(4, A)[:, 1:] = g_sign  # the same gradient on LONG and SHORT
    dq.reshape(4, A)[:, 0] = 5.0  # FLAT's gradient: unused
    w = np.array([0.0, w0, w0], np.float32)
    m, v, target = np.zeros(A, np.float32), np.zeros(A, np.float32), w.copy()
    isv = np.array([np.nan] * 4 + [lr, 0.9, 0.999, 1e-8, bound, tau, 2], np.float32)
    ref.aux_alpha_update(dq, aux, np.array([step, 0, 0, 0], np.uint64), w, m, v, target, isv, 4,
                         4, 1, 2)  # ALPHA_NUMBERS at isv[4:11]  # fmt: skip
    return w, target, isv[:4]


def test_adam_steps_against_the_gradient_keeps_flat_and_clamps() -> None:
    w, target, isv = adam(+1.0, 0.0, 1.0)
    assert w[0] == 0.0 and w[1] == w[2] == pytest.approx(-0.1)  # the first Adam step is lr
    assert isv[1] == w[1] and isv[2] == w[2] and np.isnan(isv[0])
    np.testing.assert_array_equal(target, [0.0, 0.0, 0.0])  # step 1: no copy with period 2
    w, target, _ = adam(-1.0, 0.95, 1.0, step=2)
    assert w[1] == w[2] == np.float32(1.0)  # clamped to the bound
    np.testing.assert_array_equal(target, w)  # step 2: the hard copy
    w, target, _ = adam(+1.0, 0.5, 1.0, tau=0.5)
    np.testing.assert_allclose(target[1:], 0.5 * w[1:] + 0.25, rtol=1e-6)  # Polyak


def test_lr_zero_keeps_w_alpha_bit_for_bit() -> None:
    w, target, _ = adam(+3.0, 0.0, 1.0, lr=0.0)
    assert np.all(w == 0) and np.all(target == 0)


WEIGHTS = [1.0, 1.0, -1.0, 1.0, 0.5, 1.0]  # w_c of c0..c5 (|w_c| weighs the magnitudes)


def controller(aux_ema: float, abs_emas: list[float], w: float) -> tuple[float, float]:
    isv = np.zeros(26, np.float32)
    isv[0], isv[2:8], isv[10], isv[16:22] = aux_ema, abs_emas, w, WEIGHTS
    isv[22:25] = [0.5, 0.1, 5.0]  # gain, target share, w_max
    ref.aux_controller(isv, 0, 2, 16, 6, 10, 11, 22)
    return float(isv[11]), float(isv[10])


@pytest.mark.parametrize(
    ("aux_ema", "abs_emas", "w", "want_share", "want_w"),
    [
        (1.0, [1.0, 2.0, 0.0, 0.0, 2.0, 0.0], 1.0, 0.2, 1.0 + 0.5 * (0.1 - 0.2)),  # 1 / (1 + 4)
        (-0.5, [0.5, 0.0, 0.0, 0.0, 0.0, 0.0], 2.0, 2 / 3, 2.0 + 0.5 * (0.1 - 2 / 3)),  # |c6|, w
        (0.0, [0.0, 0.0, 3.0, 0.0, 0.0, 0.0], 1.0, 0.0, 1.05),  # nothing paid yet: share 0
        (0.0, [1.0] * 6, 4.99, 0.0, 5.0),  # clamped at w_max
        (9.0, [1.0, 0, 0, 0, 0, 0], 0.1, 0.9 / 1.9, 0.0),  # clamped at 0
    ],
)
def test_the_controller_on_hand_values(aux_ema, abs_emas, w, want_share, want_w) -> None:
    share, new_w = controller(aux_ema, abs_emas, w)
    assert share == pytest.approx(want_share, rel=1e-6)
    assert new_w == pytest.approx(want_w, rel=1e-6, abs=1e-7)


def test_the_controller_settles_where_the_share_meets_the_target() -> None:
    # fixed EMAs: w |c6| / (w |c6| + S) = 0.1 at w* = 0.1 S / (0.9 |c6|)
    abs_emas = [1.0, 0.5, 0.5, 0.0, 2.0, 0.0]
    S = sum(abs(c) * e for c, e in zip(WEIGHTS, abs_emas, strict=True))
    w = 0.0
    for _ in range(800):
        share, w = controller(0.2, abs_emas, w)
    assert w == pytest.approx(0.1 * S / (0.9 * 0.2), rel=1e-4)
    assert share == pytest.approx(0.1, rel=1e-4)
