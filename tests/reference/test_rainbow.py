"""Rainbow's noisy nets and C51 head on the NumPy oracles: the noise's structure and draws, the
projection on hand cases, and float64 gradient checks (noisy mu and sigma through the network,
the C51 cross-entropy, the atom-major dueling head) against central finite differences."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.agent import NetLayout, QNetwork, init_params, init_sigma, layer_views, noise_units
from alpha_rl.reference import c51 as c51_ref
from alpha_rl.reference import noisy as noisy_ref
from tests.reference.test_mlp import numeric_grad, oracle_ops

H, ROWS, A = 4, 7, 3
SEED = 11


def network(dueling: bool, atoms: int = 1) -> tuple[NetLayout, QNetwork]:
    layout = NetLayout.build(H, (5, 6), A, dueling, atoms)
    return layout, QNetwork(layout, oracle_ops(), lambda n: np.zeros(n, np.float64))


def compose(layout: NetLayout, theta: np.ndarray, step: int, role: int, nets: int = 1,
            target: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(weights [nets * P], net 0's noise [P]) of noisy_compose at counters[0] = step."""
    P = layout.size
    unit_in, unit_out, N = noise_units(layout)
    counters = np.array([step, 0, 0, 0], np.uint64)
    weights, noise = np.zeros(nets * P, theta.dtype), np.zeros(P, np.float32)
    noisy_ref.noisy_compose(theta, target, unit_in, unit_out, counters, np.array([SEED], np.uint64),
                            weights, noise, P, N, nets, 0, role)  # fmt: skip
    return weights, noise


# --- noisy nets ---


def test_noise_is_factorised_per_layer_and_drawn_from_the_counter() -> None:
    layout, _ = network(dueling=False)
    P = layout.size
    mu, sigma = np.zeros(P, np.float32), np.ones(P, np.float32)
    weights, noise = compose(layout, np.concatenate([mu, sigma]), step=5, role=1)
    np.testing.assert_array_equal(weights, noise)  # mu = 0, sigma = 1: the noise itself
    _, _, N = noise_units(layout)
    assert sum(ly.n_in + ly.n_out for ly in layout.layers) == N
    first = 0
    for ly in layout.layers:
        f_in = noisy_ref.noise_unit(SEED, 3 * 5 + 1, N, first + np.arange(ly.n_in))
        f_out = noisy_ref.noise_unit(SEED, 3 * 5 + 1, N, first + ly.n_in + np.arange(ly.n_out))
        W = noise[ly.w : ly.b].reshape(ly.n_out, ly.n_in)
        np.testing.assert_array_equal(W, np.outer(f_out, f_in).astype(np.float32))
        np.testing.assert_array_equal(noise[ly.b : ly.b + ly.n_out], f_out)
        first += ly.n_in + ly.n_out
    # another step or role draws other noise; the same step and role the same
    again, _ = compose(layout, np.concatenate([mu, sigma]), step=5, role=1)
    np.testing.assert_array_equal(again, weights)
    for step, role in ((6, 1), (5, 0), (5, 2)):
        other, _ = compose(layout, np.concatenate([mu, sigma]), step=step, role=role)
        assert not np.allclose(other, weights)


def test_the_noise_units_are_standard_gaussians_before_f() -> None:
    # f(g)^2 sign(f) recovers g: over 200k units its mean is ~0, its variance ~1, its tails Gaussian
    f = noisy_ref.noise_unit(SEED, 0, 200_000, np.arange(200_000)).astype(np.float64)
    g = np.sign(f) * f * f
    assert abs(g.mean()) < 0.01 and abs(g.var() - 1) < 0.02
    assert 0.0035 < np.mean(np.abs(g) > 2.807) < 0.0065  # P(|g| > 2.807) = 0.005


def test_init_sigma_is_sigma0_over_sqrt_fan_in() -> None:
    layout, _ = network(dueling=True)
    sigma = init_sigma(layout, 0.5)
    for ly in layout.layers:
        assert np.all(sigma[ly.w : ly.b + ly.n_out] == np.float32(0.5 / np.sqrt(ly.n_in)))


def test_the_target_net_draws_its_own_noise_in_the_same_launch() -> None:
    layout, _ = network(dueling=False)
    P, gen = layout.size, np.random.default_rng(0)
    theta, target = gen.normal(size=2 * P), gen.normal(size=2 * P)
    both, noise = compose(layout, theta, step=2, role=1, nets=2, target=target)
    online, _ = compose(layout, theta, step=2, role=1)
    target_alone, _ = compose(layout, target, step=2, role=2)
    np.testing.assert_array_equal(both[:P], online)
    np.testing.assert_array_equal(both[P:], target_alone)
    np.testing.assert_array_equal(both[:P], theta[:P] + theta[P:] * noise)


@pytest.mark.parametrize(("dueling", "atoms"), [(False, 1), (True, 1), (True, 4)])
def test_noisy_mu_and_sigma_gradients_match_finite_differences(dueling: bool, atoms: int) -> None:
    layout, net = network(dueling, atoms)
    P, gen = layout.size, np.random.default_rng(4)
    theta = np.concatenate([init_params(layout, 1).astype(np.float64) + gen.normal(0, 0.1, P),
                            gen.uniform(0.05, 0.3, P)])  # fmt: skip
    x = gen.normal(size=ROWS * H)
    dq = gen.normal(size=ROWS * layout.outputs)
    bufs = net.buffers(ROWS)

    def loss(t: np.ndarray) -> float:
        weights, _ = compose(layout, t, step=3, role=1)
        return float(net.forward(layer_views(weights, layout), x, bufs) @ dq)

    weights, noise = compose(layout, theta, step=3, role=1)
    net.forward(layer_views(weights, layout), x, bufs)
    grad = np.zeros(2 * P)
    net.backward(layer_views(weights, layout), x, bufs, dq.copy(), layer_views(grad, layout))
    noisy_ref.noisy_grad(noise, grad, P)
    num = numeric_grad(loss, theta)
    assert np.abs(grad - num).max() < 1e-7 * max(1.0, np.abs(num).max()), np.abs(grad - num).max()
    assert np.abs(num[P:]).max() > 1e-3, "the check must see real sigma gradients"


# --- C51 ---

V_MIN, V_MAX, Z = -2.0, 2.0, 5  # atoms -2, -1, 0, 1, 2


def numbers(gamma: float) -> np.ndarray:
    """The ISV the C51 kernels read: gamma, cut_on_done (1), then the support."""
    return np.float32([gamma, 1.0, V_MIN, V_MAX])


def projected(reward: float, scale: float, p: list[float]) -> np.ndarray:
    return c51_ref.project(np.array([p], np.float32), np.array([reward], np.float32),
                           np.array([scale], np.float32), Z, V_MIN, V_MAX)[0]  # fmt: skip


def test_atoms_span_the_support() -> None:
    np.testing.assert_array_equal(c51_ref.atoms(V_MIN, V_MAX, Z), [-2, -1, 0, 1, 2])
    z = c51_ref.atoms(-10.0, 10.0, 51)
    assert z[0] == -10 and z[-1] == 10 and z[25] == 0 and np.allclose(np.diff(z), 0.4)


HAND_CASES = [  # (reward, scale = discount * (1 - done), p, the projected m)
    # done (scale 0): every atom moves to r; r = 0.25 splits 3/4 : 1/4 between 0 and 1
    (0.25, 0.0, [0.1, 0.2, 0.3, 0.2, 0.2], [0, 0, 0.75, 0.25, 0]),
    # done, r on an atom: all the mass on it (l == u)
    (-1.0, 0.0, [0.2, 0.2, 0.2, 0.2, 0.2], [0, 1, 0, 0, 0]),
    # beyond the bounds: clipped onto the end atoms
    (5.0, 0.0, [0.2, 0.2, 0.2, 0.2, 0.2], [0, 0, 0, 0, 1]),
    (-7.0, 0.9, [0.1, 0.2, 0.3, 0.2, 0.2], [1, 0, 0, 0, 0]),
    # no reward, scale 1: the distribution itself (every atom lands on itself)
    (0.0, 1.0, [0.1, 0.2, 0.3, 0.25, 0.15], [0.1, 0.2, 0.3, 0.25, 0.15]),
    # r = 1, scale 1: shifted up one atom, the top atom's mass and the shifted one's on 2
    (1.0, 1.0, [0.1, 0.2, 0.3, 0.25, 0.15], [0, 0.1, 0.2, 0.3, 0.4]),
    # gamma^n = 0.5, r = 0: atoms -2..2 land on -1, -0.5, 0, 0.5, 1
    (0.0, 0.5, [0.2, 0.2, 0.2, 0.2, 0.2], [0, 0.3, 0.4, 0.3, 0]),
]


@pytest.mark.parametrize(("reward", "scale", "p", "want"), HAND_CASES)
def test_the_projection_on_hand_cases(reward, scale, p, want) -> None:
    m = projected(reward, scale, p)
    np.testing.assert_allclose(m, want, atol=1e-6)
    assert abs(m.sum() - 1) < 1e-6, "the projection keeps the mass"


def test_c51_project_uses_the_online_greedy_action_and_the_rows_own_discount() -> None:
    M = 3
    online = np.zeros((M, Z, A), np.float32)
    online[:, 4, 2] = 5.0  # action 2's distribution leans on +2: the greedy action
    target = np.zeros((M, Z, A), np.float32)
    target[:, 0, 2] = 50.0  # the target net puts action 2's mass on -2, others uniform
    reward = np.array([0.0, 0.0, 1.0], np.float32)
    done = np.array([0.0, 1.0, 0.0], np.float32)
    discount = np.array([0.5, 0.5, 1.0], np.float32)  # gamma^k of each row (n-step)
    m = np.zeros(M * Z, np.float32)
    c51_ref.c51_project(online.ravel(), target.ravel(), reward, done, discount,
                        numbers(0.9), m, M, A, Z, 0, 1, 2)  # fmt: skip
    m = m.reshape(M, Z)
    np.testing.assert_allclose(m[0], [0, 1, 0, 0, 0], atol=1e-6)  # 0 + 0.5 * (-2) = -1
    np.testing.assert_allclose(m[1], [0, 0, 1, 0, 0], atol=1e-6)  # done: r = 0
    np.testing.assert_allclose(m[2], [0, 1, 0, 0, 0], atol=1e-6)  # 1 + 1 * (-2) = -1
    no_discount = np.zeros(M * Z, np.float32)
    c51_ref.c51_project(online.ravel(), target.ravel(), reward, done, None, numbers(0.5),
                        no_discount, M, A, Z, 0, 1, 2)  # fmt: skip
    np.testing.assert_allclose(no_discount.reshape(M, Z)[0], m[0], atol=1e-6)  # gamma = 0.5


def test_expected_q_of_uniform_and_peaked_logits() -> None:
    logits = np.zeros((2, Z, A), np.float32)
    logits[1, 3, 1] = 100.0  # row 1, action 1: all mass on atom 1.0
    q = np.zeros(2 * A, np.float32)
    c51_ref.c51_q(logits.ravel(), numbers(0.0), q, 2, A, Z, 2)
    np.testing.assert_allclose(q.reshape(2, A), [[0, 0, 0], [0, 1, 0]], atol=1e-6)


def c51_inputs(seed: int, M: int = 9) -> dict:
    gen = np.random.default_rng(seed)
    m = gen.dirichlet(np.ones(Z), size=M)
    return dict(action=gen.integers(0, A, M).astype(np.int32), m=m.ravel(),
                weight=gen.uniform(0.2, 1.0, M), synthetic=(gen.random(M) < 0.4).astype(np.uint8),
                logits=gen.normal(size=M * Z * A))  # fmt: skip


def c51_loss(x: dict, logits: np.ndarray, isv: np.ndarray | None = None):
    M = x["action"].size
    delta, dlogits = np.zeros(M), np.zeros(M * Z * A)
    c51_ref.c51_loss(logits, x["action"], x["m"], x["weight"], x["synthetic"], delta, dlogits,
                     isv, np.zeros(1, np.uint64), M, A, Z, 0, 1, 2, 3)  # fmt: skip
    return delta, dlogits


def test_c51_loss_gradient_matches_finite_differences() -> None:
    x = c51_inputs(5)
    M = x["action"].size

    def objective(logits: np.ndarray) -> float:
        delta, _ = c51_loss(x, logits)
        return float((x["weight"] * delta).sum() / M)

    _, grad = c51_loss(x, x["logits"])
    num = numeric_grad(objective, x["logits"])
    assert np.abs(grad - num).max() < 1e-8, np.abs(grad - num).max()
    rows = grad.reshape(M, Z, A)
    other = np.ones((M, A), bool)
    other[np.arange(M), x["action"]] = False
    assert np.all(rows.transpose(0, 2, 1)[other] == 0), "only the taken action's logits move"


def test_c51_loss_is_the_weighted_cross_entropy_and_its_parts() -> None:
    x = c51_inputs(6)
    isv = np.full(4, np.nan)
    delta, _ = c51_loss(x, x["logits"], isv)
    M = x["action"].size
    p = c51_ref.softmax(x["logits"], M, Z, A)[np.arange(M), :, x["action"]]
    ce = -(x["m"].reshape(M, Z) * np.log(p)).sum(axis=1)
    np.testing.assert_allclose(delta, ce, rtol=1e-12)  # the replay's priority
    w, syn = x["weight"], x["synthetic"] != 0
    np.testing.assert_allclose(isv[:3], [(w * ce).sum() / w.sum(),
                                         (w * ce)[~syn].sum() / w[~syn].sum(),
                                         (w * ce)[syn].sum() / w[syn].sum()])  # fmt: skip
    assert isv[3] == syn.mean()


def test_the_atom_major_dueling_head_matches_finite_differences() -> None:
    layout, net = network(dueling=True, atoms=4)
    assert layout.layers[-1].n_out == 4 * (A + 1) and layout.outputs == 4 * A
    gen = np.random.default_rng(8)
    theta = init_params(layout, 2).astype(np.float64) + gen.normal(0, 0.1, layout.size)
    x = gen.normal(size=ROWS * H)
    dq = gen.normal(size=ROWS * layout.outputs)
    bufs = net.buffers(ROWS)

    def loss(t: np.ndarray) -> float:
        return float(net.forward(layer_views(t, layout), x, bufs) @ dq)

    out = net.forward(layer_views(theta, layout), x, bufs).reshape(ROWS, 4, A)
    va = bufs.h[-1].reshape(ROWS, 4, A + 1)  # per atom: advantages, then the value
    adv = va[..., :A]
    np.testing.assert_allclose(out, va[..., A:] + adv - adv.mean(axis=2, keepdims=True))
    grad = np.zeros(layout.size)
    net.backward(layer_views(theta, layout), x, bufs, dq.copy(), layer_views(grad, layout))
    num = numeric_grad(loss, theta)
    assert np.abs(grad - num).max() < 1e-7 * max(1.0, np.abs(num).max()), np.abs(grad - num).max()
