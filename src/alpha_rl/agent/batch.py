"""What one update works on: the batch gathered from the replay (`Batch`, with the n-step
discounts where the run has them) and the learner's ISV slots (`Slots`)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from alpha_rl import vocabulary as vocab
from alpha_rl.agent.layout import F32, I32
from alpha_rl.backend.base import Backend, DeviceArray
from alpha_rl.isv import ABSENT, DeviceIsv


@dataclass(frozen=True)
class Batch:
    """The update's M transitions, gathered from the replay by dqn_gather, and what the loss
    writes: device arrays."""

    x: DeviceArray  # float32 [2 * M * H]: h_t of the M rows, then h_tp1
    action: DeviceArray  # int32 [M]
    reward: DeviceArray  # float32 [M] (n-step: the discounted sum of n rewards)
    done: DeviceArray  # float32 [M]
    synthetic: DeviceArray  # uint8 [M]: 1 for a HER row
    discount: DeviceArray | None  # float32 [M] with n-step returns: each row's own gamma^k;
    # None with one-step targets (gamma for all)
    delta: DeviceArray  # float32 [M]: TD errors (the replay's new priorities)
    dq: DeviceArray  # float32 [M * outputs]: the loss's gradient at the online net's outputs

    @classmethod
    def allocate(cls, backend: Backend, rows: int, obs_dim: int, outputs: int,
                 n_step: int) -> Batch:  # fmt: skip
        """Zeroed arrays for `rows` transitions of `obs_dim` features and a network of
        `outputs` values per row; a discount per row only with n_step > 1."""
        be, M = backend, rows
        return cls(
            x=be.zeros(2 * M * obs_dim, F32),
            action=be.zeros(M, I32),
            reward=be.zeros(M, F32),
            done=be.zeros(M, F32),
            synthetic=be.zeros(M, np.uint8),
            discount=be.zeros(M, F32) if n_step > 1 else None,
            delta=be.zeros(M, F32),
            dq=be.zeros(M * outputs, F32),
        )


SLOT_NAMES = {  # Slots' field -> the ISV slot it is
    "loss_q": vocab.SLOT_LOSS_Q,
    "loss_aux": vocab.SLOT_LOSS_AUX,
    "epsilon": vocab.SLOT_EPSILON,
    "grad_norm": vocab.SLOT_GRAD_NORM,
    "loss_q_real": vocab.SLOT_LOSS_Q_REAL,
    "loss_q_synthetic": vocab.SLOT_LOSS_Q_SYNTHETIC,
    "batch_synthetic_frac": vocab.SLOT_BATCH_SYNTHETIC,
    "w_alpha_long": vocab.SLOT_W_ALPHA_LONG,
    "w_alpha_short": vocab.SLOT_W_ALPHA_SHORT,
    "gamma": vocab.SLOT_GAMMA,
    "huber_kappa": vocab.SLOT_HUBER_KAPPA,
    "cut_on_done": vocab.SLOT_CUT_ON_DONE,
    "adam": vocab.SLOT_ADAM,
    "epsilon_schedule": vocab.SLOT_EPSILON_SCHEDULE,
    "aux_lr": vocab.SLOT_AUX_LR,
    "c51_support": vocab.SLOT_C51_SUPPORT,
    "alpha_adam": vocab.SLOT_ALPHA_ADAM,
}


@dataclass(frozen=True)
class Slots:
    """The ISV slots the learner's kernels write (ABSENT where the layout has none, or with no
    ISV at all) and those of the numbers they read (the learner part's:
    alpha_rl.pipeline.configure.parts)."""

    loss_q: int
    loss_aux: int
    epsilon: int
    grad_norm: int
    loss_q_real: int
    loss_q_synthetic: int
    batch_synthetic_frac: int
    w_alpha_long: int
    w_alpha_short: int
    gamma: int
    huber_kappa: int
    cut_on_done: int
    adam: int
    epsilon_schedule: int
    aux_lr: int
    c51_support: int
    alpha_adam: int

    @classmethod
    def of(cls, isv: DeviceIsv | None) -> Slots:
        """Each field's slot in `isv`'s layout (SLOT_NAMES says which)."""
        if isv is None:
            return cls(**{f.name: ABSENT for f in fields(cls)})
        return cls(**{f.name: isv.layout.index_or_absent(SLOT_NAMES[f.name]) for f in fields(cls)})

    def td(self) -> dict[str, int]:
        """The number arguments of dqn_td: gamma, cut_on_done and Huber's kappa."""
        return dict(gamma_idx=self.gamma, cut_idx=self.cut_on_done, kappa_idx=self.huber_kappa)

    def loss(self) -> dict[str, int]:
        """The slot arguments of the loss kernels (dqn_td, c51_loss): l_q, l_q over the real
        and over the synthetic rows, and the batch's synthetic fraction."""
        return dict(loss_idx=self.loss_q, real_idx=self.loss_q_real,
                    synthetic_idx=self.loss_q_synthetic,
                    frac_idx=self.batch_synthetic_frac)  # fmt: skip
