"""Prioritized experience replay on either backend (DESIGN §6).

`Replay` owns the transition storage, the leaves (priority^alpha), the sum tree and the device
counters, and launches the per_* kernels: `push` (real or synthetic transitions, any number of
rows, flags optional), `rebuild` (the tree from the leaves, once per step after the pushes),
`sample` (M stratified indices and importance weights; β annealed on the device),
`update` (priorities from TD errors). Nothing is copied to the host except by `size`,
`check` and `read_*`, meant for log points and tests.

`max_leaf`, the leaf new transitions get (max_priority^alpha; HER's synthetic rows get
boost^alpha times it), is the largest leaf any priority update has written (1 before the
first), as in Schaul et al.'s PER. It is deliberately not the maximum over the current leaves:
synthetic rows are pushed at boost^alpha times the maximum, so a maximum over the leaves would
grow by that factor on every step with an injection until it overflowed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from alpha_rl import settings
from alpha_rl import vocabulary as vocab
from alpha_rl.backend.base import Backend, DeviceArray
from alpha_rl.errors import ConfigError, ReplayError
from alpha_rl.isv import DeviceIsv
from alpha_rl.kernels import per
from alpha_rl.kernels.per import HEAD, STATE_WORDS, STATUS, STATUS_EMPTY_SAMPLE, tree_layout
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.rng import seed_on_device

F32, I32 = np.float32, np.int32


@dataclass(frozen=True)
class ReplayConfig:
    """Settings of the replay (conf/replay/per.yaml)."""

    capacity_log2: int
    alpha: float
    beta0: float
    beta_anneal_updates: int
    eps: float
    batch_size: int

    @property
    def capacity(self) -> int:
        return 1 << self.capacity_log2

    @classmethod
    def from_cfg(cls, node: DictConfig, learner_updates: int | None = None) -> ReplayConfig:
        """Typed and range-checked `replay` config; errors name the key, the value and the
        range. A null `beta_anneal_updates` resolves from the run's `learner_updates`, so that β
        reaches 1 at its last update (as in Schaul et al.)."""
        replay = settings.section(node, "replay")
        where = "conf/replay/"

        def whole(key: str, ok: Callable[[int], bool], what: str) -> int:
            return settings.integer(replay, f"replay.{key}", ok, what, where)

        def num(key: str, ok: Callable[[float], bool], what: str) -> float:
            return settings.number(replay, f"replay.{key}", ok, what, where)

        # absent reads as 0 here, so that the reader below names a missing key as missing
        if OmegaConf.select(replay, "replay.beta_anneal_updates", default=0) is None:
            if learner_updates is None:
                raise ConfigError("replay.beta_anneal_updates=null resolves from the run's "
                                  "learner updates, which were not given")  # fmt: skip
            anneal = max(1, learner_updates - 1)  # the last update samples at epoch U - 1
        else:
            anneal = whole("beta_anneal_updates", lambda v: v >= 1,
                           ">= 1 (learner updates; or null: the run's own)")  # fmt: skip
        capacity_log2 = whole(
            "capacity_log2", lambda v: 1 <= v <= 30, "in 1..30 (2^capacity_log2 transitions)"
        )
        batch_size = whole(
            "batch_size", lambda v: 1 <= v <= per.MAX_BATCH, f"in 1..{per.MAX_BATCH}"
        )
        if batch_size > 1 << capacity_log2:
            raise ConfigError(
                f"replay.batch_size={batch_size} is more than the replay holds: "
                f"2^replay.capacity_log2 = 2^{capacity_log2} = {1 << capacity_log2} transitions; "
                f"lower replay.batch_size or raise replay.capacity_log2 to "
                f">= {(batch_size - 1).bit_length()} (see {where})"
            )
        return cls(
            capacity_log2=capacity_log2,
            alpha=num("alpha", lambda v: v >= 0, ">= 0 (0: uniform sampling)"),
            beta0=num("beta0", lambda v: 0 <= v <= 1, "in [0, 1]"),
            beta_anneal_updates=anneal,
            eps=num("eps", lambda v: v > 0, "> 0 (a zero priority is never sampled again)"),
            batch_size=batch_size,
        )


class Replay:
    """The replay buffer of one run; `max_push` bounds the rows of one push call."""

    def __init__(
        self,
        cfg: ReplayConfig,
        obs_dim: int,
        runtime: KernelRuntime,
        seed: int,
        max_push: int,
        isv: DeviceIsv,
        discounts: bool = False,
    ) -> None:
        """`discounts`: store each transition's bootstrap discount (n-step returns); `isv`: the
        run's, which holds the replay's numbers (alpha, eps, beta's schedule: filled by
        alpha_rl.pipeline.configure.parts) and takes beta."""
        self.cfg, self.obs_dim, self.runtime, self.seed = cfg, obs_dim, runtime, seed
        self.isv = isv
        N, be = cfg.capacity, runtime.backend
        self.run_seed = seed_on_device(be, seed)
        if not 1 <= max_push <= N:
            raise ConfigError(
                f"a push of up to {max_push} rows needs replay capacity >= it (N={N})"
            )
        self.max_push = max_push
        self.layout_host, tree_size = tree_layout(N)
        levels = int(self.layout_host[0])
        self.top = int(self.layout_host[2 * levels - 1])
        # the replay's device state, by name: what a checkpoint with the replay saves
        self.arrays: dict[str, DeviceArray] = {
            "s_h_t": be.zeros(N * obs_dim, F32),
            "s_h_tp1": be.zeros(N * obs_dim, F32),
            "s_action": be.zeros(N, I32),
            "s_reward": be.zeros(N, F32),
            "s_done": be.zeros(N, F32),
            "s_synthetic": be.zeros(N, np.uint8),
            "leaves": be.zeros(N, F32),
            "tree": be.zeros(tree_size, F32),
            "tree_max": be.zeros(tree_size, F32),
            "max_leaf": be.zeros(1, F32),
            "state": be.zeros(STATE_WORDS, np.uint64),
            "lookback": be.zeros(-(-max_push // per.PUSH_BLOCK), np.uint64),
            "indices": be.zeros(cfg.batch_size, I32),
            "weights": be.zeros(cfg.batch_size, F32),
            "probs": be.zeros(cfg.batch_size, F32),
        }
        if discounts:
            self.arrays["s_discount"] = be.zeros(N, F32)
        self.max_leaf = self.arrays["max_leaf"]
        self.tree_layout = be.upload(self.layout_host)  # constant: not part of the state
        self._levels = []  # (sums, maxima, entries) views of each internal level, bottom up
        for level in range(1, levels + 1):
            offset, size = int(self.layout_host[2 * level - 1]), int(self.layout_host[2 * level])
            level_slice = slice(offset, offset + size)
            sums, maxima = self.arrays["tree"][level_slice], self.arrays["tree_max"][level_slice]
            self._levels.append((sums, maxima, size))
        at = isv.layout.index
        self.beta_idx = isv.layout.index_or_absent(vocab.SLOT_PER_BETA)
        self.alpha_idx, self.eps_idx = at(vocab.SLOT_PER_ALPHA), at(vocab.SLOT_PER_EPS)
        self.schedule_idx = at(vocab.SLOT_PER_BETA_SCHEDULE)
        bind = runtime.bind
        self._push, self._reduce = bind(per.PUSH), bind(per.TREE_REDUCE)
        self._sample, self._update = bind(per.SAMPLE), bind(per.UPDATE)
        self._pushed = False

    @property
    def backend(self) -> Backend:
        return self.runtime.backend

    def push(
        self,
        h_t: DeviceArray,
        h_tp1: DeviceArray,
        action: DeviceArray,
        reward: DeviceArray,
        done: DeviceArray,
        *,
        flags: DeviceArray | None = None,
        priority: DeviceArray | None = None,
        discount: DeviceArray | None = None,
        synthetic: bool = False,
        slot_out: DeviceArray | None = None,
        stream: Any = None,
    ) -> None:
        """Push rows r < len(action) (those with flags[r] != 0, when flags are given); a replay
        that stores discounts needs each row's `discount`."""
        n = int(action.shape[0])
        if n > self.max_push:
            raise ReplayError(f"push of {n} rows: this replay was sized for {self.max_push}")
        if ("s_discount" in self.arrays) != (discount is not None):
            raise ReplayError("a replay that stores discounts (n-step returns) takes a push with "
                              "one per row, and only such a replay does")  # fmt: skip
        a, c = self.arrays, self.cfg
        self._push(
            flags=flags, h_t=h_t, h_tp1=h_tp1, action=action, reward=reward, done=done,
            priority=priority, discount=discount, max_leaf=self.max_leaf, isv=self.isv.array,
            slot_out=slot_out,
            s_discount=a.get("s_discount"),
            **{k: a[k] for k in ("s_h_t", "s_h_tp1", "s_action", "s_reward", "s_done",
                                 "s_synthetic", "leaves", "state", "lookback")},
            n=n, H=self.obs_dim, mask=c.capacity - 1, alpha_idx=self.alpha_idx,
            synthetic=int(synthetic),
            stream=stream,
        )  # fmt: skip
        self._pushed = self._pushed or n > 0

    def rebuild(self, stream: Any = None) -> None:
        """Recompute every tree level (sums and maxima) from the leaves."""
        in_sum, in_max, n_in = self.arrays["leaves"], None, self.cfg.capacity
        for out_sum, out_max, size in self._levels:
            self._reduce(in_sum=in_sum, in_max=in_max, out_sum=out_sum, out_max=out_max,
                         n_in=n_in, n_out=size, stream=stream)  # fmt: skip
            in_sum, in_max, n_in = out_sum, out_max, size

    def sample(self, stream: Any = None) -> tuple[DeviceArray, DeviceArray]:
        """(indices [M] int32, weights [M] float32) of a stratified prioritized batch: the
        replay's own buffers, overwritten by the next call."""
        if not self._pushed:
            raise ReplayError("sample from an empty replay buffer: push transitions before the "
                              "first learner update (and rebuild the tree)")  # fmt: skip
        a, c = self.arrays, self.cfg
        self._sample(
            **{k: a[k] for k in ("leaves", "tree", "indices", "weights", "probs", "state")},
            layout=self.tree_layout, isv=self.isv.array, M=c.batch_size, N=c.capacity,
            run_seed=self.run_seed, schedule_idx=self.schedule_idx, beta_idx=self.beta_idx,
            stream=stream,
        )  # fmt: skip
        return a["indices"], a["weights"]

    def update(self, indices: DeviceArray, delta: DeviceArray, stream: Any = None) -> None:
        """Priorities of the sampled slots from their TD errors: (|delta| + eps)^alpha."""
        self._update(indices=indices, delta=delta, isv=self.isv.array,
                     leaves=self.arrays["leaves"], max_leaf=self.max_leaf,
                     M=int(indices.shape[0]), alpha_idx=self.alpha_idx, eps_idx=self.eps_idx,
                     stream=stream)  # fmt: skip

    def mark_filled(self, filled: bool) -> None:
        """Declare whether the storage holds transitions (after restoring it from a checkpoint)."""
        self._pushed = filled

    # --- host reads (log points and tests) ---
    def read_state(self) -> np.ndarray:
        return self.backend.download(self.arrays["state"])

    def size(self) -> int:
        """Transitions held (a device->host read)."""
        return int(min(int(self.read_state()[HEAD]), self.cfg.capacity))

    def total(self) -> float:
        """The tree's total priority mass as of the last rebuild (a device->host read)."""
        return float(self.backend.download(self.arrays["tree"][self.top : self.top + 1])[0])

    def check(self) -> None:
        """Raise ReplayError when a batch was sampled from an empty buffer (a device read)."""
        if int(self.read_state()[STATUS]) & STATUS_EMPTY_SAMPLE:
            raise ReplayError("a batch was sampled while the replay buffer was empty "
                              "(every pushed row had flag 0); its weights are 0")  # fmt: skip
