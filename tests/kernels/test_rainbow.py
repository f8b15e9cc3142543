"""noisy_* and c51_* kernels on the GPU against their oracles (the exp, log and cos of the device
and of NumPy round apart, so to a few parts in 10^6), the projection's hand cases on the device,
and the Rainbow learner's update on both backends."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.agent import NetLayout, init_params, init_sigma, noise_units
from alpha_rl.kernels import c51, noisy
from alpha_rl.reference import c51 as c51_ref
from alpha_rl.reference import noisy as noisy_ref
from tests.helpers import device_and_oracle
from tests.reference.test_rainbow import HAND_CASES, V_MAX, V_MIN, Z

pytestmark = pytest.mark.gpu
F32 = np.float32
TOL = dict(rtol=2e-5, atol=2e-6)


CASES = [((5,), 1, 0), ((256, 256), 2, 7), ((256, 256), 1, 123456)]  # hidden, nets, step


@pytest.mark.parametrize(("hidden", "nets", "step"), CASES)
def test_noisy_compose_and_grad_match_reference(cuda_backend, hidden, nets, step) -> None:
    layout = NetLayout.build(32, hidden, 3, True)
    P, gen = layout.size, np.random.default_rng(step)
    theta = np.concatenate([init_params(layout, nets), init_sigma(layout, 0.5)])
    target = theta + gen.normal(0, 0.01, 2 * P).astype(F32)
    unit_in, unit_out, N = noise_units(layout)
    host = {"theta": theta, "target": target if nets == 2 else None, "unit_in": unit_in,
            "unit_out": unit_out, "counters": np.array([step, step + 1, 0, 0], np.uint64),
            "weights": np.full(nets * P, np.nan, F32),
            "noise": np.full(P, np.nan, F32), "run_seed": np.array([99], np.uint64)}  # fmt: skip
    got, want = device_and_oracle(cuda_backend, noisy.COMPOSE, noisy_ref.noisy_compose, host,
                                  [P, N, nets, 0, noisy.ROLE_ONLINE])  # fmt: skip
    np.testing.assert_allclose(got["noise"], want["noise"], **TOL)
    np.testing.assert_allclose(got["weights"], want["weights"], **TOL)
    grad = {"noise": got["noise"], "grad": np.concatenate([gen.normal(size=P).astype(F32),
                                                           np.full(P, np.nan, F32)])}  # fmt: skip
    got, want = device_and_oracle(cuda_backend, noisy.GRAD, noisy_ref.noisy_grad, grad, [P])
    np.testing.assert_array_equal(got["grad"], want["grad"])  # one rounded product


@pytest.mark.parametrize(("M", "Z"), [(1, 2), (33, 21), (512, 51), (4097, 128)])
def test_c51_kernels_match_reference(cuda_backend, M: int, Z: int) -> None:
    gen = np.random.default_rng(M + Z)
    A = 3
    f = lambda n, s=1.0: (gen.normal(size=n) * s).astype(F32)  # noqa: E731
    numbers = np.array([7.0, 0.99, 1.0, -10.0, 10.0], F32)  # gamma, cut_on_done, the support
    q = {"logits": f(M * Z * A, 2.0), "isv": numbers, "q": np.full(M * A, np.nan, F32)}
    got, want = device_and_oracle(cuda_backend, c51.Q, c51_ref.c51_q, q, [M, A, Z, 3])
    np.testing.assert_allclose(got["q"], want["q"], **TOL)
    project = {"logits_tp1": f(M * Z * A, 2.0), "logits_target": f(M * Z * A, 2.0),
               "reward": f(M, 3.0), "done": (gen.random(M) < 0.3).astype(F32),
               "discount": gen.uniform(0.5, 1, M).astype(F32) if M > 1 else None,
               "isv": numbers, "m": np.full(M * Z, np.nan, F32)}  # fmt: skip
    got, want = device_and_oracle(cuda_backend, c51.PROJECT, c51_ref.c51_project, project,
                                  [M, A, Z, 1, 2, 3])  # fmt: skip
    np.testing.assert_allclose(got["m"], want["m"], **TOL)
    np.testing.assert_allclose(got["m"].reshape(M, Z).sum(axis=1), 1.0, rtol=1e-5)
    for synthetic in (None, (gen.random(M) < 0.4).astype(np.uint8)):
        loss = {"logits_t": f(M * Z * A, 2.0), "action": gen.integers(0, A, M).astype(np.int32),
                "m": want["m"], "weight": gen.uniform(0.1, 1, M).astype(F32),
                "synthetic": synthetic, "delta": np.full(M, np.nan, F32),
                "dlogits": np.full(M * Z * A, np.nan, F32),
                "isv": np.full(6, -7.0, F32), "done": np.zeros(1, np.uint64)}  # fmt: skip
        got_l, want_l = device_and_oracle(cuda_backend, c51.LOSS, c51_ref.c51_loss, loss,
                                          [M, A, Z, 2, 3, 4, 5])  # fmt: skip
        for name in ("delta", "dlogits", "isv"):
            np.testing.assert_allclose(got_l[name], want_l[name], err_msg=name, **TOL)
        assert got_l["isv"][0] == got_l["isv"][1] == -7.0  # slots not named stay as they were
        assert got_l["done"][0] == 0, "the blocks' counter is reset for the next launch"


@pytest.mark.parametrize(("reward", "scale", "p", "want"), HAND_CASES)
def test_c51_project_on_hand_cases_on_the_gpu(cuda_backend, reward, scale, p, want) -> None:
    # one action (a* = 0), the target's logits log p; scale as the row's discount, done = 0
    host = {"logits_tp1": np.zeros(Z, F32), "logits_target": np.log(np.array(p, F32)),
            "reward": np.array([reward], F32), "done": np.zeros(1, F32),
            "discount": np.array([scale], F32), "isv": np.array([0.9, 1.0, V_MIN, V_MAX], F32),
            "m": np.full(Z, np.nan, F32)}  # fmt: skip
    got, _ = device_and_oracle(cuda_backend, c51.PROJECT, c51_ref.c51_project, host,
                               [1, 1, Z, 0, 1, 2])  # fmt: skip
    np.testing.assert_allclose(got["m"], want, atol=2e-6)


@pytest.mark.parametrize("variant", ["noisy", "c51", "rainbow"])
def test_one_rainbow_update_agrees_across_backends(cuda_backend, variant: str) -> None:
    from alpha_rl.backend.numpy import NumpyBackend
    from tests.test_agent import C51, NOISY, RAINBOW, train_bandit

    overrides = {"noisy": NOISY, "c51": C51, "rainbow": RAINBOW}[variant]
    params = []
    for be in (NumpyBackend(), cuda_backend):
        learner, _, _ = train_bandit(be, overrides, updates=1)
        params.append(be.download(learner.state.theta))
    np.testing.assert_allclose(params[1], params[0], rtol=1e-4, atol=1e-6)


def test_rainbow_learns_the_bandit_on_the_gpu(cuda_backend) -> None:
    from tests.test_agent import CONTEXTS, RAINBOW, best_action, train_bandit

    _, losses, greedy = train_bandit(cuda_backend, RAINBOW)
    assert greedy.tolist() == best_action(np.arange(CONTEXTS)).tolist()
    assert losses[-20:].mean() < 0.25 * losses[:20].mean()
