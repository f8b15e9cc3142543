"""The held-out ledger: what a sequence of positions earns and what it pays, env by env and step by
step, on the host in float64, for the agent and for the trivial baselines alike.

A step of env b at tick t holds position d (-1, 0, +1) and moves to `target` at the touch of t, as
the env kernel does (cuda/experience.cu): a close and an open are one fill each (a flip is two),
each fill pays half the spread of tick t (a long opens at the ask and closes at the bid) and
`env.fee_per_lot` per lot; the target is held from t to t + 1 and earns its mid move:
    gross  = target * (mid_{t+1} - mid_t) * lot * multiplier
    spread = fills * (ask_t - bid_t) / 2 * lot * multiplier
    fees   = fills * fee_per_lot * lot
    net    = gross - spread - fees
A trade's net over its life is the kernel's realised PnL (exit - entry at the touch, its
`stat_realised`) less its two fees. A position still open after the last step is closed at the
touch of the tick it stands at (a liquidation: its half spread and fee charged), so that every
figure is a whole round trip and a buy-and-hold over the window is valued like the agent.

The ticks each env visits do not depend on its actions (a session's end jumps to a seeded start,
DESIGN §3), so `tick_path` computes them on the host, and the baselines trade the agent's very
windows without an environment.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from alpha_rl.kernels.experience import start_index
from alpha_rl.market.book import Book
from alpha_rl.rng import Stream, draw_u32, draw_uniform

# units of every ledger figure, logged as params (`unit/<metric>`) so a reader knows what sums
UNITS = {
    "pnl": "{ccy}, net of spread and fees, summed over the eval envs and steps",
    "pnl_gross": "{ccy}, mid-to-mid, summed over the eval envs and steps",
    "cost_spread": "{ccy}, half the spread per fill, summed (>= 0)",
    "cost_fees": "{ccy}, env.fee_per_lot per lot per fill, summed (>= 0)",
    "pnl_per_env_kstep": "{ccy} per env per 1,000 steps (eval/pnl / envs / steps x 1000)",
    "turnover": "fills per env per 1,000 steps (a flip is two fills)",
    "exposure": "share of env-steps holding a position, 0..1",
    "max_drawdown": "{ccy}, the deepest fall of the summed net equity from its running peak",
    "hit_rate": "share of round trips (open to close, or to the end) with net PnL > 0, 0..1",
}


@dataclass(frozen=True)
class TickPath:
    """The ticks of `envs` envs over `steps` steps: `ticks[s]` [B] where step s trades, `ticks[S]`
    where the envs stand after the last one; `last[s]` [B] where step s is a session's forced
    close (the env goes flat whatever the policy says)."""

    ticks: np.ndarray  # [S + 1, B] int64
    last: np.ndarray  # [S, B] bool

    @property
    def steps(self) -> int:
        return self.last.shape[0]

    @property
    def envs(self) -> int:
        return self.last.shape[1]


def tick_path(session_last: np.ndarray, starts: np.ndarray, seed: int, cursors: np.ndarray,
              steps: int) -> TickPath:  # fmt: skip
    """The env kernel's cursor walk from `cursors` [B] (episode 0 of each env): the next tick, or
    at a session's last step a fresh seeded start (Environment.reset, experience_env_step)."""
    session_last = np.asarray(session_last, np.int64)
    n = len(cursors)
    ticks = np.empty((steps + 1, n), np.int64)
    last = np.empty((steps, n), bool)
    t, episode, envs = np.asarray(cursors, np.int64).copy(), np.zeros(n, np.int64), np.arange(n)
    for s in range(steps):
        ticks[s] = t
        last[s] = t + 1 >= session_last[t]
        t = t + 1
        ended = np.flatnonzero(last[s])
        if ended.size:
            episode[ended] += 1
            t[ended] = starts[start_index(seed, envs[ended], episode[ended], starts.size)]
    ticks[steps] = t
    return TickPath(ticks, last)


@dataclass(frozen=True)
class Costs:
    """What a position is worth and what a fill costs (env.lot, env.multiplier, env.fee_per_lot)."""

    lot: float
    multiplier: float
    fee_per_lot: float

    @property
    def lot_mult(self) -> float:
        return self.lot * self.multiplier

    @property
    def fee(self) -> float:
        return self.fee_per_lot * self.lot


@dataclass(frozen=True)
class LedgerStats:
    """One policy's ledger over an evaluation (UNITS)."""

    pnl: float
    pnl_gross: float
    cost_spread: float
    cost_fees: float
    realised: float  # closed trades' exit - entry at the touch, before fees (the kernel's sum)
    fills: float  # counts (whole, but for the random baseline's mean over its walks)
    exposed: float  # env-steps holding a position
    round_trips: float
    wins: float
    max_drawdown: float
    intervals: np.ndarray  # net PnL per `window` steps, summed over envs
    equity: np.ndarray  # [S] the summed net PnL after each step (the liquidation in the last)
    envs: int
    steps: int
    window: int  # steps per interval

    @property
    def env_steps(self) -> int:
        return self.envs * self.steps

    @property
    def turnover(self) -> float:
        return self.fills / self.env_steps * 1000.0

    @property
    def exposure(self) -> float:
        return self.exposed / self.env_steps

    @property
    def hit_rate(self) -> float:
        return self.wins / self.round_trips if self.round_trips else math.nan

    @property
    def pnl_per_env_kstep(self) -> float:
        return self.pnl / self.env_steps * 1000.0

    def metrics(self) -> dict[str, float]:
        """The figures by UNITS name."""
        return {name: float(getattr(self, name)) for name in UNITS}


class Ledger:
    """Positions in, money out; see the module docstring. `step` once per env step with the
    ticks the envs trade at and their target positions, then `close`."""

    def __init__(self, book: Book, costs: Costs, envs: int, window: int) -> None:
        self.bid = np.asarray(book.bid_px[:, 0], np.float64)
        self.ask = np.asarray(book.ask_px[:, 0], np.float64)
        self.mid = 0.5 * (self.bid + self.ask)
        self.costs, self.window = costs, window
        self.pos = np.zeros(envs, np.int64)
        self.held = np.zeros(envs, np.float64)  # the open trade's gross less its opening spread
        self.gross = self.spread = self.fees = self.realised = 0.0
        self.fills = self.exposed = self.round_trips = self.wins = 0
        self.net_steps: list[float] = []

    def _fill_cost(self, t: np.ndarray) -> tuple[np.ndarray, float]:
        """Per env, half the spread at tick t in money; the fee of one fill."""
        half = 0.5 * (self.ask[t] - self.bid[t]) * self.costs.lot_mult
        return half, self.costs.fee

    def _close(self, which: np.ndarray, t: np.ndarray) -> float:
        """Close the positions of envs `which` at the touch of `t`; their costs in money."""
        half, fee = self._fill_cost(t)
        half = np.where(which, half, 0.0)
        fills = int(which.sum())
        realised = (self.held - half)[which]  # exit - entry at the touch
        self.realised += float(realised.sum())
        self.round_trips += fills
        self.wins += int((realised - 2.0 * fee > 0).sum())  # net of both fills' fees
        self.held[which] = 0.0
        self.spread += float(half.sum())
        self.fees += fee * fills
        self.fills += fills
        return float(half.sum()) + fee * fills

    def step(self, t: np.ndarray, target: np.ndarray) -> None:
        """Envs at ticks `t` [B] move to `target` [B] (-1, 0, +1) and hold it to t + 1."""
        d, target = self.pos, np.asarray(target, np.int64)
        change = target != d
        cost = self._close(change & (d != 0), t)
        opening = change & (target != 0)
        half, fee = self._fill_cost(t)
        half = np.where(opening, half, 0.0)
        self.held -= half
        n_open = int(opening.sum())
        self.spread += float(half.sum())
        self.fees += fee * n_open
        self.fills += n_open
        cost += float(half.sum()) + fee * n_open
        move = target * (self.mid[t + 1] - self.mid[t]) * self.costs.lot_mult
        self.held += move
        gross = float(move.sum())
        self.gross += gross
        self.exposed += int((target != 0).sum())
        self.pos = target
        self.net_steps.append(gross - cost)

    def close(self, t: np.ndarray) -> LedgerStats:
        """Liquidate what is still open at the touch of `t` [B] (where the envs stand after the
        last step) and sum up. The realised figure keeps closed trades only."""
        realised = self.realised
        open_ = self.pos != 0
        cost = self._close(open_, t)
        self.realised = realised
        if self.net_steps:
            self.net_steps[-1] -= cost
        net = np.asarray(self.net_steps, np.float64)
        equity = np.cumsum(net)
        n = len(net)
        cuts = np.arange(0, n, self.window)
        return LedgerStats(
            pnl=self.gross - self.spread - self.fees, pnl_gross=self.gross,
            cost_spread=self.spread, cost_fees=self.fees, realised=realised, fills=self.fills,
            exposed=self.exposed, round_trips=self.round_trips, wins=self.wins,
            max_drawdown=drawdown(equity),
            intervals=np.add.reduceat(net, cuts) if n else net, equity=equity,
            envs=len(self.pos), steps=n, window=self.window,
        )  # fmt: skip


Policy = Callable[[int, np.ndarray], np.ndarray]  # (step, previous targets [B]) -> targets [B]


def play(book: Book, costs: Costs, path: TickPath, window: int, policy: Policy) -> LedgerStats:
    """`policy` over `path`, forced flat at each session's last step as the env forces it."""
    ledger = Ledger(book, costs, path.envs, window)
    for s in range(path.steps):
        target = np.where(path.last[s], 0, policy(s, ledger.pos))
        ledger.step(path.ticks[s], target)
    return ledger.close(path.ticks[path.steps])


def hold(direction: int) -> Policy:
    """Always `direction` (+1 buy-and-hold, -1 sell-and-hold; re-entered after a session end)."""
    return lambda s, pos: np.full(pos.shape, direction, np.int64)


# the expected fills of one change of a random walk on {-1, 0, +1} that moves to either other
# position with equal chance (its stationary law is uniform): from flat 1, from a side 1 or 2
FILLS_PER_CHANGE = 4.0 / 3.0


def random_walk(seed: int, per_step: float) -> Policy:
    """Changes position with chance `per_step` each step, to one of the two others at random:
    draws of the host RNG's BASELINE stream, index step x 2^32 + env (two words per draw)."""
    p = float(np.clip(per_step, 0.0, 1.0))

    def policy(s: int, pos: np.ndarray) -> np.ndarray:
        index = (np.uint64(s) << np.uint64(33)) | (np.arange(pos.size, dtype=np.uint64) << 1)
        change = draw_uniform(seed, Stream.BASELINE, index) < np.float32(p)
        other = (draw_u32(seed, Stream.BASELINE, index | np.uint64(1)) & 1).astype(np.int64)
        moved = (pos + 2 + other) % 3 - 1  # the two other positions of -1, 0, +1
        return np.where(change, moved, pos)

    return policy


def drawdown(equity: np.ndarray) -> float:
    """The deepest fall of `equity` below its running peak (which starts at 0)."""
    if equity.size == 0:
        return 0.0
    peak = np.maximum.accumulate(np.concatenate([[0.0], equity]))[1:]
    return float((peak - equity).max())


RANDOM_WALKS = 8  # the random baseline is the mean of this many independent walks per env


def matched_random(book: Book, costs: Costs, path: TickPath, window: int, seed: int,
                   turnover: float, walks: int = RANDOM_WALKS) -> LedgerStats:  # fmt: skip
    """The random walk whose turnover (fills per env per 1,000 steps) is the agent's `turnover`:
    its change rate from the walk's expected fills per change, then corrected once by the
    turnover the first pass measured (session ends add fills of their own). Each env's figure
    is the mean of `walks` independent walks over its window (one walk's luck is large)."""
    copies = TickPath(np.tile(path.ticks, (1, walks)), np.tile(path.last, (1, walks)))
    rate = turnover / 1000.0 / FILLS_PER_CHANGE
    stats = play(book, costs, copies, window, random_walk(seed, rate))
    if turnover > 0 and stats.turnover > 0:
        rate *= turnover / stats.turnover
        stats = play(book, costs, copies, window, random_walk(seed, rate))
    return _per_walk(stats, walks)


def _per_walk(stats: LedgerStats, walks: int) -> LedgerStats:
    """The sums of `walks` copies of the envs as the mean copy (counts become means too)."""
    equity = stats.equity / walks
    return dataclasses.replace(
        stats, pnl=stats.pnl / walks, pnl_gross=stats.pnl_gross / walks,
        cost_spread=stats.cost_spread / walks, cost_fees=stats.cost_fees / walks,
        realised=stats.realised / walks, fills=stats.fills / walks,
        exposed=stats.exposed / walks, round_trips=stats.round_trips / walks,
        wins=stats.wins / walks, intervals=stats.intervals / walks, equity=equity,
        max_drawdown=drawdown(equity), envs=stats.envs // walks,
    )  # fmt: skip
