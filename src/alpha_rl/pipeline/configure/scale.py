"""The reward scale: `reward.scale: auto` resolved from the market's training ticks.

Rewards are money (price move x env.multiplier x env.lot), so their size changes by orders of
magnitude between markets while the Huber threshold `agent.huber_kappa` and the learning rate,
in reward units, stay fixed. `auto` sets

    reward.scale = 1 / (mean |mid_{t+1} - mid_t| x env.multiplier x env.lot)

over the training part of the book (never the held-out part; steps across a session gap, which
no env takes, left out), so a typical step's mark-to-market reward of a held position is of size
1 on any market. It is computed once, deterministically: runs that share a market and its
training window resolve the same scale. A number fixes the scale instead.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
from omegaconf import DictConfig, OmegaConf, open_dict

from alpha_rl import settings
from alpha_rl.env import EnvConfig
from alpha_rl.errors import ConfigError, MarketDataError
from alpha_rl.kernels.reward import has_aux_align
from alpha_rl.market import Market, Validation, load_market
from alpha_rl.market.book import Book
from alpha_rl.portable import mean
from alpha_rl.settings import F32_MAX

log = logging.getLogger("alpha_rl")
AUTO = "auto"
F32_TINY = float(np.finfo(np.float32).tiny)  # float32's smallest normal number


@dataclass(frozen=True)
class RewardScale:
    """The scale a run uses and the numbers it came from."""

    value: float
    auto: bool
    mean_move: float  # mean |mid change| per step over the training ticks (price units)
    lot_mult: float  # env.multiplier x env.lot (money per price unit)
    moves: int  # steps averaged

    @property
    def typical_move(self) -> float:
        """Money a held position gains or loses in a typical step: mean move x lot_mult."""
        return self.mean_move * self.lot_mult

    @property
    def typical_reward(self) -> float:
        """|reward| of a typical step of a held position: the typical move x the scale."""
        return self.typical_move * self.value

    def describe(self, currency: str) -> str:
        """One log line: the scale and where it came from."""
        move = (f"mean |mid move| {self.mean_move:.6g} {currency} per step over {self.moves} "
                f"training steps x env.multiplier x env.lot {self.lot_mult:g}")  # fmt: skip
        if self.auto:
            return (f"reward.scale=auto: {self.value:.6g} = 1 / ({move} = "
                    f"{self.typical_move:.6g} {currency}); a typical step's reward "
                    "is 1")  # fmt: skip
        return (f"reward.scale={self.value:g} (fixed): a typical step's reward is "
                f"{self.typical_reward:.4g} ({move})")  # fmt: skip


def scale_setting(cfg: DictConfig) -> float | None:
    """`reward.scale` checked: None for auto, else the number (> 0); ConfigError otherwise."""
    value = OmegaConf.select(cfg, "reward.scale")
    if value == AUTO:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(
            f"reward.scale={value!r} must be auto (from the market's training ticks) or a "
            "number > 0 (see conf/reward/stride6.yaml)"
        )
    if not settings.representable(value):
        raise ConfigError(
            f"reward.scale={value!r} must be auto or a finite number > 0; the kernels compute "
            f"in float32, whose largest magnitude is {F32_MAX:.4g} (see conf/reward/stride6.yaml)"
        )
    return float(value)


def mean_move(train: Book) -> tuple[float, int]:
    """Mean |mid_{t+1} - mid_t| over the steps of the training book that stay in a session."""
    moves = np.abs(np.diff(train.mid))
    keep = np.ones(moves.size, dtype=bool)
    keep[train.breaks - 1] = False  # the step from a session's last tick into the next session
    moves = moves[keep]
    return (float(mean(moves)) if moves.size else 0.0), int(moves.size)


def reward_scale(cfg: DictConfig, train: Book) -> RewardScale:
    """The run's reward scale from `reward.scale` and the training book; logged, with a warning
    when a typical step's |reward| is outside `reward.typical_range` x `agent.huber_kappa`."""
    fixed = scale_setting(cfg)
    lot_mult = float(cfg.env.multiplier) * float(cfg.env.lot)
    move, count = mean_move(train)
    if not count and train.breaks.size:  # every training tick a session of its own
        raise MarketDataError(
            f"{train.source}: market.session_gap leaves no step within a session among the "
            f"{train.T} training ticks ({train.breaks.size + 1} sessions of 1 tick): there is "
            "nothing to learn; raise market.session_gap above the ticks' spacing, or set it to "
            "null for one session"
        )
    if not move > 0:  # nothing to trade (or the tick vanishes at these prices in float64)
        raise MarketDataError(
            f"{train.source}: the mid price never moves over the {count} training steps: there is "
            "nothing to learn; check the market (its prices, market.start_price)"
        )
    value = fixed if fixed is not None else 1.0 / (move * lot_mult)
    scale = RewardScale(value, fixed is None, move, lot_mult, count)
    log.info("%s", scale.describe(str(cfg.market.currency)))
    warn_if_mis_scaled(scale, cfg)
    warn_if_fees_dominate(scale, cfg)
    return scale


def warn_if_mis_scaled(scale: RewardScale, cfg: DictConfig) -> str | None:
    """Log (and return) a warning when the typical |reward| / huber_kappa is out of range."""
    kappa = float(cfg.agent.huber_kappa)
    lo, hi = (float(x) for x in cfg.reward.typical_range)
    typical = scale.typical_reward
    if lo * kappa <= typical <= hi * kappa:
        return None
    regime = "quadratic" if typical < lo * kappa else "linear"
    message = (f"a typical step's |reward| is {typical:.4g} but agent.huber_kappa is {kappa:g}: "
               f"outside [{lo:g}, {hi:g}] x kappa the Huber loss is all {regime}; set "
               f"reward.scale=auto (or a number near {scale.value / typical * kappa:.4g}) or "
               "change agent.huber_kappa")  # fmt: skip
    log.warning("%s", message)
    return message


def warn_if_fees_dominate(scale: RewardScale, cfg: DictConfig) -> str | None:
    """Log (and return) a warning when one fill's fee is more than `reward.fee_moves_max`
    typical step moves of a position: usually env.multiplier or env.fee_per_lot is not the
    instrument's (the scale normalises the moves, not the fees)."""
    fee = float(cfg.env.fee_per_lot) * float(cfg.env.lot)
    move = scale.typical_move
    limit = float(cfg.reward.fee_moves_max)
    if fee <= limit * move:
        return None
    currency = cfg.market.currency
    message = (f"one fill costs {fee:.4g} {currency} (env.fee_per_lot x env.lot), "
               f"{fee / move:.3g} typical step moves of a position ({move:.4g} {currency}): fees "
               "will dominate the rewards; check env.multiplier (the units of the instrument in "
               "one lot: 100000 for a standard FX lot, 100 for 100 shares) and "
               "env.fee_per_lot")  # fmt: skip
    log.warning("%s", message)
    return message


def with_scale(cfg: DictConfig, scale: RewardScale) -> DictConfig:
    """A copy of `cfg` whose reward.scale is the resolved number (what the ISV slot reads)."""
    out = cfg.copy()
    with open_dict(out):
        out.reward.scale = scale.value
    return out


def check_lot_mult(env: EnvConfig) -> None:
    """Refuse (ConfigError) money settings whose float32 products the kernels cannot hold: the
    money of a 1.0 price move (env.lot x env.multiplier, the kernels' `lot_mult`, outside
    float32's normal range), and a flip's two fees (2 x env.fee_per_lot x env.lot)."""
    lot_mult, fees = env.lot * env.multiplier, 2 * env.fee_per_lot * env.lot
    if not F32_TINY <= lot_mult <= F32_MAX:
        bound = "beyond float32's largest" if lot_mult > F32_MAX else "below float32's smallest"
        limit = F32_MAX if lot_mult > F32_MAX else F32_TINY
        raise ConfigError(
            f"env.lot x env.multiplier = {env.lot:g} x {env.multiplier:g} = {lot_mult:.4g} (the "
            f"money a 1.0 price move pays a position) is {bound} {limit:.4g}: the kernels "
            "compute PnL in float32; set env.lot and env.multiplier for the instrument (see "
            "conf/env/)"
        )
    if fees > F32_MAX:
        raise ConfigError(
            f"2 x env.fee_per_lot x env.lot = 2 x {env.fee_per_lot:g} x {env.lot:g} = "
            f"{fees:.4g} (a flip's two fills) is beyond float32's largest {F32_MAX:.4g}: the "
            "kernels compute fees in float32; lower env.fee_per_lot (see conf/env/)"
        )


def price_range(market: Market) -> float:
    """The largest price move a trade can make on either part of the market: the part's largest
    best ask less its smallest best bid (price units)."""
    return max(float(b.ask_px[:, 0].max() - b.bid_px[:, 0].min())
               for b in (market.train, market.heldout))  # fmt: skip


def check_pnl(cfg: DictConfig, market: Market) -> float:
    """The largest |PnL| of a trade (price range x env.multiplier x env.lot), refused
    (ConfigError) beyond float32's range, in which the kernels compute it."""
    lot_mult = float(cfg.env.lot) * float(cfg.env.multiplier)
    move = price_range(market)
    pnl = move * lot_mult
    if pnl > F32_MAX:
        raise ConfigError(
            f"a trade's PnL can reach {move:.6g} {cfg.market.currency} (the market's largest ask "
            f"less its smallest bid) x env.multiplier x env.lot {lot_mult:.4g} = {pnl:.4g}, "
            f"beyond float32's largest {F32_MAX:.4g}: the kernels compute PnL in float32; set "
            "env.multiplier and env.lot for the instrument (see conf/env/)"
        )
    return pnl


def check_rewards(cfg: DictConfig, pnl: float, scale: RewardScale) -> None:
    """Refuse (ConfigError) a reward scale or a step's |reward| beyond float32's range: the
    bound is sum_c |w_c| x the largest |c_c| (PnL moves of up to `pnl`, a flip's two fees, the
    penalties kappa, lambda and rho, c6 at beta.scale) x reward.scale (cuda/experience.cu)."""
    env, rw = cfg.env, cfg.reward
    if scale.value > F32_MAX:
        raise ConfigError(
            f"reward.scale resolves to {scale.value:.4g}, beyond float32's largest "
            f"{F32_MAX:.4g} (the ISV slot reward_scale is float32); set reward.scale to a number "
            "or check env.multiplier and env.lot (see conf/reward/)"
        )
    fees = 2 * float(env.fee_per_lot) * float(env.lot)
    parts = [pnl, pnl, fees, float(rw.opp_cost_kappa) * pnl,
             float(rw.inventory_lambda) * float(env.lot), float(rw.drawdown_rho) * pnl]  # fmt: skip
    weights = [abs(float(w)) for w in rw.weights]
    if has_aux_align(int(rw.stride)):
        steered = cfg.beta.controller == "share"  # w_aux_align moves up to beta.w_max
        weights.append(abs(float(cfg.beta.w_max if steered else rw.aux_align_weight)))
        parts.append(float(cfg.beta.scale) * pnl)
    raw = math.fsum(w * part for w, part in zip(weights, parts, strict=True))
    if raw * scale.value > F32_MAX:
        raise ConfigError(
            f"a step's |reward| can reach {raw:.4g} (reward.weights x components of up to "
            f"{max(parts):.4g} {cfg.market.currency}: PnL, fees, penalties) x reward.scale "
            f"{scale.value:.4g} = {raw * scale.value:.4g}, beyond float32's largest "
            f"{F32_MAX:.4g}: the kernels compute rewards in float32; lower reward.scale or "
            "reward.weights (see conf/reward/)"
        )


def check_eval_steps(cfg: DictConfig, market: Market) -> None:
    """Refuse eval.steps beyond the held-out part's ticks: each evaluation env would step
    through the same held-out ticks again and again (episodes restart at its start ticks)."""
    steps, ticks = int(cfg.eval.steps), market.heldout.T
    if steps > ticks:
        raise ConfigError(
            f"eval.steps={steps} is more than the held-out part's {ticks} ticks "
            f"({market.fold.describe(market.book.timestamps)}): an evaluation would step through "
            f"them about {steps / ticks:.3g} times over; set eval.steps <= {ticks} (see "
            "conf/eval/)"
        )


class Markets:
    """The markets of a pack's runs, each built once per (market config, seed, fold) and shared
    by every run that asks for the same one: her_components' 5 seeds x 4 arms build 5 markets,
    not 20. A shared market's arrays are read-only, so a run that wrote into one would fail
    loudly rather than change another run's market."""

    def __init__(self) -> None:
        self._built: dict[tuple[str, int, str], Market] = {}

    def load(self, market: DictConfig, seed: int, validation: Validation) -> Market:
        """`load_market(market, seed, validation)`, or the one built before for the same."""
        key = (OmegaConf.to_yaml(market, resolve=True), seed, repr(validation))
        if key not in self._built:
            built = load_market(market, seed, validation)
            for book in (built.book, built.train, built.heldout):
                for value in vars(book).values():
                    if isinstance(value, np.ndarray):
                        value.flags.writeable = False
            self._built[key] = built
        return self._built[key]


def market_and_config(cfg: DictConfig, seed: int, validation: Validation,
                      markets: Markets | None = None) -> tuple[Market, DictConfig]:  # fmt: skip
    """The run's market (from `markets` when given: a pack's) and its config with the values
    resolved from it (reward.scale); refused (ConfigError) when the evaluation outruns the
    held-out part or a reward overflows float32."""
    if markets is None:
        market = load_market(cfg.market, seed, validation)
    else:
        market = markets.load(cfg.market, seed, validation)
    check_eval_steps(cfg, market)
    pnl = check_pnl(cfg, market)
    scale = reward_scale(cfg, market.train)
    check_rewards(cfg, pnl, scale)
    return market, with_scale(cfg, scale)
