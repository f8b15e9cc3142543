"""The DQN learner (DESIGN §7): double-DQN updates, acting and the aux head of one run.

`Learner` owns the online and target parameters, Adam's moments and counters (`LearnerState`),
the aux head and every buffer, and composes the pieces its config picks once: the head
(`QHead` or `C51Head`: Q from the network's outputs, and the loss), the exploration
(`Noiseless` or `NoisyLayers`) and α (`NoBias` or `AlphaBias`). It runs `act`, `learn` and
`train_aux` on either backend with no host sync (l_q, l_aux, epsilon and the gradient norm
land in ISV slots).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from alpha_rl.agent.alpha import AlphaState, Bias, make_bias
from alpha_rl.agent.batch import Batch, Slots
from alpha_rl.agent.config import AgentConfig, AlphaConfig, check_alpha
from alpha_rl.agent.head import Head, make_head
from alpha_rl.agent.layout import ACTIONS, F32, I32, init_params, layer_views
from alpha_rl.agent.network import Kernel, MlpOps, QNetwork
from alpha_rl.agent.noise import Noise, exploration_of
from alpha_rl.agent.state import LearnerState
from alpha_rl.backend.base import Backend, DeviceArray
from alpha_rl.errors import ConfigError
from alpha_rl.isv import DeviceIsv
from alpha_rl.kernels import dqn
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.rng import seed_on_device

REPLAY_COLUMNS = ("s_h_t", "s_h_tp1", "s_action", "s_reward", "s_done", "s_synthetic")


@dataclass(frozen=True)
class LearnerKernels:
    """The dqn_* kernels the learner launches itself (the head, the noise and α bind theirs)."""

    gather: Kernel
    grad_norm: Kernel
    adam: Kernel
    act: Kernel
    aux_train: Kernel

    @classmethod
    def bind(cls, runtime: KernelRuntime) -> LearnerKernels:
        return cls(gather=runtime.bind(dqn.GATHER), grad_norm=runtime.bind(dqn.GRAD_NORM),
                   adam=runtime.bind(dqn.ADAM), act=runtime.bind(dqn.ACT),
                   aux_train=runtime.bind(dqn.AUX_TRAIN))  # fmt: skip


def check_sizes(obs_dim: int, batch: int) -> None:
    """ConfigError unless the kernels take a batch of `batch` rows and `obs_dim` features."""
    if batch > dqn.MAX_BATCH:
        raise ConfigError(f"replay.batch_size={batch} exceeds the learner's {dqn.MAX_BATCH}")
    if obs_dim + 3 > dqn.BLOCK:  # dqn_aux_train: a thread per weight, bias, loss and count
        raise ConfigError(
            f"the observation has {obs_dim} features (env.perception.hidden_dim); "
            f"the aux head takes at most {dqn.BLOCK - 3}"
        )


class Learner:
    """Online/target Q-networks, Adam, epsilon-greedy acting and the aux head of one run."""

    def __init__(
        self,
        cfg: AgentConfig,
        obs_dim: int,
        num_envs: int,
        batch: int,
        runtime: KernelRuntime,
        isv: DeviceIsv,
        seed: int,
        alpha: AlphaConfig | None = None,
    ) -> None:
        check_sizes(obs_dim, batch)
        check_alpha(cfg, alpha)
        self.cfg, self.obs_dim, self.num_envs, self.batch = cfg, obs_dim, num_envs, batch
        self.runtime, self.isv, self.seed, self.alpha_cfg = runtime, isv, seed, alpha
        be = runtime.backend
        self.run_seed = seed_on_device(be, seed)
        self.slots = Slots.of(isv)  # where its numbers are, and where it writes
        self.head: Head = make_head(cfg, runtime, batch, isv.array, self.slots)
        self.layout = self.head.layout(obs_dim, cfg.hidden)
        exploration = exploration_of(cfg)
        theta = exploration.initial(init_params(self.layout, seed), self.layout, cfg)
        self.params = n = theta.size  # what Adam updates: P, or mu and sigma (2P)
        self.state = st = LearnerState.initial(be, theta, obs_dim)
        self.grad = be.zeros(n, F32)
        self.noise: Noise = exploration(cfg, self.layout, runtime, st, seed)
        # "theta" and "target": the nets' parameters (noisy: their means, which evaluation and
        # the probe use); "act", "online" and "target_net": the weights acting and the update
        # run on (noisy: composed afresh each call)
        self.views = {name: layer_views(array, self.layout)
                      for name, array in (("theta", st.theta), ("target", st.target),
                                          ("grad", self.grad))}  # fmt: skip
        self.views |= self.noise.views(self.views)
        ops = MlpOps.bind(runtime, cfg.precision)
        self.net = QNetwork(self.layout, ops, lambda n: be.zeros(n, F32),
                            lambda n: be.zeros(n, np.uint32))  # fmt: skip
        self.kernels = LearnerKernels.bind(runtime)
        self.bias: Bias = make_bias(alpha, cfg, runtime, st.aux_w, obs_dim, batch)
        self._allocate(be, num_envs, batch)

    def _allocate(self, be: Backend, num_envs: int, batch: int) -> None:
        """The acting buffers over `num_envs` rows and the update's over `batch` rows."""
        H = self.obs_dim
        self.env_bufs = self.net.buffers(num_envs)
        self.q_env = self.q_buffer(num_envs)
        # the online net runs h_t and h_tp1 as one forward of 2 x batch rows (x_t then x_tp1);
        # the backward pass goes through the first `batch` rows of it
        self.online_bufs = self.net.buffers(2 * batch)
        self.t_bufs = self.net.first_rows(self.online_bufs, batch)
        self.target_bufs = self.net.buffers(batch)
        self.b = Batch.allocate(be, batch, H, self.layout.outputs, self.cfg.n_step)
        self.actions, self.p_up = be.zeros(num_envs, I32), be.zeros(num_envs, F32)
        self.aux_partial = be.zeros(-(-num_envs // dqn.AUX_ROWS) * (H + 3), F32)

    @property
    def backend(self) -> Backend:
        return self.runtime.backend

    @property
    def alpha(self) -> AlphaState | None:
        """w_α's state with α on (checkpoint part `alpha`); None with α off."""
        return self.bias.state

    def _isv(self) -> DeviceArray:
        return self.isv.array

    def expected_q(self, out: DeviceArray, q: DeviceArray | None, rows: int,
                   stream: Any = None) -> DeviceArray:  # fmt: skip
        """Q [rows, A] of a forward's output `out`: itself, or with C51 the expected value of
        each action's distribution, written into `q` [rows * A]."""
        return self.head.expected_q(out, q, rows, stream)

    def alpha_bias(self, h: DeviceArray, q: DeviceArray, rows: int, target: bool = False,
                   aux_out: DeviceArray | None = None, stream: Any = None) -> None:  # fmt: skip
        """With α on, Q' = Q + w_α aux(h) in place over `rows` rows (the target net's w_α copy
        when `target`); nothing when α is off."""
        self.bias.apply(h, q, rows, target, aux_out, stream)

    def q_buffer(self, rows: int) -> DeviceArray | None:
        """A buffer for `expected_q` over `rows` rows (None: not needed)."""
        return self.head.q_buffer(rows)

    # --- act ---

    def act(self, h: DeviceArray, stream: Any = None) -> DeviceArray:
        """Actions [B] int32 for h [B * H], epsilon-greedy (noisy: greedy on this call's noisy
        weights); also the aux head's p_up [B]."""
        B, st = self.num_envs, self.state
        self.noise.before_act(stream)
        out = self.net.forward(self.views["act"], h, self.env_bufs, stream)
        q = self.head.expected_q(out, self.q_env, B, stream)
        self.bias.apply(h, q, B, stream=stream)
        self.kernels.act(
            q=q, h=h, aux_w=st.aux_w, action=self.actions, counters=st.counters, isv=self._isv(),
            p_up=self.p_up, B=B, A=ACTIONS, H=self.obs_dim, run_seed=self.run_seed,
            schedule_idx=self.slots.epsilon_schedule, eps_idx=self.slots.epsilon, stream=stream,
        )  # fmt: skip
        return self.actions

    # --- learn ---

    def learn(self, replay: Any, stream: Any = None) -> None:
        """One double-DQN update on a prioritized batch; the replay's priorities follow."""
        idx, weights = replay.sample(stream=stream)
        self.update(replay, idx, weights, stream)

    def update(self, replay: Any, idx: DeviceArray, weights: DeviceArray, stream: Any = None):
        """The update on a given batch (slot indices and IS weights) of `replay`."""
        M, H, b, out = self.batch, self.obs_dim, self.b, self.layout.outputs
        x_t, x_tp1 = b.x[: M * H], b.x[M * H :]
        self._gather(replay, idx, x_t, x_tp1, stream)
        self.noise.before_update(stream)
        q, q_tgt = self.net.forward_pair(
            self.views["online"], b.x, self.online_bufs, self.views["target_net"], x_tp1,
            self.target_bufs, stream,
        )  # fmt: skip
        self.bias.apply_batch(b.x, q, x_tp1, q_tgt, M, stream)
        self.head.loss(q[: M * out], q[M * out :], q_tgt, b, weights, self._isv(), self.slots,
                       stream)  # fmt: skip
        self.net.backward(self.views["online"], x_t, self.t_bufs, b.dq, self.views["grad"],
                          stream)  # fmt: skip
        self.noise.sigma_grad(self.grad, stream)
        self._adam(stream)
        self.bias.step(b.dq, self.state.counters, self._isv(), self.slots, stream)
        replay.update(idx, b.delta, stream=stream)

    def _gather(self, replay: Any, idx: DeviceArray, x_t: DeviceArray, x_tp1: DeviceArray,
                stream: Any) -> None:  # fmt: skip
        """The batch's rows `idx` of the replay's columns into `self.b` (x_t, x_tp1 its
        halves)."""
        r, b = replay.arrays, self.b
        self.kernels.gather(
            idx=idx, **{k: r[k] for k in REPLAY_COLUMNS}, x_t=x_t, x_tp1=x_tp1, action=b.action,
            reward=b.reward, done=b.done, s_discount=r.get("s_discount"),
            synthetic=b.synthetic, discount=b.discount, M=self.batch, H=self.obs_dim,
            stream=stream,
        )  # fmt: skip

    def _adam(self, stream: Any) -> None:
        """The gradient's norm (into the ISV and Adam's clipping), then Adam's step on theta and
        the target's update (Polyak, or a copy every target_period steps)."""
        st = self.state
        self.kernels.grad_norm(grad=self.grad, stats=st.stats, counters=st.counters,
                               isv=self._isv(), P=self.params, norm_idx=self.slots.grad_norm,
                               stream=stream)  # fmt: skip
        self.kernels.adam(
            grad=self.grad, stats=st.stats, counters=st.counters, isv=self._isv(),
            param=st.theta, m=st.adam_m, v=st.adam_v, target=st.target, P=self.params,
            adam_idx=self.slots.adam, stream=stream,
        )  # fmt: skip

    # --- the aux head ---

    def train_aux(
        self, h: DeviceArray, fill_mid: DeviceArray, post_mid: DeviceArray, stream: Any = None
    ) -> None:
        """One SGD step of the aux head on this step's rows (label: sign of the mid move)."""
        self.kernels.aux_train(
            h=h, p_up=self.p_up, fill_mid=fill_mid, post_mid=post_mid, w=self.state.aux_w,
            partial=self.aux_partial, counters=self.state.counters, isv=self._isv(),
            B=self.num_envs, H=self.obs_dim, lr_idx=self.slots.aux_lr,
            loss_idx=self.slots.loss_aux,
            stream=stream,
        )  # fmt: skip

    def q_values(self, h: DeviceArray) -> np.ndarray:
        """Online Q [B, A] of h [B * H] read to the host (evaluation and tests; noisy: the
        means' Q)."""
        out = self.net.forward(self.views["theta"], h, self.env_bufs)
        q = self.head.expected_q(out, self.q_env, self.num_envs)
        self.bias.apply(h, q, self.num_envs)
        return self.backend.download(q).reshape(-1, ACTIONS)[: self.num_envs]
