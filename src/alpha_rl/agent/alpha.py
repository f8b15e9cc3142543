"""α (conf/alpha/on.yaml): the aux head's learned bias on the directional Q-values,
Q'(h, a) = Q(h, a) + w_α[a] aux(h) (cuda/aux.cu).

`AlphaBias` owns w_α's state (`AlphaState`: w_α, its target copy and Adam's moments), the
aux values of the update's batch, and the two kernels: alpha_bias wherever Q is read, and
alpha_update, w_α's own Adam step after the network's. `NoBias` is α off: Q as it is. The
learner picks one of the two once and calls the same methods on either.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from alpha_rl.agent.batch import Slots
from alpha_rl.agent.config import AgentConfig, AlphaConfig
from alpha_rl.agent.layout import ACTIONS, F32
from alpha_rl.backend.base import DeviceArray
from alpha_rl.kernels import aux
from alpha_rl.kernels.runtime import KernelRuntime


@dataclass(frozen=True)
class AlphaState:
    """w_α and its Adam moments and target copy, [A] each (checkpoint part `alpha`)."""

    w: DeviceArray
    target: DeviceArray
    m: DeviceArray
    v: DeviceArray

    def arrays(self) -> dict[str, DeviceArray]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class NoBias:
    """α off: Q-values are left as they are and there is no w_α to train."""

    state = None  # no AlphaState

    def apply(self, h: DeviceArray, q: DeviceArray, rows: int, target: bool = False,
              aux_out: DeviceArray | None = None, stream: Any = None) -> None:  # fmt: skip
        """Nothing."""

    def apply_batch(self, x: DeviceArray, q: DeviceArray, x_tp1: DeviceArray,
                    q_tgt: DeviceArray, rows: int, stream: Any = None) -> None:  # fmt: skip
        """Nothing."""

    def step(self, dq: DeviceArray, counters: DeviceArray, isv: DeviceArray | None,
             slots: Slots, stream: Any = None) -> None:  # fmt: skip
        """Nothing."""


class AlphaBias:
    """α on: Q' = Q + w_α aux(h) wherever the learner reads Q, and w_α's Adam step from the
    update's dl/dQ' (dQ'/dw_α = aux), bounded to |w_α[a]| <= alpha.bound."""

    def __init__(self, alpha: AlphaConfig, cfg: AgentConfig, runtime: KernelRuntime,
                 aux_w: DeviceArray, obs_dim: int, batch: int) -> None:  # fmt: skip
        be = runtime.backend
        self.alpha, self.cfg, self.aux_w = alpha, cfg, aux_w
        self.obs_dim, self.batch = obs_dim, batch
        # w_α: FLAT's entry 0, the directional ones at init
        w0 = np.array([0.0 if a == aux.FLAT else alpha.init for a in range(ACTIONS)], F32)
        self.state = AlphaState(w=be.upload(w0), target=be.upload(w0),
                                m=be.zeros(ACTIONS, F32), v=be.zeros(ACTIONS, F32))  # fmt: skip
        self.aux = be.zeros(2 * batch, F32)  # aux of the update's x_t, then x_tp1
        self.bias = runtime.bind(aux.ALPHA_BIAS)
        self.update = runtime.bind(aux.ALPHA_UPDATE)

    def apply(self, h: DeviceArray, q: DeviceArray, rows: int, target: bool = False,
              aux_out: DeviceArray | None = None, stream: Any = None) -> None:  # fmt: skip
        """Q' = Q + w_α aux(h) in place over `rows` rows of h [rows * H] and q [rows * A] (the
        target net's w_α copy when `target`); aux(h) [rows] into `aux_out` where given."""
        w = self.state.target if target else self.state.w
        self.bias(h=h, aux_w=self.aux_w, w=w, q=q, aux_out=aux_out, M=rows, H=self.obs_dim,
                  stream=stream)  # fmt: skip

    def apply_batch(self, x: DeviceArray, q: DeviceArray, x_tp1: DeviceArray,
                    q_tgt: DeviceArray, rows: int, stream: Any = None) -> None:  # fmt: skip
        """The update's Q': the online net's over x (x_t then x_tp1, 2 x `rows` rows; their
        aux kept for `step`) and the target net's over x_tp1."""
        self.apply(x, q, 2 * rows, aux_out=self.aux, stream=stream)
        self.apply(x_tp1, q_tgt, rows, target=True, stream=stream)

    def step(self, dq: DeviceArray, counters: DeviceArray, isv: DeviceArray | None,
             slots: Slots, stream: Any = None) -> None:  # fmt: skip
        """w_α's own Adam step from the same dq as the network's (dQ'/dw_α = aux(x_t)); its
        long and short entries into the ISV."""
        st, M = self.state, self.batch
        self.update(
            dq=dq, aux=self.aux[:M], counters=counters, w=st.w, m=st.m, v=st.v,
            target=st.target, isv=isv, M=M, adam_idx=slots.alpha_adam,
            long_idx=slots.w_alpha_long, short_idx=slots.w_alpha_short, stream=stream,
        )  # fmt: skip


Bias = NoBias | AlphaBias


def make_bias(alpha: AlphaConfig | None, cfg: AgentConfig, runtime: KernelRuntime,
              aux_w: DeviceArray, obs_dim: int, batch: int) -> Bias:  # fmt: skip
    """α as the run's plan has it (None: off) on the aux head `aux_w`, for batches of `batch`."""
    return NoBias() if alpha is None else AlphaBias(alpha, cfg, runtime, aux_w, obs_dim, batch)
