"""HER scenarios shared by the CPU tests (numpy backend) and the GPU tests (cuda backend)."""

from __future__ import annotations

import numpy as np

from alpha_rl.backend.base import Backend
from alpha_rl.env import EnvConfig, Environment
from alpha_rl.hindsight import hindsight_for
from alpha_rl.isv import DeviceIsv
from alpha_rl.kernels import her
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.market.book import Book
from alpha_rl.pipeline.configure.config import layout_from_config
from alpha_rl.replay import Replay, ReplayConfig
from tests.helpers import compose_fixed

FLAT, LONG, SHORT = 0, 1, 2
TICK = 0.25


def wave_book(T: int = 60, L: int = 2, breaks: tuple[int, ...] = ()) -> Book:
    """Mid rises one tick per step for T/2 ticks, then falls; spread one tick; a session begins
    at each tick of `breaks`."""
    half = T // 2
    mid_ticks = np.concatenate([np.arange(half), half - np.arange(T - half)]) + 400
    bid0 = (mid_ticks - 0.5) * TICK
    ask0 = bid0 + TICK
    sizes = np.full((T, L), 3.0)
    levels = np.arange(L) * TICK
    return Book(bid0[:, None] - levels, ask0[:, None] + levels, sizes, sizes.copy(), TICK, "waves",
                breaks=list(breaks))  # fmt: skip


def build(backend: Backend, book: Book, overrides: list[str], seed: int = 0):
    """(env, replay, hindsight or None, runtime, isv) composed from the real config."""
    cfg, choices = compose_fixed(["env.perception.horizons=[1]", "env.perception.projection=false",
                                  *overrides])  # fmt: skip
    runtime = KernelRuntime(backend, {"RC_STRIDE": int(cfg.reward.stride)})
    isv = DeviceIsv(layout_from_config(cfg, choices), backend)
    env = Environment(EnvConfig.from_cfg(cfg.env), book, runtime, isv, seed, int(cfg.reward.stride))
    rcfg = ReplayConfig(int(cfg.replay.capacity_log2), 0.6, 0.4, 1000, 1e-6, 32)
    replay = Replay(rcfg, env.obs_dim, runtime, seed, env.num_envs, isv)
    return env, replay, hindsight_for(cfg, env, replay, runtime, isv), runtime, isv


class Stepper:
    """Runs the env part of the step order with HER: perceive, step, track, push, inject,
    forward; `audit=True` uses the GPU-vs-oracle audit for the HER kernels."""

    def __init__(self, env, replay, hs, audit: bool = False) -> None:
        self.env, self.replay, self.hs, self.audit = env, replay, hs, audit
        be = env.backend
        self.h_t = be.zeros(env.num_envs * env.obs_dim, np.float32)
        self.h_tp1 = be.zeros(env.num_envs * env.obs_dim, np.float32)
        self.mismatches: dict[str, int] = {}

    def _add(self, found: dict[str, int]) -> None:
        for k, v in found.items():
            self.mismatches[k] = self.mismatches.get(k, 0) + v

    def step(self, actions: np.ndarray) -> None:
        env, a = self.env, self.env.arrays
        env.perceive(self.h_t)
        env.step(env.backend.upload(actions.astype(np.int32)))
        env.perceive(self.h_tp1)
        if self.hs is not None:
            self._add(self.hs.audit_track()) if self.audit else self.hs.track()
        self.replay.push(self.h_t, self.h_tp1, a["eff_action"], a["reward"], a["done"])
        if self.hs is not None:
            if self.audit:
                self._add(self.hs.audit_inject_forward(self.h_t))
            else:
                self.hs.inject(self.h_t)
                self.hs.forward(self.h_t)

    def her_state(self, name: str) -> np.ndarray:
        return self.env.backend.download(self.hs.arrays[name])


def run_inject_table(backend: Backend, cases: list[dict]) -> dict[str, np.ndarray]:
    """her_inject on one row per case (closed, entry, peak, dir, actual); threshold 1.5,
    boost 3, alpha 0.6, reward scale 0.5, lot_mult 10; returns the replay and ISV afterwards."""
    B, H = len(cases), 2
    N = 64
    up = backend.upload
    col = lambda key, dt: up(np.array([c[key] for c in cases], dt))  # noqa: E731
    rc = np.zeros(B * 7, np.float32)
    rc[::7] = [c["actual"] for c in cases]
    h_t = np.arange(B * H, dtype=np.float32)
    isv = np.zeros(10, np.float32)
    isv[[0, 1, 2]] = [1.5, 3.0, 0.5]  # threshold, boost, reward scale
    isv[[4, 5, 6]] = [0.6, 0.9, 10.0]  # the replay's alpha, the learner's gamma, lot_mult
    isv[[8, 9]] = [1.0, 0.0]  # her=backward: backward's flag, forward's
    state = np.zeros(8, np.uint64)
    state[0] = 10
    arrays = {
        "s_h_t": up(np.zeros(N * H, np.float32)), "s_h_tp1": up(np.zeros(N * H, np.float32)),
        "s_action": up(np.full(N, -1, np.int32)), "s_reward": up(np.zeros(N, np.float32)),
        "s_done": up(np.zeros(N, np.float32)), "s_synthetic": up(np.zeros(N, np.uint8)),
        "leaves": up(np.zeros(N, np.float32)), "s_discount": up(np.zeros(N, np.float32)),
        "rstate": up(state),
        "rlookback": up(np.zeros(8, np.uint64)), "counters": up(np.zeros(her.COUNTERS, np.uint64)),
        "isv": up(isv),
    }  # fmt: skip
    kernel = KernelRuntime(backend, {}).bind(her.INJECT)
    kernel(closed=col("closed", np.uint8), snap_entry=col("entry", np.float32),
           snap_peak=col("peak", np.float32), snap_dir=col("dir", np.int32), rc=up(rc),
           h_t=up(h_t), eff_action=up(np.full(B, 2, np.int32)),
           snap_episode=col("dir", np.int32), max_leaf=up(np.array([2.0], np.float32)),
           **arrays, ring_state=None, ring_lookback=None,
           **dict.fromkeys(her.RING_ARRAYS),
           B=B, H=H, S=7, R=0, mask=N - 1, alpha_idx=4, gamma_idx=5, lot_mult_idx=6,
           threshold_idx=0, boost_idx=1, scale_idx=2, count_idx=3, backward_idx=8,
           forward_idx=9)  # fmt: skip
    return {k: backend.download(v) for k, v in arrays.items()}


# (closed, entry, peak, dir, actual PnL, fires?) with lot_mult 10, threshold 1.5
INJECT_TABLE = [
    dict(closed=0, entry=10.0, peak=20.0, dir=1, actual=1.0, fires=False),  # not done
    dict(closed=1, entry=10.0, peak=10.0, dir=1, actual=-5.0, fires=False),  # peak_pnl = 0
    dict(closed=1, entry=10.0, peak=11.0, dir=1, actual=-5.0, fires=True),  # losing trade
    dict(closed=1, entry=10.0, peak=11.0, dir=1, actual=4.0, fires=True),  # 10 > 1.5 * 4
    dict(closed=1, entry=10.0, peak=11.5, dir=1, actual=10.0, fires=False),  # 15 == 1.5 * 10
    dict(closed=1, entry=10.0, peak=11.5, dir=1, actual=9.75, fires=True),  # 15 > 14.625
    dict(closed=1, entry=10.0, peak=9.0, dir=-1, actual=4.0, fires=True),  # short: 10 > 6
    dict(closed=1, entry=10.0, peak=9.5, dir=-1, actual=4.0, fires=False),  # short: 5 < 6
    dict(closed=1, entry=10.0, peak=12.0, dir=1, actual=20.0, fires=False),  # captured it all
]
