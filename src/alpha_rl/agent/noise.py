"""How the learner explores: `NoisyLayers` (factorised Gaussian noisy nets, cuda/noisy.cu) or
`Noiseless` (plain weights, epsilon-greedy acting). The learner picks one of the two classes
once and calls the same methods on either: its initial parameters, the weights acting and the
update run on, the noise each act call and update draws, and the sigma half of the gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from alpha_rl.agent.config import AgentConfig
from alpha_rl.agent.layout import F32, NetLayout, init_sigma, layer_views, noise_units
from alpha_rl.agent.state import LearnerState
from alpha_rl.backend.base import DeviceArray
from alpha_rl.kernels import dqn, noisy
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.rng import seed_on_device

Views = dict[str, list[tuple[Any, Any]]]  # name -> (W, b) views per layer (layer_views)


class Noiseless:
    """Plain weights: acting and the update run on the parameters themselves; acting is
    epsilon-greedy on the schedule of agent.epsilon."""

    def __init__(self, cfg: AgentConfig, layout: NetLayout, runtime: KernelRuntime,
                 state: LearnerState, seed: int) -> None:  # fmt: skip
        """Nothing of its own."""

    @staticmethod
    def epsilon(cfg: AgentConfig) -> tuple[float, float]:
        """Acting's epsilon, first and last: the schedule's (the ISV's epsilon_schedule)."""
        return cfg.eps_start, cfg.eps_end

    @staticmethod
    def initial(theta: np.ndarray, layout: NetLayout, cfg: AgentConfig) -> np.ndarray:
        """The parameters Adam updates, from the network's initial weights: those [P]."""
        return theta

    def views(self, views: Views) -> Views:
        """The views acting and the update run on ("act", "online", "target_net"): those of
        the parameters themselves ("theta", "target")."""
        return {"act": views["theta"], "online": views["theta"], "target_net": views["target"]}

    def before_act(self, stream: Any = None) -> None:
        """Nothing to draw."""

    def before_update(self, stream: Any = None) -> None:
        """Nothing to draw."""

    def sigma_grad(self, grad: DeviceArray, stream: Any = None) -> None:
        """No sigma to train."""


class NoisyLayers:
    """Factorised Gaussian noisy layers: every weight is mu + sigma x noise, the noise drawn
    afresh (from the counters' step) for each act call and each update; Adam trains mu and sigma
    (theta is [2P]: mu, then sigma); acting is greedy on the noisy weights (epsilon 0)."""

    @staticmethod
    def epsilon(cfg: AgentConfig) -> tuple[float, float]:
        """Acting's epsilon, first and last: none, the noise explores."""
        return 0.0, 0.0

    def __init__(self, cfg: AgentConfig, layout: NetLayout, runtime: KernelRuntime,
                 state: LearnerState, seed: int) -> None:  # fmt: skip
        be, P = runtime.backend, layout.size
        self.layout, self.state, self.seed = layout, state, seed
        self.run_seed = seed_on_device(be, seed)
        unit_in, unit_out, self.units = noise_units(layout)
        self.unit_in, self.unit_out = be.upload(unit_in), be.upload(unit_out)
        self.act = be.zeros(P, F32)  # the acting net's composed weights [P]
        self.learn = be.zeros(2 * P, F32)  # the update's online, then target, weights [2P]
        self.noise = be.zeros(P, F32)  # the update's noise per parameter [P]
        self.compose = runtime.bind(noisy.COMPOSE)
        self.grad = runtime.bind(noisy.GRAD)

    @staticmethod
    def initial(theta: np.ndarray, layout: NetLayout, cfg: AgentConfig) -> np.ndarray:
        """The parameters Adam updates, from the network's initial weights: mu = those, then
        sigma = agent.sigma0 / sqrt(n_in) [2P]."""
        return np.concatenate([theta, init_sigma(layout, cfg.sigma0)])

    def views(self, views: Views) -> Views:
        """The views acting and the update run on ("act", "online", "target_net"): this act
        call's and this update's composed weights."""
        P = self.layout.size
        return {"act": layer_views(self.act, self.layout),
                "online": layer_views(self.learn, self.layout),
                "target_net": layer_views(self.learn[P:], self.layout)}  # fmt: skip

    def before_act(self, stream: Any = None) -> None:
        """The acting net's noisy weights for this act call."""
        self._compose(1, dqn.ACT_STEP, noisy.ROLE_ACT, stream)

    def before_update(self, stream: Any = None) -> None:
        """The update's own noise for both nets, before Adam's step advances."""
        self._compose(2, dqn.ADAM_STEP, noisy.ROLE_ONLINE, stream)

    def sigma_grad(self, grad: DeviceArray, stream: Any = None) -> None:
        """The sigma half of the gradient [2P] from its mu half."""
        self.grad(noise=self.noise, grad=grad, P=self.layout.size, stream=stream)

    def _compose(self, nets: int, word: int, role: int, stream: Any) -> None:
        """The noisy weights of the online net (and with nets = 2 the target net) of this act
        call or update (cuda/noisy.cu)."""
        st = self.state
        self.compose(
            theta=st.theta, target=st.target if nets == 2 else None, unit_in=self.unit_in,
            unit_out=self.unit_out, counters=st.counters,
            weights=self.learn if nets == 2 else self.act,
            noise=self.noise if nets == 2 else None, P=self.layout.size, N=self.units,
            nets=nets, run_seed=self.run_seed, word=word, role=role, stream=stream,
        )  # fmt: skip


Noise = Noiseless | NoisyLayers


def exploration_of(cfg: AgentConfig) -> type[Noiseless] | type[NoisyLayers]:
    """The exploration piece agent.noisy picks: the class, chosen once."""
    return NoisyLayers if cfg.noisy else Noiseless
