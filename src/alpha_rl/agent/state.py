"""`LearnerState`: the learner's device arrays that persist between updates (checkpoint part
`learner`)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from alpha_rl.agent.layout import F32
from alpha_rl.backend.base import Backend, DeviceArray
from alpha_rl.kernels import dqn


@dataclass(frozen=True)
class LearnerState:
    """The learner's device arrays a resume needs: everything that persists between updates."""

    theta: DeviceArray  # online network parameters [P] (noisy: mu then sigma, [2P])
    target: DeviceArray  # target network parameters, as theta
    adam_m: DeviceArray  # Adam's first moments, as theta
    adam_v: DeviceArray  # Adam's second moments, as theta
    counters: DeviceArray  # uint64 [DQN_COUNTERS]: Adam's step, the acting step, scratch
    stats: DeviceArray  # [1]: the last gradient norm (Adam's clipping reads it)
    aux_w: DeviceArray  # aux head weights and bias [H + 1]

    @classmethod
    def initial(cls, backend: Backend, theta: np.ndarray, obs_dim: int) -> LearnerState:
        """Online and target nets both `theta` (float32 [n]), Adam's moments, the counters, the
        gradient norm and the aux head (obs_dim weights and a bias) all zero."""
        be, n = backend, theta.size
        return cls(
            theta=be.upload(theta), target=be.upload(theta), adam_m=be.zeros(n, F32),
            adam_v=be.zeros(n, F32), counters=be.zeros(dqn.COUNTERS, np.uint64),
            stats=be.zeros(1, F32), aux_w=be.zeros(obs_dim + 1, F32),
        )  # fmt: skip

    def arrays(self) -> dict[str, DeviceArray]:
        """Field name -> array, in declaration order (the checkpoint's keys)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
