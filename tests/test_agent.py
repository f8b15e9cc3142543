"""The learner on the numpy backend: it learns a contextual bandit's optimal policy and l_q
falls; the aux head learns a direction signal; config checks."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.agent import ACTIONS, AgentConfig, AlphaConfig, Learner
from alpha_rl.backend.base import Backend
from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.errors import ConfigError
from alpha_rl.isv import DeviceIsv
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.pipeline.configure.config import layout_from_config
from alpha_rl.replay import Replay, ReplayConfig
from tests.helpers import compose_fixed

CONTEXTS, B, M = 4, 64, 64
BANDIT = ["agent.hidden=[16,16]", "agent.lr=0.01", "agent.gamma=0.9", "agent.target_period=10"]


def bandit_learner(backend: Backend, overrides: list[str], seed: int = 0,
                   alpha: AlphaConfig | None = None):  # fmt: skip
    numbers = ["replay.beta_anneal_updates=1000"]  # the ISV's numbers as the parts below
    if alpha is not None:
        numbers += ["alpha='on'", f"alpha.lr={alpha.lr}", f"alpha.bound={alpha.bound}",
                    f"alpha.init={alpha.init}"]  # fmt: skip
    cfg, choices = compose_fixed([*overrides, *numbers])
    isv = DeviceIsv(layout_from_config(cfg, choices), backend)
    runtime = KernelRuntime(backend, {"RC_STRIDE": 7})
    learner = Learner(AgentConfig.from_cfg(cfg.agent), CONTEXTS, B, M, runtime, isv, seed, alpha)
    replay = Replay(ReplayConfig(10, 0.6, 0.4, 1000, 1e-6, M), CONTEXTS, runtime, seed, B, isv)
    return learner, replay, isv


def best_action(context: np.ndarray) -> np.ndarray:
    return context % ACTIONS  # context 3 -> action 0


def train_bandit(backend: Backend, overrides: list[str], updates: int = 300):
    """Random exploration data, reward 1 for the best action, done = 1 (targets are rewards)."""
    learner, replay, isv = bandit_learner(backend, overrides)
    gen = np.random.default_rng(1)
    up = backend.upload
    losses = []
    for _ in range(updates):
        ctx = gen.integers(0, CONTEXTS, size=B)
        h = np.eye(CONTEXTS, dtype=np.float32)[ctx].ravel()
        act = gen.integers(0, ACTIONS, size=B).astype(np.int32)
        reward = (act == best_action(ctx)).astype(np.float32)
        replay.push(up(h), up(h), up(act), up(reward), up(np.ones(B, np.float32)))
        replay.rebuild()
        learner.learn(replay)
        losses.append(float(isv.values("loss_q")[0]))
    probe = np.eye(CONTEXTS, dtype=np.float32)[np.arange(B) % CONTEXTS].ravel()
    greedy = learner.q_values(up(probe))[:CONTEXTS].argmax(axis=1)
    return learner, np.array(losses), greedy


def test_learner_finds_the_bandits_optimal_policy_and_l_q_falls() -> None:
    _, losses, greedy = train_bandit(NumpyBackend(), BANDIT)
    assert greedy.tolist() == best_action(np.arange(CONTEXTS)).tolist()
    assert losses[-20:].mean() < 0.25 * losses[:20].mean(), (
        losses[:20].mean(),
        losses[-20:].mean(),
    )
    assert np.isfinite(losses).all()


def test_a_learner_that_cannot_learn_fails_the_same_check() -> None:
    # lr ~ 0: the untrained network's greedy policy is not the optimal one, and l_q stays put
    _, losses, greedy = train_bandit(NumpyBackend(), [*BANDIT, "agent.lr=1e-12"], updates=60)
    assert greedy.tolist() != best_action(np.arange(CONTEXTS)).tolist()
    assert losses[-20:].mean() > 0.5 * losses[:20].mean()


def test_dueling_learner_also_learns() -> None:
    _, losses, greedy = train_bandit(NumpyBackend(), [*BANDIT, "agent.dueling=true"])
    assert greedy.tolist() == best_action(np.arange(CONTEXTS)).tolist()
    assert losses[-20:].mean() < 0.25 * losses[:20].mean()


def test_aux_head_learns_the_sign_of_the_next_move() -> None:
    be = NumpyBackend()
    learner, _, isv = bandit_learner(be, [*BANDIT, "agent.aux_lr=1.0"])
    gen = np.random.default_rng(2)
    losses = []
    for _ in range(200):
        h = gen.normal(size=(B, CONTEXTS)).astype(np.float32)
        move = np.sign(h[:, 0] - 0.5 * h[:, 1]).astype(np.float32)
        learner.act(be.upload(h.ravel()))  # p_up from the current head
        learner.train_aux(be.upload(h.ravel()), be.upload(np.zeros(B, np.float32)), be.upload(move))
        losses.append(float(isv.values("loss_aux")[0]))
    assert losses[0] > 0.6 and np.mean(losses[-20:]) < 0.35, (losses[0], np.mean(losses[-20:]))


def test_act_explores_then_exploits() -> None:
    be = NumpyBackend()
    learner, _, isv = bandit_learner(be, [*BANDIT, "agent.epsilon.decay_steps=10"])
    h = be.upload(np.eye(CONTEXTS, dtype=np.float32)[np.arange(B) % CONTEXTS].ravel())
    first = be.download(learner.act(h)).copy()
    assert float(isv.values("epsilon")[0]) == 1.0
    for _ in range(11):
        last = be.download(learner.act(h))
    assert float(isv.values("epsilon")[0]) == pytest.approx(0.05)
    greedy = learner.q_values(h).argmax(axis=1)
    assert (last == greedy).mean() > 0.85 and (first == greedy).mean() < 0.6


def test_agent_config_is_checked() -> None:
    cfg, _ = compose_fixed(["agent.gamma=1.5"])
    with pytest.raises(ConfigError, match=r"agent\.gamma=1\.5 must be a number in \[0, 1\]"):
        AgentConfig.from_cfg(cfg.agent)


# --- Rainbow's pieces (agent.noisy, agent.distributional; kernels in tests/reference) ---

NOISY = [*BANDIT, "agent.noisy=true"]
# atoms on -1, -0.9, ..., 1: the bandit's rewards 0 and 1 land on atoms, so the CE can reach ~0
C51 = [*BANDIT, "agent.distributional=true", "agent.atoms=21", "agent.v_min=-1", "agent.v_max=1"]
RAINBOW = [*C51, "agent.noisy=true", "agent.dueling=true"]


@pytest.mark.parametrize("overrides", [NOISY, C51, RAINBOW], ids=["noisy", "c51", "rainbow"])
def test_rainbow_pieces_learn_the_bandit_and_l_q_falls(overrides: list[str]) -> None:
    learner, losses, greedy = train_bandit(NumpyBackend(), overrides)
    assert greedy.tolist() == best_action(np.arange(CONTEXTS)).tolist()
    assert losses[-20:].mean() < 0.25 * losses[:20].mean(), (
        losses[:20].mean(),
        losses[-20:].mean(),
    )
    P = learner.layout.size
    theta = learner.backend.download(learner.state.theta)
    assert theta.size == (2 * P if learner.cfg.noisy else P)
    if learner.cfg.noisy:  # Adam moved the scales too
        from alpha_rl.agent import init_sigma

        assert not np.array_equal(theta[P:], init_sigma(learner.layout, 0.5))


def test_c51_l_q_starts_at_the_uniform_cross_entropy() -> None:
    _, losses, _ = train_bandit(NumpyBackend(), C51, updates=1)
    assert losses[0] == pytest.approx(np.log(21), rel=0.05)  # near-uniform logits at init


def test_noisy_acting_is_greedy_on_fresh_noise_each_call() -> None:
    be = NumpyBackend()
    learner, _, isv = bandit_learner(be, NOISY)
    h = be.upload(np.eye(CONTEXTS, dtype=np.float32)[np.arange(B) % CONTEXTS].ravel())
    learner.act(h)
    first = be.download(learner.noise.act).copy()
    assert float(isv.values("epsilon")[0]) == 0.0  # no epsilon-greedy with noisy nets
    learner.act(h)
    second = be.download(learner.noise.act)
    P = learner.layout.size
    mu = be.download(learner.state.theta)[:P]
    assert not np.array_equal(first, second) and not np.array_equal(first, mu)
    # evaluation reads the means: q_values does not depend on the acting noise
    np.testing.assert_array_equal(learner.q_values(h), learner.q_values(h))


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("agent.atoms=1", r"agent\.atoms=1 must be a whole number in \[2, 128\]"),
        ("agent.v_max=-20", r"agent\.v_max=-20 must be a number > agent\.v_min=-10"),
        ("agent.sigma0=-0.1", r"agent\.sigma0=-0\.1 must be a number >= 0"),
        ("agent.noisy=1", r"agent\.noisy=1 must be true or false"),
    ],
)
def test_rainbow_settings_are_checked(override: str, match: str) -> None:
    cfg, _ = compose_fixed([override])
    with pytest.raises(ConfigError, match=match):
        AgentConfig.from_cfg(cfg.agent)


# --- agent.precision (the TF32 kernels and their bound: tests/kernels/test_mlp.py on the GPU) ---


def test_tf32_learner_runs_the_tf32_products_and_learns_the_bandit() -> None:
    """agent.precision=tf32 binds the tensor-core tiles for the dense products (their oracles
    round the operands to TF32 on the numpy backend), the head and weight gradients stay
    float32; the learner still finds the bandit's policy, and its Q differ from fp32's."""
    learner, losses, greedy = train_bandit(NumpyBackend(), [*BANDIT, "agent.precision=tf32"])
    ops = learner.net.ops
    assert (ops.gemm.decl.name, ops.gemm_64.decl.name, ops.gemm_128.decl.name,
            ops.gemm_pair.decl.name) == ("mlp_gemm_tf32_32", "mlp_gemm_tf32_64", "mlp_gemm_tf32",
                                         "mlp_gemm_tf32_pair")  # fmt: skip
    assert (ops.gemm_rows.decl.name, ops.gemm_partial.decl.name) == (
        "mlp_gemm_rows",
        "mlp_gemm_partial",
    )
    # a batch of 64 rows: no split-K; the weight gradients on the float32 tile all the same
    assert ops.grad_gemm.decl.name == "mlp_gemm" and ops.grad_gemm.launches > 0
    assert greedy.tolist() == best_action(np.arange(CONTEXTS)).tolist()
    assert losses[-20:].mean() < 0.25 * losses[:20].mean()
    fp32, fp32_losses, _ = train_bandit(NumpyBackend(), BANDIT)
    assert fp32.net.ops.gemm.decl.name == "mlp_gemm"
    assert not np.array_equal(losses, fp32_losses)
    np.testing.assert_allclose(losses[:5], fp32_losses[:5], rtol=1e-2)


def test_precision_is_checked() -> None:
    cfg, _ = compose_fixed(["agent.precision=bf16"])
    with pytest.raises(ConfigError, match=r"agent\.precision='bf16' must be one of fp32, tf32"):
        AgentConfig.from_cfg(cfg.agent)
