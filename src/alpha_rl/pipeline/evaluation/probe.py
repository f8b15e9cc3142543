"""The probe set: real held-out transitions on which every run's TD loss is comparable.

A run's own l_q is measured on its own replay batches: with HER they hold synthetic rows
(other rewards, done = 1) at boosted priority, so two arms' l_q answer different regression
problems. The probe is common ground. It is collected once, at the start of a run, from
`eval.probe.envs` environments on the held-out split driven by uniform random actions drawn from
the counter RNG on a stream of its own (PROBE): (seed, PROBE, step * envs + env) -> a = floor(u A).
No aux signal enters the env step (so the β reward c6 is 0) and nothing of the run's training
touches it, so every run of one market, seed, env and reward setting collects the same bytes,
whatever its HER, β or reward-layout variant (`digest` says which set a run used).

At each evaluation `ProbeLoss` runs the run's online net on h_t and h_tp1 and its target net on
h_tp1, and the learner's own dqn_td kernel with unit weights: eval/l_q_probe is the unweighted
mean Huber TD error against the run's double-DQN target, whatever the learner (noisy nets: their
means, without noise; C51: each action's expected value; α: Q + w_α aux, as the run acts), so
the probe compares a Rainbow run with a DQN run on the same scale; eval/q_probe_mean the mean
over the probe of max_a Q_online(h_t, a) (over-estimation is the other face of destabilisation).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from alpha_rl.agent import ACTIONS, Learner
from alpha_rl.env import Environment
from alpha_rl.isv import ABSENT
from alpha_rl.kernels import dqn
from alpha_rl.market.book import Book
from alpha_rl.pipeline.configure.plan import Plan
from alpha_rl.portable import mean
from alpha_rl.rng import Stream, draw_uniform
from alpha_rl.session import Session
from alpha_rl.vocabulary import PROBE

F32, I32 = np.float32, np.int32
FIELDS = ("h_t", "h_tp1", "action", "reward", "done")


@dataclass(frozen=True)
class ProbeSet:
    """size transitions on the host: h_t, h_tp1 [size, H] f32, action [size] i32, reward and
    done [size] f32, in collection order (step-major, then env)."""

    h_t: np.ndarray
    h_tp1: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    done: np.ndarray

    @property
    def size(self) -> int:
        return int(self.action.shape[0])

    @property
    def digest(self) -> str:
        """sha256 (first 16 hex digits) of every field's bytes, in FIELDS order."""
        h = hashlib.sha256()
        for name in FIELDS:
            h.update(np.ascontiguousarray(getattr(self, name)).tobytes())
        return h.hexdigest()[:16]


def probe_actions(seed: int, step: int, envs: int) -> np.ndarray:
    """The behaviour policy's actions [envs] int32 at collection step `step`: uniform."""
    index = np.uint64(step * envs) + np.arange(envs, dtype=np.uint64)
    u = draw_uniform(seed, Stream.PROBE, index)
    return np.minimum(ACTIONS - 1, (u * F32(ACTIONS)).astype(I32))


def collect_probe(session: Session, book: Book, plan: Plan) -> ProbeSet:
    """The run's probe set from the held-out `book` (env kernels on the session's backend)."""
    cfg, seed, be = plan.eval.probe, plan.run.seed, session.backend
    env_cfg = dataclasses.replace(plan.env, num_envs=cfg.envs)
    env = Environment(env_cfg, book, session.runtime, session.isv, seed,
                      int(session.cfg.reward.stride))  # fmt: skip
    H = env.obs_dim
    h_t, h_tp1 = be.zeros(cfg.envs * H, F32), be.zeros(cfg.envs * H, F32)
    rows: dict[str, list[np.ndarray]] = {name: [] for name in FIELDS}
    for step in range(cfg.steps):
        env.perceive(h_t)
        env.step(be.upload(probe_actions(seed, step, cfg.envs)), None)
        env.perceive(h_tp1)
        a = env.arrays
        got = {"h_t": h_t, "h_tp1": h_tp1, "action": a["eff_action"], "reward": a["reward"],
               "done": a["done"]}  # fmt: skip
        for name, array in got.items():
            rows[name].append(be.download(array).copy())
    n = cfg.size
    return ProbeSet(
        h_t=np.concatenate(rows["h_t"]).reshape(-1, H)[:n].astype(F32),
        h_tp1=np.concatenate(rows["h_tp1"]).reshape(-1, H)[:n].astype(F32),
        action=np.concatenate(rows["action"])[:n].astype(I32),
        reward=np.concatenate(rows["reward"])[:n].astype(F32),
        done=np.concatenate(rows["done"])[:n].astype(F32),
    )


class ProbeLoss:
    """eval/l_q_probe and eval/q_probe_mean of `learner` on a probe set (device buffers of its
    own; the learner's parameters are only read)."""

    def __init__(self, learner: Learner, probe: ProbeSet) -> None:
        be, n = learner.backend, probe.size
        self.learner, self.size, self.digest = learner, n, probe.digest
        self.x = be.upload(np.concatenate([probe.h_t.ravel(), probe.h_tp1.ravel()]))
        self.action, self.reward = be.upload(probe.action), be.upload(probe.reward)
        self.done, self.weight = be.upload(probe.done), be.upload(np.ones(n, F32))
        self.online, self.target = learner.net.buffers(2 * n), learner.net.buffers(n)
        self.q_online, self.q_target = learner.q_buffer(2 * n), learner.q_buffer(n)
        self.delta, self.dq = be.zeros(n, F32), be.zeros(n * ACTIONS, F32)
        # dqn_td's ISV: a copy of the run's (its numbers: gamma, kappa, cut_on_done), whose
        # loss_q slot takes the probe's l_q, so the run's own l_q is untouched
        self.isv = be.zeros(learner.isv.array.size, F32)
        self.td = learner.runtime.bind(dqn.TD)

    def run(self, stream: Any = None) -> dict[str, float]:
        """One evaluation of the current online and target nets on the probe, queued on `stream`
        (the run's) and read after it."""
        lr, n, H, slots = self.learner, self.size, self.learner.obs_dim, self.learner.slots
        out = lr.net.forward(lr.views["theta"], self.x, self.online, stream)
        q = lr.expected_q(out, self.q_online, 2 * n, stream)
        lr.alpha_bias(self.x, q, 2 * n, stream=stream)
        q_t, q_tp1 = q[: n * ACTIONS], q[n * ACTIONS :]
        out = lr.net.forward(lr.views["target"], self.x[n * H :], self.target, stream)
        q_tgt = lr.expected_q(out, self.q_target, n, stream)
        lr.alpha_bias(self.x[n * H :], q_tgt, n, target=True, stream=stream)
        lr.backend.copy(self.isv, lr.isv.array, stream)
        self.td(q_t=q_t, q_tp1=q_tp1, q_tp1_target=q_tgt, action=self.action,
                reward=self.reward, done=self.done, weight=self.weight, synthetic=None,
                discount=None,  # the probe's transitions are one step: gamma, whatever n_step
                delta=self.delta, dq=self.dq, isv=self.isv, M=n, A=ACTIONS, **slots.td(),
                loss_idx=slots.loss_q, real_idx=ABSENT, synthetic_idx=ABSENT, frac_idx=ABSENT,
                stream=stream)  # fmt: skip
        be = lr.backend
        q_host = be.download(q_t, stream).reshape(n, ACTIONS).astype(np.float64)
        return {
            PROBE: float(be.download(self.isv, stream)[slots.loss_q]),
            "eval/q_probe_mean": float(mean(q_host.max(axis=1))),
        }
