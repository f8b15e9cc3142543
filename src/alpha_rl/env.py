"""The batched trading environment on either backend: buffers, reset, perceive, step, diagnostics.

`Environment` owns the device copy of the book, the per-env state and every output of a step,
and launches the perception, experience and reward-diagnostic kernels on them (DESIGN §3, §4,
and steps 1, 3, 4, 5 of §9). Nothing here copies device data to the host except `reset` (an
upload) and the explicit readers `harvest_trade_stats` and `read_decomp` meant for log points.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import reduce
from operator import add
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from alpha_rl import settings
from alpha_rl import vocabulary as vocab
from alpha_rl.backend.base import Backend, DeviceArray
from alpha_rl.errors import ConfigError
from alpha_rl.isv import ABSENT, DeviceIsv, IsvLayout
from alpha_rl.kernels import experience, perception, reward
from alpha_rl.kernels.experience import start_index, start_ticks
from alpha_rl.kernels.perception import (
    EXTRA_FEATURES,
    MAX_FEATURES,
    feature_count,
    projection_weights,
)
from alpha_rl.kernels.reward import DECOMP_ROWS, block_sums, blocks, decomp_cols, has_aux_align
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.market.book import Book
from alpha_rl.portable import total
from alpha_rl.rng import seed_on_device

F32, I32 = np.float32, np.int32


@dataclass(frozen=True)
class PerceptionConfig:
    """Settings of the observation h_t (conf/env/*.yaml: env.perception)."""

    horizons: tuple[int, ...]
    pnl_scale_ticks: float
    time_scale_steps: float
    projection: bool
    hidden_dim: int

    @property
    def features(self) -> int:
        return feature_count(len(self.horizons))

    @property
    def dim(self) -> int:
        """H, the width of h_t."""
        return self.hidden_dim if self.projection else self.features


MAX_RULE_STEPS = 1 << 20  # the trading rules' ticks and steps: whole numbers exact in float32


@dataclass(frozen=True)
class EnvConfig:
    """Settings of the environment (conf/env/*.yaml)."""

    num_envs: int
    lot: float
    multiplier: float
    fee_per_lot: float
    perception: PerceptionConfig
    decision_interval: int = 1  # the agent acts at ticks t % decision_interval == 0, else holds
    min_hold: int = 0  # steps a trade is held before it may be closed or flipped

    @classmethod
    def from_cfg(cls, node: DictConfig) -> EnvConfig:
        """Typed and range-checked `env` config; errors name the key, the value and the range."""
        env = settings.section(node, "env")
        where = "conf/env/"

        def positive(key: str, unit: str) -> float:
            return settings.number(env, f"env.{key}", lambda v: v > 0, f"> 0 ({unit})", where)

        return cls(
            num_envs=settings.integer(env, "env.num_envs", lambda v: v >= 1, ">= 1", where),
            lot=positive("lot", "lots per position"),
            multiplier=positive("multiplier", "USD per 1.0 price move per lot"),
            fee_per_lot=settings.number(
                env, "env.fee_per_lot", lambda v: v >= 0, ">= 0 (USD)", where
            ),
            perception=PerceptionConfig(
                horizons=_horizons(env, where),
                pnl_scale_ticks=positive("perception.pnl_scale_ticks", "ticks"),
                time_scale_steps=positive("perception.time_scale_steps", "steps"),
                projection=settings.flag(env, "env.perception.projection", where),
                hidden_dim=settings.integer(
                    env, "env.perception.hidden_dim", lambda v: v >= 1, ">= 1", where
                ),
            ),
            decision_interval=_rule(env, "decision_interval", 1, "ticks", where),
            min_hold=_rule(env, "min_hold", 0, "steps", where),
        )


def _rule(env: DictConfig, key: str, least: int, unit: str, where: str) -> int:
    """A trading rule's whole number of ticks or steps, least..MAX_RULE_STEPS."""
    return settings.integer(env, f"env.{key}", lambda v: least <= v <= MAX_RULE_STEPS,
                            f"in {least}..{MAX_RULE_STEPS} ({unit})", where)  # fmt: skip


def _horizons(env: DictConfig, where: str) -> tuple[int, ...]:
    """env.perception.horizons: 1..MAX_FEATURES - EXTRA_FEATURES whole numbers >= 1 (ticks)."""
    key, most = "env.perception.horizons", MAX_FEATURES - EXTRA_FEATURES
    value = OmegaConf.select(env, key)
    shown = OmegaConf.to_container(value) if OmegaConf.is_list(value) else value
    ok = isinstance(shown, list) and 1 <= len(shown) <= most
    if not (ok and all(type(h) is int and h >= 1 for h in shown)):
        raise ConfigError(f"{key}={shown!r} must be a list of 1..{most} whole numbers >= 1 "
                          f"(ticks) (see {where})")  # fmt: skip
    return tuple(shown)


@dataclass
class DeviceBook:
    """The book on the device: float32 [T*L] arrays, prices as offsets from `price_ref`."""

    bid_px: DeviceArray
    ask_px: DeviceArray
    bid_sz: DeviceArray
    ask_sz: DeviceArray
    session_first: DeviceArray  # [T] int32: per tick, the first tick of its session
    session_last: DeviceArray  # [T] int32: per tick, the last tick of its session
    T: int
    L: int
    tick: float
    price_ref: float  # a multiple of the tick near the first mid (USD)

    @classmethod
    def upload(cls, book: Book, backend: Backend) -> DeviceBook:
        tick = float(book.tick_size)
        ref = round(float(book.mid[0]) / tick) * tick
        as_offsets = lambda px: (np.asarray(px, np.float64) - ref).astype(F32).ravel()  # noqa: E731
        as_sizes = lambda sz: np.asarray(sz, F32).ravel()  # noqa: E731
        return cls(
            backend.upload(as_offsets(book.bid_px)),
            backend.upload(as_offsets(book.ask_px)),
            backend.upload(as_sizes(book.bid_sz)),
            backend.upload(as_sizes(book.ask_sz)),
            backend.upload(book.session_first()),
            backend.upload(book.session_last()),
            book.T,
            book.L,
            tick,
            ref,
        )


STATE_I32 = ("cursor", "pos", "trade_len", "episode")
STATE_F32 = ("entry_px", "entry_mid", "peak_mid")
OUT_F32 = ("reward_raw", "reward", "done", "fill_mid", "post_mid")
OUT_U8 = ("opened", "closed", "stored")
OUT_I32 = ("prev_dir", "closed_dir", "eff_action")
STATS = ("stat_trades", "stat_realised", "stat_available", "stat_duration")
CLEARED_AT_RESET = ("pos", "trade_len", "episode", *STATE_F32, *STATS)  # zero in a new episode 0


@dataclass(frozen=True)
class TradeStats:
    """Closed trades since the last harvest, summed over envs."""

    trades: int
    realised: float  # USD
    available: float  # USD: best mid during each trade vs its entry mid, >= 0 per trade
    duration: float  # steps

    @classmethod
    def summed(cls, accumulators: Mapping[str, np.ndarray]) -> TradeStats:
        """The host copies of the STATS accumulators summed over envs (float64)."""
        sums = [float(total(np.asarray(accumulators[k]), dtype=np.float64)) for k in STATS]
        return cls(int(sums[0]), sums[1], sums[2], sums[3])

    @classmethod
    def total(cls, parts: Sequence[TradeStats]) -> TradeStats:
        """The sum of `parts` (harvests one after another), figure by figure, added one by one
        in their order (not sum(): Python 3.12's compensates floats' rounding, 3.11's does not,
        and a run's figures would depend on the Python)."""
        return cls(*(reduce(add, (getattr(p, f.name) for p in parts), 0) for f in fields(cls)))

    @property
    def capture_ratio(self) -> float:
        """sum realised / sum available (NaN when nothing was available)."""
        return self.realised / self.available if self.available > 0 else float("nan")


@dataclass
class SlotIndices:
    """The ISV slots the environment's kernels read and write (-1: absent)."""

    weights: int
    scale: int
    kappa: int
    lam: int
    rho: int
    w_aux: int
    beta_scale: int
    ema_alpha: int
    component_ema: int
    abs_ema: int
    mag_ratio: int
    aux_align_ema: int
    costs: int  # lot, lot x multiplier, fee per lot (the env part's own numbers)
    trading: int  # the decision interval and the minimum holding steps (ENV_TRADING)
    perception: int  # 1 / pnl_scale_ticks, 1 / time_scale_steps

    @classmethod
    def from_layout(cls, layout: IsvLayout, rc_stride: int) -> SlotIndices:
        at = layout.index_or_absent
        stride7 = lambda name: at(name) if has_aux_align(rc_stride) else ABSENT  # noqa: E731
        return cls(
            at(vocab.SLOT_REWARD_WEIGHT),
            at(vocab.SLOT_REWARD_SCALE),
            at(vocab.SLOT_OPP_COST_KAPPA),
            at(vocab.SLOT_INVENTORY_LAMBDA),
            at(vocab.SLOT_DRAWDOWN_RHO),
            stride7(vocab.SLOT_W_AUX_ALIGN),
            stride7(vocab.SLOT_AUX_ALIGN_SCALE),
            at(vocab.SLOT_REWARD_EMA_ALPHA),
            at(vocab.SLOT_REWARD_COMPONENT_EMA),
            at(vocab.SLOT_REWARD_ABS_EMA),
            at(vocab.SLOT_REWARD_MAG_RATIO),
            stride7(vocab.SLOT_REWARD_AUX_ALIGN_EMA),
            layout.index(vocab.SLOT_ENV_COSTS),
            layout.index(vocab.SLOT_ENV_TRADING),
            layout.index(vocab.SLOT_PERCEPTION_SCALES),
        )


@dataclass
class Environment:
    """B environments over one book; see the module docstring."""

    cfg: EnvConfig
    book: Book
    runtime: KernelRuntime
    isv: DeviceIsv
    seed: int
    rc_stride: int
    arrays: dict[str, DeviceArray] = field(init=False)

    def __post_init__(self) -> None:
        be, n = self.backend, self.cfg.num_envs
        self.device_book = DeviceBook.upload(self.book, be)
        history = max(self.cfg.perception.horizons)
        self.starts = start_ticks(self.book.session_last(), history)
        if self.starts.size == 0:
            raise ConfigError(
                f"{self.book.source}: {self.book.T} ticks leave no tick to start an episode at: "
                f"a start needs {history} ticks of history (the longest perception horizon) and "
                "two more of its session; use a longer series (or a larger market.session_gap: "
                "fewer, longer sessions)"
            )
        self.device_starts = be.upload(self.starts)
        self.run_seed = seed_on_device(be, self.seed)
        self.slots = SlotIndices.from_layout(self.isv.layout, self.rc_stride)
        # the env's device state, by name: what the checkpoint saves and a resume writes back
        self.arrays = {name: be.zeros(n, I32) for name in STATE_I32 + OUT_I32}
        self.arrays |= {name: be.zeros(n, F32) for name in STATE_F32 + OUT_F32 + STATS}
        self.arrays |= {name: be.zeros(n, np.uint8) for name in OUT_U8}
        self.arrays["rc"] = be.zeros(n * self.rc_stride, F32)
        self.arrays["decomp"] = be.zeros(DECOMP_ROWS * decomp_cols(self.rc_stride), F32)
        p = self.cfg.perception
        self.horizons = be.upload(np.asarray(p.horizons, I32))
        self.proj_w = self.proj_b = None
        if p.projection:
            w, b = projection_weights(self.seed, p.features, p.hidden_dim)
            self.proj_w, self.proj_b = be.upload(w), be.upload(b)
        bind = self.runtime.bind
        self._observe = bind(perception.OBSERVE)
        self._step = bind(experience.ENV_STEP)
        self._diagnostics = bind(reward.DIAGNOSTICS)
        # its scratch (per-block sums, blocks-done counter): not state, never checkpointed
        self._diag_partial = be.zeros(blocks(n) * block_sums(self.rc_stride), F32)
        self._diag_done = be.zeros(1, np.uint64)
        self.reset()

    @property
    def backend(self) -> Backend:
        return self.runtime.backend

    @property
    def num_envs(self) -> int:
        return self.cfg.num_envs

    @property
    def obs_dim(self) -> int:
        return self.cfg.perception.dim

    def reset(self, cursors: np.ndarray | None = None) -> None:
        """Every env flat in episode 0 at its seeded start tick (or at `cursors` [B], a replay of
        chosen ticks); statistics cleared."""
        n = self.num_envs
        cursors = np.asarray(self.seeded_cursors() if cursors is None else cursors, dtype=I32)
        if cursors.shape != (n,) or cursors.min() < 0 or cursors.max() > self.book.T - 2:
            raise ConfigError(f"reset: cursors must be [{n}] ticks in 0..{self.book.T - 2}")
        self.backend.write(self.arrays["cursor"], cursors)
        for name in CLEARED_AT_RESET:
            self.backend.fill(self.arrays[name], 0)

    def restart(self, cursors: DeviceArray, stream: Any) -> None:
        """`reset` to the device-held `cursors` [B] int32, queued on `stream` (no host copy:
        a CUDA graph may capture it)."""
        self.backend.copy(self.arrays["cursor"], cursors, stream)
        for name in CLEARED_AT_RESET:
            self.backend.fill(self.arrays[name], 0, stream)

    def seeded_cursors(self) -> np.ndarray:
        """[B] int64: the tick each env starts episode 0 at (its seeded draw of the start table)."""
        n = self.num_envs
        first = start_index(self.seed, np.arange(n), np.zeros(n, np.int64), self.starts.size)
        return self.starts[first].astype(np.int64)

    def perceive(self, h: DeviceArray, stream: Any = None) -> None:
        """h [B * H] float32 <- the observation of every env's current state."""
        a, book, p = self.arrays, self.device_book, self.cfg.perception
        self._observe(
            bid_px=book.bid_px, ask_px=book.ask_px, bid_sz=book.bid_sz, ask_sz=book.ask_sz,
            session_first=book.session_first,
            **{k: a[k] for k in ("cursor", "pos", "trade_len", "entry_px", "peak_mid")},
            horizons=self.horizons, proj_w=self.proj_w, proj_b=self.proj_b, h=h,
            isv=self.isv.array, n=self.num_envs, T=book.T, L=book.L, K=len(p.horizons), H=p.dim,
            tick=book.tick, scales_idx=self.slots.perception, stream=stream,
        )  # fmt: skip

    def step(self, action: DeviceArray, aux_prob: DeviceArray | None = None, stream: Any = None):
        """Apply action [B] int32 (and the aux head's p_up [B], or None); outputs in `arrays`."""
        a, book, s = self.arrays, self.device_book, self.slots
        self._step(
            bid_px=book.bid_px, ask_px=book.ask_px, session_last=book.session_last,
            starts=self.device_starts, action=action, aux_prob=aux_prob, isv=self.isv.array,
            **{k: a[k] for k in (*STATE_I32, *STATE_F32, *OUT_F32, *OUT_U8, *OUT_I32, *STATS)},
            rc=a["rc"], n=self.num_envs, T=book.T, L=book.L, tick0=self.book.start,
            costs_idx=s.costs,
            trading_idx=s.trading,
            w_idx=s.weights, scale_idx=s.scale,
            kappa_idx=s.kappa, lambda_idx=s.lam, rho_idx=s.rho, w_aux_idx=s.w_aux,
            beta_scale_idx=s.beta_scale, run_seed=self.run_seed, n_starts=self.starts.size,
            stream=stream,
        )  # fmt: skip

    def reward_diagnostics(self, stream: Any = None) -> None:
        """Step 5, one launch: component EMAs, aux-align EMA (stride 7), magnitude ratios, the
        decomposition."""
        a, s = self.arrays, self.slots
        self._diagnostics(
            rc=a["rc"], reward=a["reward"], prev_dir=a["prev_dir"], isv=self.isv.array,
            diag=a["decomp"], partial=self._diag_partial, done=self._diag_done, n=self.num_envs,
            ema_idx=s.component_ema, aux_ema_idx=s.aux_align_ema, abs_idx=s.abs_ema,
            ratio_idx=s.mag_ratio, alpha_idx=s.ema_alpha, stream=stream,
        )  # fmt: skip

    def harvest_trade_stats(self) -> TradeStats:
        """Read and clear the closed-trade accumulators (a device->host copy: log points only)."""
        stats = TradeStats.summed({k: self.backend.download(self.arrays[k]) for k in STATS})
        for k in STATS:
            self.backend.fill(self.arrays[k], 0)
        return stats

    def read_decomp(self) -> np.ndarray:
        """The last reward decomposition as [3 (flat, long, short), 4 + RC_STRIDE] (a host copy)."""
        table = self.backend.download(self.arrays["decomp"])
        return table.reshape(DECOMP_ROWS, decomp_cols(self.rc_stride))
