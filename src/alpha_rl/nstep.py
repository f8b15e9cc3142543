"""n-step returns on either backend (DESIGN §7): each env's last n steps, on the device.

With `agent.n_step` = n > 1 the step pushes, instead of the one-step transition of every env, the
n-step transitions that end this step: (h_s, a_s, R_s, h_{t+1}, gamma^k, done), R_s the
discounted reward of the k <= n steps s .. t, cut at a trade close (done = 1) or where the env
began a new episode, so a return never spans a close or a restart; at an episode's end that
closes nothing (a truncation) the returns end at t - 1 and bootstrap from h_t, the last state of
their episode, and step t's own transition is dropped. The kernel (cuda/nstep.cu)
stages them in rows b * n + j, and the replay's push takes those rows in order; the learner then
bootstraps each with its own stored discount. HER's synthetic transitions stay one step (done = 1,
discount gamma). With n = 1 none of this is allocated or launched: `OneStep` pushes every env's
transition of the step except a truncation's (the env's `stored`), with the same boundary.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from alpha_rl import vocabulary as vocab
from alpha_rl.backend.base import Backend
from alpha_rl.env import Environment
from alpha_rl.isv import DeviceIsv
from alpha_rl.kernels import nstep
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.replay import Replay

F32, I32, U8 = np.float32, np.int32, np.uint8


def allocate(be: Backend, B: int, H: int, n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """nstep_accumulate's arrays for B envs of H features, zeroed: (the accumulator's state, by
    name: what a checkpoint saves; the staged transitions, rewritten every step)."""
    state = {
        "ring_h": be.zeros(n * B * H, F32),
        "ring_action": be.zeros(n * B, I32),
        "ring_reward": be.zeros(n * B, F32),
        "pos": be.zeros(B, I32),
        "count": be.zeros(B, I32),
        "episode_seen": be.zeros(B, I32),
    }
    staged = {
        "flags": be.zeros(B * n, U8),
        "out_h_t": be.zeros(B * n * H, F32),
        "out_h_tp1": be.zeros(B * n * H, F32),
        "out_action": be.zeros(B * n, I32),
        "out_reward": be.zeros(B * n, F32),
        "out_done": be.zeros(B * n, F32),
        "out_discount": be.zeros(B * n, F32),
    }
    return state, staged


class OneStep:
    """n = 1: every env's transition of this step into the replay as it is, except an episode's
    last step that closes nothing (the env's `stored` is 0 there: its next observation is the
    next episode's first, so it has no next state of its own to bootstrap from)."""

    def __init__(self, env: Environment) -> None:
        self.env = env
        self.arrays: dict[str, Any] = {}  # nothing carried between steps (a checkpoint's part)

    def push(self, h_t: Any, h_tp1: Any, replay: Replay, stream: Any = None) -> None:
        """Step t's stored transitions (after the env step and the observation of t + 1)."""
        a = self.env.arrays
        replay.push(h_t, h_tp1, a["eff_action"], a["reward"], a["done"], flags=a["stored"],
                    stream=stream)  # fmt: skip


class NStep:
    """The n-step accumulator of one run's envs, and its push into the replay."""

    def __init__(self, n: int, env: Environment, runtime: KernelRuntime, isv: DeviceIsv) -> None:
        self.n, self.env, self.runtime, self.isv = n, env, runtime, isv
        self.gamma_idx = isv.layout.index(vocab.SLOT_GAMMA)  # the learner's gamma
        self.arrays, self.staged = allocate(runtime.backend, env.num_envs, env.obs_dim, n)
        self._accumulate = runtime.bind(nstep.ACCUMULATE)

    def push(self, h_t: Any, h_tp1: Any, replay: Replay, stream: Any = None) -> None:
        """Step t into the rings (after the env step and the observation of t + 1), then the
        transitions that end now into `replay`."""
        env, s = self.env.arrays, self.staged
        self._accumulate(
            h_t=h_t, h_tp1=h_tp1, eff_action=env["eff_action"], reward=env["reward"],
            done=env["done"], episode=env["episode"], **self.arrays, **s,
            isv=self.isv.array, B=self.env.num_envs, H=self.env.obs_dim, n=self.n,
            gamma_idx=self.gamma_idx, stream=stream,
        )  # fmt: skip
        replay.push(s["out_h_t"], s["out_h_tp1"], s["out_action"], s["out_reward"],
                    s["out_done"], flags=s["flags"], discount=s["out_discount"],
                    stream=stream)  # fmt: skip
