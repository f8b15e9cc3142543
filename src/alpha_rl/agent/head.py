"""The Q-network's head: how its outputs become Q-values and which loss trains them.

`QHead` (plain or dueling): the outputs are Q [rows, A] themselves and the loss is dqn_td's
double-DQN Huber TD error. `C51Head` (plain or dueling): the outputs are logits
[rows, atoms, A] of a categorical return distribution on [v_min, v_max]; Q is each action's
expected value (c51_q) and the loss is the cross-entropy to the projected target distribution
(c51_project, c51_loss). The dueling combination itself runs inside the network
(QNetwork, mlp_dueling_*); the head says whether there is one.

`HEADS` is the one list of heads: `make_head` picks from it once (the head whose agent.<key> is
true, QHead when none is), the memory estimate asks the chosen class for its sizes, and the
kill check's agent axis names a learner by it (`agent/pieces.py`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from alpha_rl.agent.batch import Batch, Slots
from alpha_rl.agent.config import AgentConfig
from alpha_rl.agent.layout import ACTIONS, F32, NetLayout
from alpha_rl.backend.base import DeviceArray
from alpha_rl.errors import ConfigError
from alpha_rl.kernels import c51, dqn
from alpha_rl.kernels.runtime import KernelRuntime

Sizes = dict[str, tuple[int, Any]]  # array name -> (elements, dtype)


class QHead:
    """Q [rows, A] straight from the network (plain, or dueling: V + A - mean A); the loss is
    dqn_td's Huber TD error of double DQN."""

    key = None  # no agent.* flag: the head when no other head's flag is on
    atoms = 1

    @staticmethod
    def atoms_of(cfg: AgentConfig) -> int:
        """Outputs per action: one, Q itself."""
        return 1

    @staticmethod
    def scratch(cfg: AgentConfig, batch: int) -> Sizes:
        """Arrays the head allocates for an update of `batch` rows: none."""
        return {}

    @staticmethod
    def q_elements(rows: int) -> int:
        """Elements of `q_buffer(rows)`: none."""
        return 0

    def __init__(self, cfg: AgentConfig, runtime: KernelRuntime, batch: int, isv: DeviceArray,
                 slots: Slots) -> None:  # fmt: skip
        self.cfg, self.dueling, self.batch = cfg, cfg.dueling, batch
        self.td = runtime.bind(dqn.TD)
        self.numbers = slots.td()

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
        self.td(
            q_t=q_t, q_tp1=q_tp1, q_tp1_target=q_tgt, action=b.action, reward=b.reward,
            done=b.done, weight=weights, synthetic=b.synthetic, discount=b.discount,
            delta=b.delta, dq=b.dq, isv=isv, M=self.batch, A=ACTIONS, **self.numbers,
            **slots.loss(), stream=stream,
        )  # fmt: skip


class C51Head:
    """Logits [rows, atoms, A] of each action's return distribution on `atoms` atoms over
    [v_min, v_max]; Q is its expected value, the loss the cross-entropy to the projected
    double-DQN target distribution."""

    key = "distributional"  # agent.distributional=true picks it
    piece = "c51"  # its name in a learner variant (dqn_c51)

    @staticmethod
    def atoms_of(cfg: AgentConfig) -> int:
        """Outputs per action: agent.atoms."""
        return cfg.atoms

    @staticmethod
    def scratch(cfg: AgentConfig, batch: int) -> Sizes:
        """The projected targets m [batch, atoms] and c51_loss's done counter."""
        return {"m": (batch * cfg.atoms, F32), "done": (1, np.uint64)}

    @staticmethod
    def q_elements(rows: int) -> int:
        """Elements of `q_buffer(rows)`: float32 [rows, A]."""
        return rows * ACTIONS

    def __init__(self, cfg: AgentConfig, runtime: KernelRuntime, batch: int, isv: DeviceArray,
                 slots: Slots) -> None:  # fmt: skip
        be = runtime.backend
        self.cfg, self.dueling, self.atoms, self.batch = cfg, cfg.dueling, cfg.atoms, batch
        self.isv, self.support = isv, slots.c51_support
        self.target = dict(gamma_idx=slots.gamma, cut_idx=slots.cut_on_done,
                           support_idx=slots.c51_support)  # fmt: skip
        self.backend = be
        self.c51_q = runtime.bind(c51.Q)
        self.project = runtime.bind(c51.PROJECT)
        self.cross_entropy = runtime.bind(c51.LOSS)
        self.m, self.done = (be.zeros(n, dt) for n, dt in self.scratch(cfg, batch).values())

    @property
    def name(self) -> str:
        return "dueling-c51" if self.dueling else "c51"

    def layout(self, obs_dim: int, hidden: tuple[int, ...]) -> NetLayout:
        """The network this head sits on: obs_dim -> hidden... -> atoms x its outputs."""
        return NetLayout.build(obs_dim, hidden, ACTIONS, self.dueling, self.atoms)

    def q_buffer(self, rows: int) -> DeviceArray:
        """A buffer for `expected_q` over `rows` rows: float32 [rows * A]."""
        return self.backend.zeros(self.q_elements(rows), F32)

    def expected_q(self, out: DeviceArray, q: DeviceArray | None, rows: int,
                   stream: Any = None) -> DeviceArray:  # fmt: skip
        """Q [rows, A] of a forward's logits `out`: each action's expected return, written
        into `q` [rows * A]."""
        c = self.cfg
        self.c51_q(logits=out, isv=self.isv, q=q, M=rows, A=ACTIONS, Z=c.atoms,
                   support_idx=self.support, stream=stream)  # fmt: skip
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
            discount=b.discount, isv=self.isv, m=self.m, M=M, A=ACTIONS, Z=c.atoms,
            **self.target, stream=stream,
        )  # fmt: skip
        self.cross_entropy(
            logits_t=q_t, action=b.action, m=self.m, weight=weights, synthetic=b.synthetic,
            delta=b.delta, dlogits=b.dq, isv=isv, done=self.done, M=M, A=ACTIONS, Z=c.atoms,
            **slots.loss(), stream=stream,
        )  # fmt: skip


Head = QHead | C51Head
# every head: those an agent.<key> flag picks, then QHead (no key), the head when none is on
HEADS: tuple[type[Head], ...] = (C51Head, QHead)


def head_class(cfg: AgentConfig) -> type[Head]:
    """The head `cfg` asks for: the one whose agent.<key> is true, QHead when none is;
    ConfigError when two are."""
    chosen = [h for h in HEADS if h.key is not None and getattr(cfg, h.key)]
    if len(chosen) > 1:
        flags = " and ".join(f"agent.{h.key}=true" for h in chosen)
        raise ConfigError(f"{flags} each choose a head of their own; the learner has one: "
                          "set all but one of them false (see conf/agent/)")  # fmt: skip
    return chosen[0] if chosen else next(h for h in HEADS if h.key is None)


def make_head(cfg: AgentConfig, runtime: KernelRuntime, batch: int, isv: DeviceArray,
              slots: Slots) -> Head:  # fmt: skip
    """The head `cfg` asks for (`head_class`; plain or dueling: agent.dueling), for batches of
    `batch`, its numbers (gamma, kappa, C51's support) read from `isv` at `slots`."""
    return head_class(cfg)(cfg, runtime, batch, isv, slots)
