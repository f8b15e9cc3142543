"""dqn_* kernels on the GPU against their oracles; the learner itself on the GPU."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.kernels import dqn
from alpha_rl.reference import dqn as ref
from tests.helpers import device_and_oracle

pytestmark = pytest.mark.gpu
SIZES = (1, 33, 512, 1000)


@pytest.mark.parametrize("M", SIZES)
@pytest.mark.parametrize("synthetic", ["none", "mixed", "all"])
def test_dqn_td_matches_reference(cuda_backend, M: int, synthetic: str) -> None:
    gen = np.random.default_rng(M)
    f = lambda n, s=1.0: (gen.normal(size=n) * s).astype(np.float32)  # noqa: E731
    flags = {"none": None, "mixed": (gen.random(M) < 0.3).astype(np.uint8),
             "all": np.ones(M, np.uint8)}[synthetic]  # fmt: skip
    host = {"q_t": f(M * 3), "q_tp1": f(M * 3), "q_tp1_target": f(M * 3),
            "action": gen.integers(0, 3, M).astype(np.int32), "reward": f(M, 2.0),
            "done": (gen.random(M) < 0.3).astype(np.float32),
            "weight": gen.uniform(0.1, 1, M).astype(np.float32), "synthetic": flags,
            "discount": gen.uniform(0.5, 1, M).astype(np.float32) if synthetic == "mixed" else None,
            "delta": np.full(M, np.nan, np.float32), "dq": np.full(M * 3, np.nan, np.float32),
            "isv": np.array([-7.0] * 6 + [0.99, 1.0, 1.0], np.float32)}  # fmt: skip
    # gamma, cut_on_done, kappa at isv[6..8]; l_q, real, synthetic, share into isv[2..5]
    scalars = [M, 3, 6, 7, 8, 2, 3, 4, 5]
    got, want = device_and_oracle(cuda_backend, dqn.TD, ref.dqn_td, host, scalars)
    for name in ("delta", "dq", "isv"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    isv = got["isv"]
    assert isv[0] == isv[1] == -7.0  # slots not named stay as they were
    if synthetic == "none":
        assert isv[2] == isv[3] and np.isnan(isv[4]) and isv[5] == 0.0  # bit for bit
    if synthetic == "all":
        assert isv[2] == isv[4] and np.isnan(isv[3]) and isv[5] == 1.0


@pytest.mark.parametrize("P", [17, 75011])
def test_dqn_norm_adam_and_target_sync_match_reference(cuda_backend, P: int) -> None:
    gen = np.random.default_rng(P)
    grad = gen.normal(0, 0.1, P).astype(np.float32)
    host = {"grad": grad, "stats": np.zeros(1, np.float32), "counters": np.zeros(4, np.uint64),
            "isv": np.zeros(2, np.float32)}  # fmt: skip
    got, want = device_and_oracle(cuda_backend, dqn.GRAD_NORM, ref.dqn_grad_norm, host, [P, 1])
    np.testing.assert_allclose(got["stats"], want["stats"], rtol=1e-5)
    assert got["counters"].tolist() == want["counters"].tolist() == [1, 0, 0, 0]
    adam = {"grad": grad, "stats": want["stats"], "counters": np.array([3, 0, 0, 0], np.uint64),
            "param": gen.normal(size=P).astype(np.float32),
            "m": gen.normal(0, 0.01, P).astype(np.float32),
            "v": gen.uniform(0, 0.01, P).astype(np.float32)}  # fmt: skip
    for tau, step in ((0.0, 4), (0.0, 5), (0.01, 5)):  # Adam, then the target's sync from new p
        adam["counters"] = np.array([step, 0, 0, 0], np.uint64)
        adam["target"] = target = gen.normal(size=P).astype(np.float32)
        adam["isv"] = np.array([5.0, 1e-3, 0.9, 0.999, 1e-8, 1.0, tau, 2], np.float32)  # at [1]
        got, want = device_and_oracle(cuda_backend, dqn.ADAM, ref.dqn_adam, adam, [P, 1])
        for name in ("param", "m", "v", "target"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-7, err_msg=name)
        if tau == 0.0:  # a hard copy of the updated parameters, or nothing
            assert np.array_equal(got["target"], got["param"] if step % 2 == 0 else target)


@pytest.mark.parametrize("B", [1, 33, 1000, 4097])
def test_dqn_act_matches_reference(cuda_backend, B: int) -> None:
    gen = np.random.default_rng(B)
    for step in (0, 5, 50):
        host = {"q": gen.normal(size=B * 3).astype(np.float32), "h": None, "aux_w": None,
                "action": np.full(B, -1, np.int32),
                "counters": np.array([0, step, 0, 0], np.uint64),
                "isv": np.array([0.0, 0.0, 1.0, 0.1, 20.0], np.float32),
                "p_up": None,  # epsilon into isv[1], the schedule at isv[2:5]
                "run_seed": np.array([11], np.uint64)}  # fmt: skip
        got, want = device_and_oracle(cuda_backend, dqn.ACT, ref.dqn_act, host,
                                      [B, 3, 0, 2, 1])  # fmt: skip
        for name in ("action", "counters", "isv"):
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name} at step {step}")
    host["counters"] = np.array([0, 3, 0, 0], np.uint64)  # no schedule: greedy, epsilon 0
    got, want = device_and_oracle(cuda_backend, dqn.ACT, ref.dqn_act, host, [B, 3, 0, -1, 1])
    assert got["action"].tolist() == host["q"].reshape(B, 3).argmax(1).tolist()
    assert got["isv"][1] == want["isv"][1] == 0.0


@pytest.mark.parametrize("B", [1, 33, 1000, 4097])
@pytest.mark.parametrize("H", [17, 32])
def test_dqn_aux_and_gather_match_reference(cuda_backend, B: int, H: int) -> None:
    gen = np.random.default_rng(B + H)
    h = gen.normal(size=B * H).astype(np.float32)
    w = gen.normal(0, 0.3, H + 1).astype(np.float32)
    pred = {"q": gen.normal(size=B * 3).astype(np.float32), "h": h, "aux_w": w,
            "action": np.full(B, -1, np.int32), "counters": np.zeros(4, np.uint64),
            "isv": np.array([1.0, 0.1, 20.0], np.float32),
            "p_up": np.full(B, np.nan, np.float32),
            "run_seed": np.array([11], np.uint64)}  # fmt: skip
    got, want = device_and_oracle(cuda_backend, dqn.ACT, ref.dqn_act, pred, [B, 3, H, 0, -1])
    np.testing.assert_allclose(got["p_up"], want["p_up"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got["action"], want["action"])
    fill = gen.integers(0, 3, B).astype(np.float32)
    train = {
        "h": h,
        "p_up": want["p_up"],
        "fill_mid": fill,
        "post_mid": fill + gen.integers(-1, 2, B).astype(np.float32),
        "w": w,
        "partial": np.zeros(-(-B // dqn.AUX_ROWS) * (H + 3), np.float32),
        "counters": np.zeros(4, np.uint64),
        "isv": np.array([0.0, 0.0, 0.1], np.float32),
    }  # l_aux into isv[1], lr at isv[2]
    got, want = device_and_oracle(
        cuda_backend, dqn.AUX_TRAIN, ref.dqn_aux_train, train, [B, H, 2, 1]
    )
    np.testing.assert_allclose(got["w"], want["w"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["isv"], want["isv"], rtol=1e-5, atol=1e-6)
    assert got["counters"].tolist() == [0, 0, 0, 0], "the done-counter is reset for the next call"
    N = 64
    gather = {"idx": gen.integers(-1, N, size=B).astype(np.int32),
              "s_h_t": gen.normal(size=N * H).astype(np.float32),
              "s_h_tp1": gen.normal(size=N * H).astype(np.float32),
              "s_action": gen.integers(0, 3, N).astype(np.int32),
              "s_reward": gen.normal(size=N).astype(np.float32),
              "s_done": gen.integers(0, 2, N).astype(np.float32),
              "s_synthetic": gen.integers(0, 2, N).astype(np.uint8),
              "s_discount": gen.uniform(0.5, 1, N).astype(np.float32),
              "x_t": np.full(B * H, np.nan, np.float32),
              "x_tp1": np.full(B * H, np.nan, np.float32),
              "action": np.full(B, -9, np.int32), "reward": np.full(B, np.nan, np.float32),
              "done": np.full(B, np.nan, np.float32),
              "synthetic": np.full(B, 9, np.uint8),
              "discount": np.full(B, np.nan, np.float32)}  # fmt: skip
    got, want = device_and_oracle(cuda_backend, dqn.GATHER, ref.dqn_gather, gather, [B, H])
    for name in ("x_t", "x_tp1", "action", "reward", "done", "synthetic", "discount"):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_learner_learns_the_bandit_on_the_gpu(cuda_backend) -> None:
    from tests.test_agent import BANDIT, CONTEXTS, best_action, train_bandit

    _, losses, greedy = train_bandit(cuda_backend, BANDIT)
    assert greedy.tolist() == best_action(np.arange(CONTEXTS)).tolist()
    assert losses[-20:].mean() < 0.25 * losses[:20].mean()


def test_one_learner_update_agrees_across_backends(cuda_backend) -> None:
    from alpha_rl.backend.numpy import NumpyBackend
    from tests.test_agent import BANDIT, train_bandit

    params = []
    for be in (NumpyBackend(), cuda_backend):
        learner, _, _ = train_bandit(be, BANDIT, updates=1)
        params.append(be.download(learner.state.theta))
    np.testing.assert_allclose(params[1], params[0], rtol=1e-4, atol=1e-6)
