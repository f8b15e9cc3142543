"""The learner composed of pieces: the head, the exploration and α each config picks, the typed
kernels and buffers (a misspelt name is an error), and where each piece launches in an update."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from alpha_rl.agent import (
    ACTIONS,
    AlphaBias,
    AlphaConfig,
    AlphaState,
    C51Head,
    Learner,
    NoBias,
    Noiseless,
    NoisyLayers,
    QHead,
    Slots,
)
from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.errors import ConfigError
from alpha_rl.isv import ABSENT
from tests.test_agent import BANDIT, CONTEXTS, B, bandit_learner

HEADS = {
    "plain": ([], QHead, 1, ACTIONS),
    "dueling": (["agent.dueling=true"], QHead, 1, ACTIONS + 1),
    "c51": (["agent.distributional=true", "agent.atoms=5"], C51Head, 5, 5 * ACTIONS),
    "dueling-c51": (["agent.distributional=true", "agent.atoms=5", "agent.dueling=true"],
                    C51Head, 5, 5 * (ACTIONS + 1)),
}  # fmt: skip


def bound_names(learner: Learner) -> set[str]:
    return {kernel.decl.name for kernel in learner.runtime.bound}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_each_config_gets_its_head_and_the_network_its_outputs(name: str) -> None:
    overrides, kind, atoms, last = HEADS[name]
    learner, _, _ = bandit_learner(NumpyBackend(), [*BANDIT, *overrides])
    assert type(learner.head) is kind and learner.head.name == name
    assert learner.layout.atoms == atoms and learner.layout.layers[-1].n_out == last
    assert learner.layout.dueling == ("dueling" in name)
    c51 = {"c51_q", "c51_project", "c51_loss"}
    if kind is C51Head:  # the expected Q needs a buffer of its own; dqn_td is not bound
        assert learner.q_buffer(7).size == 7 * ACTIONS and c51 <= bound_names(learner)
        assert "dqn_td" not in bound_names(learner)
    else:
        assert learner.q_buffer(7) is None and not c51 & bound_names(learner)
        assert "dqn_td" in bound_names(learner)


@pytest.mark.parametrize("noisy", [False, True])
def test_noisy_layers_or_none_and_their_parameters(noisy: bool) -> None:
    learner, _, _ = bandit_learner(NumpyBackend(), [*BANDIT, f"agent.noisy={str(noisy).lower()}"])
    P = learner.layout.size
    assert type(learner.noise) is (NoisyLayers if noisy else Noiseless)
    assert learner.params == learner.state.theta.size == (2 * P if noisy else P)
    schedule = learner.backend.download(learner.isv.array)[learner.slots.epsilon_schedule :][:2]
    want = (0.0, 0.0) if noisy else (1.0, 0.05)  # acting's epsilon, first and last
    np.testing.assert_array_equal(schedule, np.float32(want))
    act, theta = learner.views["act"][0][0], learner.views["theta"][0][0]
    assert (act.base is learner.noise.act) if noisy else (act.base is learner.state.theta)
    assert theta.base is learner.state.theta
    assert ({"noisy_compose", "noisy_grad"} <= bound_names(learner)) == noisy


def test_alpha_on_and_off() -> None:
    learner, _, _ = bandit_learner(NumpyBackend(), BANDIT)
    assert type(learner.bias) is NoBias and learner.alpha is None
    assert not {"aux_alpha_bias", "aux_alpha_update"} & bound_names(learner)
    on, _, _ = bandit_learner(NumpyBackend(), BANDIT, alpha=AlphaConfig(1e-3, 2.0, 0.5))
    assert type(on.bias) is AlphaBias and isinstance(on.alpha, AlphaState)
    np.testing.assert_array_equal(on.backend.download(on.alpha.w), [0.0, 0.5, 0.5])


def test_a_misspelt_kernel_buffer_or_slot_is_an_error() -> None:
    learner, _, _ = bandit_learner(NumpyBackend(), BANDIT)
    with pytest.raises(AttributeError, match="gahter"):
        learner.kernels.gahter  # noqa: B018
    with pytest.raises(AttributeError, match="dicount"):
        learner.b.dicount  # noqa: B018
    with pytest.raises(AttributeError, match="hh"):
        learner.env_bufs.hh  # noqa: B018
    with pytest.raises(AttributeError, match="eps"):
        learner.slots.eps  # noqa: B018
    with pytest.raises(dataclasses.FrozenInstanceError):
        learner.b.dq = None  # type: ignore[misc]
    with pytest.raises(TypeError, match="gemm_65"):
        dataclasses.replace(learner.net.ops, gemm_65=None)


def test_slots_are_the_isv_s_or_absent() -> None:
    learner, _, isv = bandit_learner(NumpyBackend(), BANDIT)
    assert learner.slots.loss_q == isv.layout.index("loss_q") != ABSENT
    assert learner.slots.w_alpha_long == ABSENT  # alpha is off: no such slot
    assert set(dataclasses.asdict(Slots.of(None)).values()) == {ABSENT}


def launch_order(learner: Learner, replay) -> list[str]:
    """The kernels one learner.learn launches, by name, in order."""
    order: list[str] = []
    for kernel in learner.runtime.bound:
        launch = kernel._launch

        def recording(grid, values, stream, axis, _launch=launch, _name=kernel.decl.name):
            order.append(_name)
            _launch(grid, values, stream, axis)

        kernel._launch = recording
    learner.learn(replay)
    return order


def push_a_batch(learner: Learner, replay) -> None:
    be, gen = learner.backend, np.random.default_rng(0)
    h = np.eye(CONTEXTS, dtype=np.float32)[gen.integers(0, CONTEXTS, size=B)].ravel()
    act = gen.integers(0, ACTIONS, size=B).astype(np.int32)
    ones = np.ones(B, np.float32)
    replay.push(be.upload(h), be.upload(h), be.upload(act), be.upload(ones), be.upload(ones))
    replay.rebuild()


def pieces_of(order: list[str], names: set[str]) -> list[str]:
    return [name for name in order if name in names and not name.startswith("per_")]


def test_each_piece_launches_in_its_place_in_the_update() -> None:
    rainbow = [*BANDIT, "agent.noisy=true", "agent.distributional=true", "agent.dueling=true"]
    learner, replay, _ = bandit_learner(NumpyBackend(), rainbow)
    push_a_batch(learner, replay)
    names = {"dqn_gather", "noisy_compose", "mlp_dueling_forward", "c51_project", "c51_loss",
             "mlp_dueling_backward", "noisy_grad", "dqn_grad_norm", "dqn_adam"}  # fmt: skip
    got = pieces_of(launch_order(learner, replay), names)
    assert got == ["dqn_gather", "noisy_compose", "mlp_dueling_forward", "mlp_dueling_forward",
                   "c51_project", "c51_loss", "mlp_dueling_backward", "noisy_grad",
                   "dqn_grad_norm", "dqn_adam"]  # fmt: skip
    learner, replay, _ = bandit_learner(NumpyBackend(), BANDIT, alpha=AlphaConfig(1e-3, 2.0, 0.5))
    push_a_batch(learner, replay)
    names = {"dqn_gather", "aux_alpha_bias", "dqn_td", "dqn_adam", "aux_alpha_update"}
    got = pieces_of(launch_order(learner, replay), names)
    assert got == ["dqn_gather", "aux_alpha_bias", "aux_alpha_bias", "dqn_td", "dqn_adam",
                   "aux_alpha_update"]  # fmt: skip


def test_the_learner_refuses_alpha_with_c51_as_the_runs_config_check_does() -> None:
    alpha = AlphaConfig(lr=1e-3, bound=1.0, init=0.0)
    with pytest.raises(ConfigError, match=r"alpha='on' biases the Q-values, and agent\.distrib"):
        bandit_learner(NumpyBackend(), [*BANDIT, "agent.distributional=true"], alpha=alpha)
