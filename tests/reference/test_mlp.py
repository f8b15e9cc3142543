"""Gradient checks in float64: the network's backward pass and the TD loss, against central
finite differences, running QNetwork's own kernel sequence on the NumPy oracles."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from alpha_rl.agent import MlpOps, NetLayout, QNetwork, init_params, layer_views
from alpha_rl.reference import dqn as dqn_ref
from alpha_rl.reference import mlp as mlp_ref

H, ROWS, A = 4, 7, 3


def by_name(fn):
    return lambda stream=None, **named: fn(**named)  # the oracle takes the declared names


def oracle_ops(**more) -> MlpOps:
    """The four ops every QNetwork has, on the oracles; `more` adds optional ones (gemm_rows=
    mlp_ref.mlp_gemm_rows, ...)."""
    return MlpOps(gemm=by_name(mlp_ref.mlp_gemm), bias_grad=by_name(mlp_ref.mlp_bias_grad),
                  duel_f=by_name(mlp_ref.mlp_dueling_forward),
                  duel_b=by_name(mlp_ref.mlp_dueling_backward),
                  **{name: by_name(fn) for name, fn in more.items()})  # fmt: skip


def network(dueling: bool) -> tuple[NetLayout, QNetwork]:
    layout = NetLayout.build(H, (5, 6), A, dueling)
    return layout, QNetwork(layout, oracle_ops(), lambda n: np.zeros(n, np.float64))


def numeric_grad(f, theta: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    grad = np.zeros_like(theta)
    for k in range(theta.size):
        plus, minus = theta.copy(), theta.copy()
        plus[k] += eps
        minus[k] -= eps
        grad[k] = (f(plus) - f(minus)) / (2 * eps)
    return grad


@pytest.mark.parametrize("dueling", [False, True])
def test_network_backward_matches_finite_differences(dueling: bool) -> None:
    layout, net = network(dueling)
    gen = np.random.default_rng(3)
    theta = init_params(layout, 1).astype(np.float64) + gen.normal(0, 0.1, layout.size)
    x = gen.normal(size=ROWS * H)
    weights = gen.normal(size=ROWS * A)
    bufs = net.buffers(ROWS)

    def loss(t: np.ndarray) -> float:
        return float(net.forward(layer_views(t, layout), x, bufs) @ weights)

    loss(theta)
    grad = np.zeros(layout.size)
    net.backward(layer_views(theta, layout), x, bufs, weights.copy(), layer_views(grad, layout))
    num = numeric_grad(loss, theta)
    assert np.abs(grad - num).max() < 1e-7 * max(1.0, np.abs(num).max()), np.abs(grad - num).max()
    assert np.abs(num).max() > 1e-3, "the check must see real gradients"


def td_inputs(seed: int, M: int = 11):
    gen = np.random.default_rng(seed)
    return dict(
        q_tp1=gen.normal(size=M * A), q_tp1_target=gen.normal(size=M * A),
        action=gen.integers(0, A, size=M).astype(np.int32), reward=gen.normal(0, 2, size=M),
        done=(gen.random(M) < 0.3).astype(np.float64), weight=gen.uniform(0.2, 1.0, size=M),
    )  # fmt: skip


def td_loss(q_t: np.ndarray, inputs: dict, cut: int = 1) -> tuple[float, np.ndarray, np.ndarray]:
    """(the objective sum w huber / M whose gradient dq is, dq, delta). The kernel reports l_q
    as the weighted mean sum w huber / sum w: the same objective scaled by M / sum w."""
    M = len(inputs["action"])
    delta, dq, isv = np.zeros(M), np.zeros(M * A), np.array([0.0, 0.9, float(cut), 1.0])
    dqn_ref.dqn_td(q_t, inputs["q_tp1"], inputs["q_tp1_target"], inputs["action"],
                   inputs["reward"], inputs["done"], inputs["weight"], None, None, delta, dq, isv,
                   M, A, 1, 2, 3, 0, -1, -1, -1)  # l_q; gamma 0.9, cut, kappa 1  # fmt: skip
    return float(isv[0]) * float(inputs["weight"].sum()) / M, dq, delta


@pytest.mark.parametrize("cut", [0, 1])
def test_td_loss_gradient_matches_finite_differences(cut: int) -> None:
    inputs = td_inputs(5)
    q_t = np.random.default_rng(6).normal(0, 2, size=11 * A)
    _, dq, delta = td_loss(q_t, inputs, cut)
    assert (np.abs(delta) > 1).any() and (np.abs(delta) < 1).any(), "both Huber branches"
    num = numeric_grad(lambda q: td_loss(q, inputs, cut)[0], q_t)
    np.testing.assert_allclose(dq, num, atol=1e-8)


def test_td_target_is_double_dqn_with_done_cut() -> None:
    # one sample: online argmax on s' is action 2, the target net's value there is 5
    delta, dq, isv = np.zeros(1), np.zeros(3), np.array([0.0, 0.9, 1.0, 1.0])  # as above
    args = (np.array([0.0, 1.0, 0.0]), np.array([0.0, 1.0, 3.0]), np.array([9.0, 9.0, 5.0]),
            np.array([1], np.int32), np.array([0.5]), np.array([0.0]), np.array([1.0]))  # fmt: skip
    dqn_ref.dqn_td(*args, None, None, delta, dq, isv, 1, 3, 1, 2, 3, 0, -1, -1, -1)
    assert delta[0] == pytest.approx(0.5 + 0.9 * 5.0 - 1.0)  # y = 5.0, delta = 4.0
    assert isv[0] == pytest.approx(4.0 - 0.5)  # Huber, linear branch
    assert dq.tolist() == [0.0, -1.0, 0.0]
    done = (*args[:5], np.array([1.0]), args[6])
    dqn_ref.dqn_td(*done, None, None, delta, dq, isv, 1, 3, 1, 2, 3, 0, -1, -1, -1)
    assert delta[0] == pytest.approx(0.5 - 1.0)  # no bootstrap past a close
    # an n-step row bootstraps with its own discount (0.5 = gamma^k) instead of gamma
    dqn_ref.dqn_td(*args, None, np.array([0.5]), delta, dq, isv, 1, 3, 1, 2, 3, 0, -1, -1, -1)
    assert delta[0] == pytest.approx(0.5 + 0.5 * 5.0 - 1.0)


def test_full_chain_gradient_of_l_q() -> None:
    layout, net = network(False)
    gen = np.random.default_rng(8)
    theta = init_params(layout, 2).astype(np.float64)
    inputs, x_t = td_inputs(9, M=ROWS), gen.normal(size=ROWS * H)
    bufs = net.buffers(ROWS)

    def l_q(t: np.ndarray) -> float:
        return td_loss(net.forward(layer_views(t, layout), x_t, bufs).copy(), inputs)[0]

    _, dq, _ = td_loss(net.forward(layer_views(theta, layout), x_t, bufs).copy(), inputs)
    grad = np.zeros(layout.size)
    net.backward(layer_views(theta, layout), x_t, bufs, dq, layer_views(grad, layout))
    np.testing.assert_allclose(grad, numeric_grad(l_q, theta), atol=1e-8)


def test_split_k_equals_one_pass() -> None:
    gen = np.random.default_rng(5)
    M, N, K = 7, 5, 300
    A, B = gen.normal(size=K * M), gen.normal(size=K * N)  # A stored [K, M] (trans_a)
    want = np.zeros(M * N)
    mlp_ref.mlp_gemm(A, B, None, None, want, M, N, K, 1, 0, 0)
    for splits in (1, 2, 3, 7, 40):  # 40: more splits than K / 32 chunks, the tail ones empty
        P, got = np.full(splits * M * N, np.nan), np.zeros(M * N)
        mlp_ref.mlp_gemm_partial(A, B, P, M, N, K, 1, 0, splits)
        mlp_ref.mlp_sum_splits(P, None, got, None, M * N, splits, K, 0)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"splits={splits}")
    assert mlp_ref.split_chunk(300, 3) == 128 and mlp_ref.split_chunk(512, 4) == 128


def test_backward_with_split_k_matches_finite_differences() -> None:
    ops = oracle_ops(gemm_partial=mlp_ref.mlp_gemm_partial, sum_splits=mlp_ref.mlp_sum_splits)
    layout = NetLayout.build(H, (5, 6), A, False)
    net = QNetwork(layout, ops, lambda n: np.zeros(n, np.float64))
    rows = 300  # two splits of the 128-row SPLIT_ROWS
    gen = np.random.default_rng(8)
    theta = init_params(layout, 2).astype(np.float64) + gen.normal(0, 0.1, layout.size)
    x, weights = gen.normal(size=rows * H), gen.normal(size=rows * A)
    bufs = net.buffers(rows)
    assert bufs.splits == 2
    loss = lambda t: float(net.forward(layer_views(t, layout), x, bufs) @ weights)  # noqa: E731
    loss(theta)
    grad = np.zeros(layout.size)
    net.backward(layer_views(theta, layout), x, bufs, weights.copy(), layer_views(grad, layout))
    num = numeric_grad(loss, theta)
    assert np.abs(grad - num).max() < 1e-6 * max(1.0, np.abs(num).max())


def test_split_k_in_one_launch_gives_the_same_gradients() -> None:
    """With gemm_splitk (and a counter allocator) each split-K weight gradient, its sums and its
    bias gradient are one launch; the gradients equal the two-launch path's to the bit."""
    launches = []

    def splitk(stream=None, **a):
        launches.append(a["splits"])
        mlp_ref.mlp_gemm_splitk(**a)

    two = oracle_ops(gemm_partial=mlp_ref.mlp_gemm_partial, sum_splits=mlp_ref.mlp_sum_splits)
    one = dataclasses.replace(two, gemm_splitk=splitk)
    layout = NetLayout.build(H, (5, 6), A, False)
    rows, gen = 300, np.random.default_rng(9)
    theta = init_params(layout, 2).astype(np.float64) + gen.normal(0, 0.1, layout.size)
    x, dq = gen.normal(size=rows * H), gen.normal(size=rows * A)
    grads = []
    for ops, counts in ((two, None), (one, lambda n: np.zeros(n, np.uint32))):
        net = QNetwork(layout, ops, lambda n: np.zeros(n, np.float64), counts)
        bufs = net.buffers(rows)
        net.forward(layer_views(theta, layout), x, bufs)
        grad = np.zeros(layout.size)
        net.backward(layer_views(theta, layout), x, bufs, dq.copy(), layer_views(grad, layout))
        grads.append(grad)
    assert launches == [2, 2, 2] and bufs.counters is not None and not bufs.counters.any()
    np.testing.assert_array_equal(*grads)


def test_wide_gemm_is_used_only_where_it_fills_the_gpu() -> None:
    calls = []

    def recording(name):
        return lambda stream=None, **a: calls.append((name, a["M"], a["N"]))

    narrow = []
    ops = dataclasses.replace(
        oracle_ops(), gemm=recording("gemm"), gemm_64=recording("gemm_64"),
        gemm_rows=lambda stream=None, **a: narrow.append((a["M"], a["N"])),
    )  # fmt: skip
    layout = NetLayout.build(32, (256, 256), A, False)
    net = QNetwork(layout, ops, lambda n: np.zeros(n, np.float32))
    params = layer_views(np.zeros(layout.size, np.float32), layout)
    net.forward(params, np.zeros(4096 * 32, np.float32), net.buffers(4096))
    # 4096 x 256 outputs are 256 tiles of 64 x 64 (but the first layer's K = 32 is too short);
    # the 3-wide head runs a warp per row
    assert calls == [("gemm", 4096, 256), ("gemm_64", 4096, 256)] and narrow == [(4096, 3)]
    calls.clear()
    net.forward(params, np.zeros(512 * 32, np.float32), net.buffers(512))
    assert [c[0] for c in calls] == ["gemm"] * 2  # 512 rows: 32 wide tiles, too few
    plain = oracle_ops()  # no gemm_64: always gemm
    assert QNetwork(layout, plain, None).gemm(4096, 256, 256) is plain.gemm


@pytest.mark.parametrize("dueling", [False, True])
def test_backward_through_the_first_rows_of_a_longer_forward(dueling: bool) -> None:
    """The learner forwards h_t and h_tp1 as one batch and backpropagates the h_t half."""
    layout, net = network(dueling)
    gen = np.random.default_rng(11)
    theta = init_params(layout, 4).astype(np.float64) + gen.normal(0, 0.1, layout.size)
    x, dq = gen.normal(size=2 * ROWS * H), gen.normal(size=ROWS * A)
    alone, both = net.buffers(ROWS), net.buffers(2 * ROWS)
    params = layer_views(theta, layout)
    q_alone = net.forward(params, x[: ROWS * H], alone).copy()
    q_both = net.forward(params, x, both)
    np.testing.assert_allclose(q_both[: ROWS * A], q_alone, rtol=1e-12, atol=1e-12)
    want, got = np.zeros(layout.size), np.full(layout.size, np.nan)
    net.backward(params, x[: ROWS * H], alone, dq.copy(), layer_views(want, layout))
    net.backward(params, x[: ROWS * H], net.first_rows(both, ROWS), dq.copy(),
                 layer_views(got, layout))  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="first_rows"):
        net.first_rows(alone, ROWS + 1)


@pytest.mark.parametrize("dueling", [False, True])
def test_forward_pair_is_two_forwards(dueling: bool) -> None:
    """QNetwork.forward_pair through the pair ops equals two forwards, bit for bit."""
    layout, plain = network(dueling)
    ops = oracle_ops(gemm_rows=mlp_ref.mlp_gemm_rows, gemm_pair=mlp_ref.mlp_gemm_pair,
                     gemm_rows_pair=mlp_ref.mlp_gemm_rows_pair)  # fmt: skip
    paired = QNetwork(layout, ops, lambda n: np.zeros(n, np.float64))
    gen = np.random.default_rng(3)
    thetas = [init_params(layout, s).astype(np.float64) for s in (1, 2)]
    views = [layer_views(t, layout) for t in thetas]
    x1, x2 = gen.normal(size=ROWS * H), gen.normal(size=(ROWS - 3) * H)
    q1, q2 = paired.forward_pair(views[0], x1, paired.buffers(ROWS), views[1], x2,
                                 paired.buffers(ROWS - 3))  # fmt: skip
    np.testing.assert_array_equal(q1, plain.forward(views[0], x1, plain.buffers(ROWS)))
    np.testing.assert_array_equal(q2, plain.forward(views[1], x2, plain.buffers(ROWS - 3)))


def test_tf32_rounds_as_cvt_rna() -> None:
    """10 mantissa bits, to nearest, ties away from zero at the 13th bit; an exact TF32 value
    kept; inf and NaN kept."""
    one = np.float32(1.0)
    ulp = np.float32(2.0**-10)  # TF32's ulp at 1
    x = np.array([one + ulp / 2, -(one + ulp / 2), one + ulp / 2 - np.float32(2.0**-23),
                  one + ulp, np.inf, -np.inf], np.float32)  # fmt: skip
    got = mlp_ref.tf32(x)
    np.testing.assert_array_equal(got[:4], [one + ulp, -(one + ulp), one, one + ulp])
    assert np.isposinf(got[4]) and np.isneginf(got[5]) and np.isnan(mlp_ref.tf32(np.float32("nan")))


def test_the_tf32_oracle_multiplies_the_rounded_operands() -> None:
    """mlp_gemm_tf32 is mlp_gemm of tf32(A) and tf32(B); it differs from mlp_gemm's product."""
    gen = np.random.default_rng(1)
    A, B = gen.normal(size=(5, 40)).astype(np.float32), gen.normal(size=(40, 3)).astype(np.float32)
    got, want = np.zeros(15, np.float32), np.zeros(15, np.float32)
    mlp_ref.mlp_gemm_tf32(A.ravel(), B.ravel(), None, None, got, 5, 3, 40, 0, 0, 0)
    mlp_ref.mlp_gemm(
        mlp_ref.tf32(A).ravel(), mlp_ref.tf32(B).ravel(), None, None, want, 5, 3, 40, 0, 0, 0
    )
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, (A @ B).ravel())
