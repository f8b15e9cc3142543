"""Bidirectional hindsight experience replay on either backend (DESIGN §8).

`Hindsight` owns the per-env trade tracking state and (with forward HER) the ring of closed
trades, and launches the her_* kernels in the step order of DESIGN §9: `track` after the env step
(6), `inject` after the real push (8; it also records the closes in the ring), `forward` after it
(9). Synthetic rows go through the
replay's own push. `hindsight_for(cfg, ...)` returns None for `her='off'`: then nothing is
allocated and nothing launched.

`audit_track` and `audit_inject_forward` run the same kernels under the runtime's audit (the
GPU launch and, on host copies of its inputs, the NumPy oracle) and count the outputs that differ.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from alpha_rl import settings
from alpha_rl import vocabulary as vocab
from alpha_rl.env import Environment
from alpha_rl.errors import ConfigError
from alpha_rl.her_variant import HerVariant, from_config
from alpha_rl.isv import DeviceIsv
from alpha_rl.kernels import her, per
from alpha_rl.kernels.experience import ENV_COSTS
from alpha_rl.kernels.runtime import KernelRuntime, arguments
from alpha_rl.replay import Replay

F32, I32, U64 = np.float32, np.int32, np.uint64
ENV_STATE = {
    "mid_ring": F32,
    "count": I32,
    "entry_mid": F32,
    "peak_mid": F32,
    "dir": I32,
    "snap_entry": F32,
    "snap_peak": F32,
    "snap_dir": I32,
    "snap_episode": I32,
    "last_episode": I32,
}
KERNELS = (her.TRACK.name, her.INJECT.name, her.FORWARD.name)
STORAGE = ("s_h_t", "s_h_tp1", "s_action", "s_reward", "s_done", "s_synthetic", "leaves")
# what the HER kernels read of the environment's step (HER keeps its own entry_mid / peak_mid)
ENV_INPUTS = ("opened", "closed", "pos", "episode", "fill_mid", "post_mid", "rc", "eff_action")


# per direction: the ISV slot counting its injections of the last step, and its name at a log
# point (her/<name>)
STEP_COUNTS = {
    "backward": (vocab.SLOT_HER_INJECT_COUNT, "inject_count_step"),
    "forward": (vocab.SLOT_HER_FORWARD_INJECT_COUNT, "forward_inject_count_step"),
}
# her_inject's flags of the variant, a slot per direction it serves (a slot the layout lacks: off)
DIRECTION_FLAGS = {"backward": vocab.SLOT_HER_BACKWARD, "forward": vocab.SLOT_HER_FORWARD}


def ring_for(num_envs: int, lookahead: int) -> int:
    """`her.closed_ring: auto`: the smallest power of two that holds every claim forward HER may
    still judge in the worst case, every env closing a trade on every step. her_inject records a
    step's closes before her_forward judges those that came due, so the ring holds lookahead + 1
    steps of closes; an expired claim (age > 2 x lookahead) is cleared by the judgement that
    finds it due, so no longer window needs room."""
    return 1 << (num_envs * (lookahead + 1) - 1).bit_length()


@dataclass(frozen=True)
class HerConfig:
    """Which directions run, and the forward ring's size (conf/her/*.yaml)."""

    variant: HerVariant  # never OFF: her='off' has no HerConfig
    threshold: float
    priority_boost: float
    lookahead: int  # 0 without forward
    closed_ring: int  # 0 without forward; `auto` resolved (ring_for)
    ring_auto: bool = False  # whether closed_ring was resolved from `auto`
    max_overwritten: float = 0.0  # the share of closes forward may lose before a warning

    @property
    def backward(self) -> bool:
        return self.variant.backward

    @property
    def forward(self) -> bool:
        return self.variant.forward

    @classmethod
    def from_cfg(cls, cfg: DictConfig) -> HerConfig | None:
        """None when HER is off; otherwise the checked settings (`cfg`: the whole config)."""
        where = "conf/her/"
        read = functools.partial(settings.flag, cfg, where=where)  # read("her.enabled")
        node = OmegaConf.select(cfg, "her")  # its keys as values (a flag is read by `read`)
        group = OmegaConf.to_container(node) if OmegaConf.is_dict(node) else {}
        variant = from_config(group, read, f"see {where}")
        if variant is HerVariant.OFF:
            return None
        threshold = settings.number(
            cfg, "her.threshold", lambda v: v >= 0,
            ">= 0 (a multiple of the realised PnL; 0: every close with a positive peak)", where,
        )  # fmt: skip
        boost = settings.number(cfg, "her.priority_boost", lambda v: v >= 1,
                                ">= 1 (a multiple of max priority)", where)  # fmt: skip
        if not variant.forward:
            return cls(variant, threshold, boost, 0, 0)
        lookahead = settings.integer(cfg, "her.lookahead", lambda v: v >= 1,
                                     ">= 1 (env steps)", where)  # fmt: skip
        auto = OmegaConf.select(cfg, "her.closed_ring") == "auto"
        if auto:
            B = settings.integer(cfg, "env.num_envs", lambda v: v >= 1, ">= 1", "conf/env/")
            ring = ring_for(B, lookahead)
        else:
            ring = settings.integer(cfg, "her.closed_ring", lambda v: v >= 1 and not v & (v - 1),
                                    "that is a power of two, or auto", where)  # fmt: skip
        limit = settings.number(
            cfg, "her.max_overwritten", lambda v: 0 <= v <= 1,
            "in [0, 1] (the share of closed trades forward HER may lose unjudged)", where,
        )  # fmt: skip
        return cls(variant, threshold, boost, lookahead, ring, auto, limit)


def array_sizes(cfg: HerConfig, num_envs: int, obs_dim: int) -> dict[str, tuple[int, Any]]:
    """HER's device arrays by name, each as (elements, dtype): what `Hindsight` allocates and
    the memory estimate counts (per env, the trade tracking state and the counters; with
    forward HER, the ring of closed trades and its push state)."""
    B, R, H = num_envs, cfg.closed_ring, obs_dim
    out = {k: (B * her.RING if k == "mid_ring" else B, dt) for k, dt in ENV_STATE.items()}
    out["counters"] = (her.COUNTERS, U64)
    if cfg.forward:
        sizes = {"R": R, "R*H": R * H}
        out |= {k: (sizes[n], dt) for k, (dt, n) in her.RING_ARRAYS.items()}
        out["ring_state"] = (per.STATE_WORDS, U64)
        out["ring_lookback"] = (-(-B // her.BLOCK), U64)
    return out


class Hindsight:
    """HER state and kernels for one run's environment and replay."""

    def __init__(
        self,
        cfg: HerConfig,
        env: Environment,
        replay: Replay,
        runtime: KernelRuntime,
        isv: DeviceIsv,
    ) -> None:
        """The kernels read the numbers of the parts HER works with from `isv`: the replay's
        alpha, the learner's gamma (the synthetic one-step transitions' discount where the
        replay stores one per transition) and the env's lot x multiplier."""
        self.cfg, self.env, self.replay, self.runtime, self.isv = cfg, env, replay, runtime, isv
        B, H, R = env.num_envs, env.obs_dim, cfg.closed_ring
        if cfg.forward and R < B:
            raise ConfigError(
                f"her.closed_ring={R} is smaller than env.num_envs={B}: the forward ring must "
                "hold one step's closes; raise her.closed_ring to a power of two >= "
                f"{1 << (B - 1).bit_length()}"
            )
        if len(replay.arrays["lookback"]) < -(-B // her.BLOCK) or replay.max_push < B:
            raise ConfigError(f"the replay must accept pushes of {B} rows for HER")
        be = runtime.backend
        # HER's device state, by name: what the checkpoint saves and a resume writes back
        self.arrays = {k: be.zeros(n, dt) for k, (n, dt) in array_sizes(cfg, B, H).items()}
        at = isv.layout.index_or_absent
        self.slots = {
            "threshold": at(vocab.SLOT_HER_THRESHOLD),
            "boost": at(vocab.SLOT_HER_PRIORITY_BOOST),
            "scale": at(vocab.SLOT_REWARD_SCALE),
            "lookahead": at(vocab.SLOT_HER_FORWARD_LOOKAHEAD),
            **{d: at(slot) for d, slot in DIRECTION_FLAGS.items()},  # the variant's flags
            **{f"{d}_count": at(slot) for d, (slot, _) in STEP_COUNTS.items()},
        }
        lot_mult = env.slots.costs + ENV_COSTS.index("lot_mult")
        self.numbers = {"alpha_idx": replay.alpha_idx, "lot_mult_idx": lot_mult,
                        "gamma_idx": isv.layout.index(vocab.SLOT_GAMMA)}  # fmt: skip
        bind = runtime.bind
        self._track, self._inject = bind(her.TRACK), bind(her.INJECT)
        self._forward = bind(her.FORWARD) if cfg.forward else None
        kernels = (self._track, self._inject, self._forward)
        # each kernel's arrays by name, each from its one part (checked once, here)
        self._arrays = {k.decl.name: self._args(k.decl) for k in kernels if k is not None}

    # --- the kernels, in step order ---
    def _args(self, decl) -> dict[str, Any]:
        """The array arguments of `decl` by name, each from the part that owns it: the env's
        step outputs, the replay's storage and push state, HER's own arrays and the ISV (h_t,
        the step's observation, is given at each launch)."""
        rp = self.replay.arrays
        replay = {"max_leaf": self.replay.max_leaf, "rstate": rp["state"],
                  "rlookback": rp["lookback"], **{k: rp[k] for k in STORAGE},
                  "s_discount": rp.get("s_discount")}  # fmt: skip
        ring = {k: None for k in (*her.RING_ARRAYS, "ring_state", "ring_lookback")}  # NULL
        return arguments(
            decl, env={k: self.env.arrays[k] for k in ENV_INPUTS}, replay=replay,
            her=self.arrays if self.cfg.forward else ring | self.arrays,
            step={"h_t": None, "isv": self.isv.array},
        )  # fmt: skip

    def _scalars(self, decl) -> dict[str, Any]:
        """The scalar arguments of one HER kernel by name, the same for the device and oracle."""
        sl, env, rp, R = self.slots, self.env, self.replay.cfg, self.cfg.closed_ring
        common = {"mask": rp.capacity - 1, **self.numbers, "threshold_idx": sl["threshold"],
                  "boost_idx": sl["boost"], "scale_idx": sl["scale"]}  # fmt: skip
        B, H, S = env.num_envs, env.obs_dim, env.rc_stride
        return {
            her.TRACK.name: {"B": B},
            her.INJECT.name: {"B": B, "H": H, "S": S, "R": R, **common,
                              "count_idx": sl["backward_count"],
                              "backward_idx": sl["backward"], "forward_idx": sl["forward"]},
            her.FORWARD.name: {"W": B, "R": R, "H": H, **common, "lookahead_idx": sl["lookahead"],
                               "count_idx": sl["forward_count"]},
        }[decl.name]  # fmt: skip

    def _launch(self, kernel, h_t: Any, stream: Any) -> None:
        arrays = self._arrays[kernel.decl.name]
        if "h_t" in arrays:
            arrays = arrays | {"h_t": h_t}
        kernel(**arrays, **self._scalars(kernel.decl), stream=stream)

    def track(self, stream: Any = None) -> None:
        """Step 6: follow every env's trade (after the env step)."""
        self._launch(self._track, None, stream)

    def inject(self, h_t: Any, stream: Any = None) -> None:
        """Step 8: backward synthetic transitions for this step's closes; their forward-ring
        entries."""
        self._launch(self._inject, h_t, stream)

    def forward(self, h_t: Any, stream: Any = None) -> None:
        """Step 9: judge the ring's trades that come due."""
        if self.cfg.forward:
            self._launch(self._forward, h_t, stream)

    def totals(self) -> dict[str, int]:
        """Steps tracked and synthetic transitions pushed so far; with forward HER, what became
        of the closed trades it was given (device->host reads)."""
        c = self.runtime.backend.download(self.arrays["counters"])
        out = {
            "steps": int(c[her.STEP]),
            "backward": int(c[her.BACKWARD_TOTAL]),
            "forward": int(c[her.FORWARD_TOTAL]),
        }
        if self.cfg.forward:
            head = self.runtime.backend.download(self.arrays["ring_state"])[per.HEAD]
            out |= {"closes": int(head), **{k: int(c[w]) for k, w in her.FATES.items()}}
        return out

    # --- audit: the GPU against the oracle on the same inputs ---
    def audit_track(self) -> dict[str, int]:
        """Track on the device and on the oracle (same inputs); mismatching elements per kernel."""
        with self.runtime.auditing([her.TRACK.name]) as audit:
            self.track()
        return audit.mismatches

    def audit_inject_forward(self, h_t: Any) -> dict[str, int]:
        """Inject (and forward) audited the same way; mismatching elements per kernel."""
        with self.runtime.auditing(KERNELS) as audit:
            self.inject(h_t)
            self.forward(h_t)
        return audit.mismatches


def hindsight_for(
    cfg: DictConfig, env: Environment, replay: Replay, runtime: KernelRuntime, isv: DeviceIsv
) -> Hindsight | None:
    """The run's Hindsight, or None with her='off' (nothing allocated, nothing launched)."""
    her_cfg = HerConfig.from_cfg(cfg)
    if her_cfg is None:
        return None
    return Hindsight(her_cfg, env, replay, runtime, isv)
