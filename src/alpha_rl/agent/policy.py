"""Evaluation's use of a learner: `GreedyPolicy` (argmax Q with buffers and counters of its
own) and `aux_calls` (how often the aux head called the mid's move right; `called_right` on host
arrays)."""

from __future__ import annotations

from typing import Any

import numpy as np

from alpha_rl.agent.layout import ACTIONS, F32, I32
from alpha_rl.agent.learner import Learner
from alpha_rl.backend.base import Backend, DeviceArray
from alpha_rl.isv import ABSENT
from alpha_rl.kernels import dqn


def aux_calls(backend: Backend, p_up: DeviceArray, fill_mid: DeviceArray,
              post_mid: DeviceArray) -> tuple[int, int]:  # fmt: skip
    """(right, moved): of the envs whose mid moved over the step (post_mid != fill_mid), how
    many the aux head called right (p_up > 0.5 for up), read to the host (`called_right`)."""
    return called_right(*(backend.download(a) for a in (p_up, fill_mid, post_mid)))


def called_right(p_up: np.ndarray, fill_mid: np.ndarray, post_mid: np.ndarray) -> tuple[int, int]:
    """`aux_calls` on host arrays of any shape (steps x envs: an evaluation's records)."""
    moved = post_mid != fill_mid
    right = ((post_mid > fill_mid) == (p_up > 0.5))[moved]
    return int(np.count_nonzero(right)), int(np.count_nonzero(moved))


class GreedyPolicy:
    """argmax_a Q(h, a) of the learner's online network for `num_envs` rows (evaluation; noisy:
    its means, without noise), with buffers and counters of its own so the learner's epsilon
    schedule and RNG stay untouched."""

    def __init__(self, learner: Learner, num_envs: int) -> None:
        be = learner.backend
        self.learner, self.num_envs = learner, num_envs
        self.bufs = learner.net.buffers(num_envs)
        self.q = learner.q_buffer(num_envs)
        self.actions, self.p_up = be.zeros(num_envs, I32), be.zeros(num_envs, F32)
        self.counters = be.zeros(dqn.COUNTERS, np.uint64)

    def act(self, h: DeviceArray, stream: Any = None) -> DeviceArray:
        """Greedy actions [B] int32 for h [B * H]; the aux head's p_up [B] in `p_up`."""
        lr, B = self.learner, self.num_envs
        out = lr.net.forward(lr.views["theta"], h, self.bufs, stream)
        q = lr.expected_q(out, self.q, B, stream)
        lr.alpha_bias(h, q, B, stream=stream)
        lr.kernels.act(q=q, h=h, aux_w=lr.state.aux_w, action=self.actions,
                       counters=self.counters, isv=None, p_up=self.p_up, B=B, A=ACTIONS,
                       H=lr.obs_dim, run_seed=lr.run_seed, schedule_idx=ABSENT,  # greedy
                       eps_idx=ABSENT, stream=stream)  # fmt: skip
        return self.actions
