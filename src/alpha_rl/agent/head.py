"""The Q-network's head: how its outputs become Q-values and which loss trains them.

`QHead` (plain or dueling): the outputs are Q [rows, A] themselves and the loss is dqn_td's
double-DQN Huber TD error. `C51Head` (plain or dueling): the outputs are logits
[rows, atoms, A] of a categorical return distribution on [v_min, v_max]; Q is each action's
expected value (c51_q) and the loss is the cross-entropy to the projected target distribution
(c51_project, c51_loss). The dueling combination itself runs inside the network
(QNetwork, mlp_dueling_*); the head says whether there is one. `make_head` picks the head once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from alpha_rl.agent.batch import Batch, Slots
from alpha_rl.agent.config import AgentConfig
from alpha_rl.agent.layout import ACTIONS, F32, NetLayout
from alpha_rl.backend.base import DeviceArray
from alpha_rl.kernels import c51, dqn
from alpha_rl.kernels.runtime import KernelRuntime


class QHead:
    """Q [rows, A] straight from the network (plain, or dueling: V + A - mean A); the loss is
    dqn_td's Huber TD error of double DQN."""

    atoms = 1

    def __init__(self, cfg: AgentConfig, runtime: KernelRuntime, batch: int) -> None:
        self.cfg, self.dueling, self.batch = cfg, cfg.dueling, batch
        self.td = runtime.bind(dqn.TD)

    @property
    def name(self) -> str:
        return "dueling" if self.dueling else "plain"

    def layout(self, obs_dim: int, hidden: tuple[int, ...]) -> NetLayout:
        """The network this head sits on: obs_dim -> hidden... -> its outputs."""
        return NetLayout.build(obs_dim, hidden, ACTIONS, self.dueling, self.atoms)

    def q_buffer(self, rows: int) -> DeviceArray | None:
        """A buffer for `expected_q` over `rows` rows: none, Q is the output itself."""
        return None

    def expected_q(self, out: DeviceArray, q: DeviceArray | None, rows: int,
                   stream: Any = None) -> DeviceArray:  # fmt: skip
        """Q [rows, A] of a forward's output: the output itself."""
        return out

    def loss(self, q_t: DeviceArray, q_tp1: DeviceArray, q_tgt: DeviceArray, b: Batch,
             weights: DeviceArray, isv: DeviceArray | None, slots: Slots,
             stream: Any = None) -> None:  # fmt: skip
        """The batch's l_q (and its real and synthetic parts) into `isv`, the TD errors into
        b.delta and dl/dQ into b.dq, from the online Q of x_t and x_tp1 and the target's of
        x_tp1 ([M * A] each)."""
        c = self.cfg
        self.td(
            q_t=q_t, q_tp1=q_tp1, q_tp1_target=q_tgt, action=b.action, reward=b.reward,
            done=b.done, weight=weights, synthetic=b.synthetic, discount=b.discount,
            delta=b.delta, dq=b.dq, isv=isv, M=self.batch, A=ACTIONS, gamma=c.gamma,
            cut_on_done=int(c.cut_on_done), kappa=c.huber_kappa, **slots.loss(), stream=stream,
        )  # fmt: skip


class C51Head:
    """Logits [rows, atoms, A] of each action's return distribution on `atoms` atoms over
    [v_min, v_max]; Q is its expected value, the loss the cross-entropy to the projected
    double-DQN target distribution."""

    def __init__(self, cfg: AgentConfig, runtime: KernelRuntime, batch: int) -> None:
        be = runtime.backend
        self.cfg, self.dueling, self.atoms, self.batch = cfg, cfg.dueling, cfg.atoms, batch
        self.backend = be
        self.c51_q = runtime.bind(c51.Q)
        self.project = runtime.bind(c51.PROJECT)
        self.cross_entropy = runtime.bind(c51.LOSS)
        self.m = be.zeros(batch * cfg.atoms, F32)  # the projected targets [M, atoms]
        self.done = be.zeros(1, np.uint64)  # c51_loss's scratch

    @property
    def name(self) -> str:
        return "dueling-c51" if self.dueling else "c51"

    def layout(self, obs_dim: int, hidden: tuple[int, ...]) -> NetLayout:
        """The network this head sits on: obs_dim -> hidden... -> atoms x its outputs."""
        return NetLayout.build(obs_dim, hidden, ACTIONS, self.dueling, self.atoms)

    def q_buffer(self, rows: int) -> DeviceArray:
        """A buffer for `expected_q` over `rows` rows: float32 [rows * A]."""
        return self.backend.zeros(rows * ACTIONS, F32)

    def expected_q(self, out: DeviceArray, q: DeviceArray | None, rows: int,
                   stream: Any = None) -> DeviceArray:  # fmt: skip
        """Q [rows, A] of a forward's logits `out`: each action's expected return, written
        into `q` [rows * A]."""
        c = self.cfg
        self.c51_q(logits=out, q=q, M=rows, A=ACTIONS, Z=c.atoms, v_min=c.v_min,
                   v_max=c.v_max, stream=stream)  # fmt: skip
        return q

    def loss(self, q_t: DeviceArray, q_tp1: DeviceArray, q_tgt: DeviceArray, b: Batch,
             weights: DeviceArray, isv: DeviceArray | None, slots: Slots,
             stream: Any = None) -> None:  # fmt: skip
        """The batch's l_q (cross-entropy; its real and synthetic parts) into `isv`, each
        row's cross-entropy into b.delta and dl/dlogits into b.dq, from the online logits of
        x_t and x_tp1 and the target's of x_tp1 ([M * atoms * A] each)."""
        c, M = self.cfg, self.batch
        self.project(
            logits_tp1=q_tp1, logits_target=q_tgt, reward=b.reward, done=b.done,
            discount=b.discount, m=self.m, M=M, A=ACTIONS, Z=c.atoms, gamma=c.gamma,
            cut_on_done=int(c.cut_on_done), v_min=c.v_min, v_max=c.v_max, stream=stream,
        )  # fmt: skip
        self.cross_entropy(
            logits_t=q_t, action=b.action, m=self.m, weight=weights, synthetic=b.synthetic,
            delta=b.delta, dlogits=b.dq, isv=isv, done=self.done, M=M, A=ACTIONS, Z=c.atoms,
            **slots.loss(), stream=stream,
        )  # fmt: skip


Head = QHead | C51Head


def make_head(cfg: AgentConfig, runtime: KernelRuntime, batch: int) -> Head:
    """The head `cfg` asks for (agent.distributional, agent.dueling), for batches of `batch`."""
    return (C51Head if cfg.distributional else QHead)(cfg, runtime, batch)
