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
from alpha_rl.pipeline.report.summary import per_env_kstep
from alpha_rl.portable import total
from alpha_rl.rng import Stream

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


class _Window:
    """`steps` and `envs` of a path's [S, B] `last` (its forced closes)."""

    last: np.ndarray

    @property
    def steps(self) -> int:
        return self.last.shape[0]

    @property
    def envs(self) -> int:
        return self.last.shape[1]


@dataclass(frozen=True)
class TickPath(_Window):
    """The ticks of `envs` envs over `steps` steps: `ticks[s]` [B] where step s trades, `ticks[S]`
    where the envs stand after the last one; `last[s]` [B] where step s is a session's forced
    close (the env goes flat whatever the policy says)."""

    ticks: np.ndarray  # [S + 1, B] int64
    last: np.ndarray  # [S, B] bool


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
    max_drawdown: float  # NaN for a mean over paths (_per_walk)
    intervals: np.ndarray  # net PnL per `window` steps, summed over envs (none for a mean)
    equity: np.ndarray  # [S] the summed net PnL after each step (the liquidation in the last)
    envs: int
    steps: int

    @property
    def env_steps(self) -> int:
        return self.envs * self.steps

    @property
    def turnover(self) -> float:
        return per_env_kstep(self.fills, self.envs, self.steps)

    @property
    def exposure(self) -> float:
        return self.exposed / self.env_steps

    @property
    def hit_rate(self) -> float:
        return self.wins / self.round_trips if self.round_trips else math.nan

    @property
    def pnl_per_env_kstep(self) -> float:
        return per_env_kstep(self.pnl, self.envs, self.steps)

    def metrics(self) -> dict[str, float]:
        """The figures by UNITS name."""
        return {name: float(getattr(self, name)) for name in UNITS}


Policy = Callable[[int, np.ndarray], np.ndarray]  # (step, previous targets [B]) -> targets [B]


@dataclass(frozen=True)
class PricedPath(_Window):
    """A tick path priced once: per cell of its [S + 1, B] ticks the half spread of a fill and
    the mid move a position held there earns (both x lot x multiplier), so that every ledger of
    the evaluation (the agent's each time, the baselines') only weighs them by its positions.
    Row S is where the envs stand after the last step: it holds nothing. It holds only arrays
    (no book), so a worker process is sent it whole (pipeline/evaluation/evaluate.py, `ledgers`)."""

    half: np.ndarray  # [S + 1, B] float64: half the spread at the tick a cell trades at
    move: np.ndarray  # [S + 1, B] float64: the mid move from that tick to the next
    last: np.ndarray  # [S, B] bool: the path's forced closes (TickPath.last)
    fee: float  # per fill (Costs.fee)

    @classmethod
    def of(cls, book: Book, costs: Costs, path: TickPath) -> PricedPath:
        """`path` priced on `book` with `costs`."""
        t = path.ticks
        bid = np.asarray(book.bid_px[:, 0], np.float64)
        ask = np.asarray(book.ask_px[:, 0], np.float64)
        mid, lm = 0.5 * (bid + ask), costs.lot_mult
        ahead = np.minimum(t + 1, book.T - 1)  # row S: its tick may be the book's last
        return cls(half=0.5 * (ask[t] - bid[t]) * lm, move=(mid[ahead] - mid[t]) * lm,
                   last=path.last, fee=costs.fee)  # fmt: skip

    def tiled(self, copies: int) -> PricedPath:
        """The same path `copies` times side by side (envs b, B + b, ... are env b's copies)."""
        tile = lambda a: np.tile(a, (1, copies))  # noqa: E731
        return PricedPath(tile(self.half), tile(self.move), tile(self.last), self.fee)

    def positions(self, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(want, held) [S + 1, B] int8: the position each step moves to (row S: the
        liquidation, to flat) and the one it held before."""
        S, B = self.steps, self.envs
        want = np.zeros((S + 1, B), np.int8)
        want[:S] = targets
        held = np.zeros_like(want)
        held[1:] = want[:-1]
        return want, held

    def changes(self, targets: np.ndarray) -> tuple[np.ndarray, ...]:
        """(want, close, opening) [S + 1, B]: `positions`' want, and where a step closes the
        position it held and where it opens one (a flip does both)."""
        want, held = self.positions(targets)
        change = want != held
        return want, change & (held != 0), change & (want != 0)

    def fills(self, targets: np.ndarray) -> float:
        """The fills of `targets` (a close and an open one each, the liquidation's included)."""
        _, closes, opens = self.changes(targets)
        return float(np.count_nonzero(closes) + np.count_nonzero(opens))

    def flows(self, targets: np.ndarray) -> tuple[np.ndarray, ...]:
        """(want, gross, spread, fees) [S + 1, B] of `targets`: the position each step holds
        (`positions`) and its money, cell by cell as `settle` sums it (row S: the closing fill of
        what is open after the last step)."""
        want, close, opening = self.changes(targets)
        fills = close.astype(np.int64) + opening
        return want, want * self.move, self.half * fills, self.fee * fills

    def settle(self, targets: np.ndarray, window: int) -> LedgerStats:
        """The ledger of `targets` [S, B] (-1, 0, +1: the position each env holds from step s's
        tick to the next); see the module docstring. The last row closes what is open at the
        touch of where the envs stand after the last step; its costs count in the last step."""
        S, B = self.steps, self.envs
        want, close, opening = self.changes(targets)
        half, fee = self.half, self.fee
        fills = close.astype(np.int64) + opening
        gross = want * self.move
        net = total(gross, axis=1) - total(half * fills, axis=1) - fee * total(fills, axis=1)
        net = np.concatenate([net[: S - 1], [total(net[S - 1 :])]]) if S else net[:0]
        # round trips: trade k of an env is the one its k-th opening began; a step's gross and
        # its opening half spread are the trade it holds, a close's half spread the trade it ends
        k = opening.astype(np.int32)
        for row in range(1, S + 1):  # a cumsum down the rows (numpy's along axis 0 is 10x slower)
            np.add(k[row - 1], k[row], out=k[row])
        width = int(k[-1].max()) + 1  # k only grows down the rows
        mine = k + (np.arange(B, dtype=np.int64) * width)
        ended = mine - opening
        value = np.bincount(mine.ravel(), np.where(want != 0, gross - half * opening, 0).ravel(),
                            minlength=B * width)  # fmt: skip
        value -= np.bincount(ended.ravel(), np.where(close, half, 0).ravel(),
                             minlength=B * width)  # fmt: skip
        closed_at = np.full(B * width, -1)
        closed_at[ended[close]] = np.nonzero(close)[0]  # the row of each trade's close
        trades = value[closed_at >= 0]  # exit - entry at the touch, before fees
        by_policy = value[(closed_at >= 0) & (closed_at < S)]
        equity = np.cumsum(net)
        return LedgerStats(
            pnl=float(total(net)), pnl_gross=float(total(gross)),
            cost_spread=float(total(half * fills)), cost_fees=fee * float(total(fills)),
            realised=float(total(by_policy)), fills=float(total(fills)),
            exposed=float(np.count_nonzero(want[:S])), round_trips=float(trades.size),
            wins=float(np.count_nonzero(trades - 2.0 * fee > 0)), max_drawdown=drawdown(equity),
            intervals=windows(net, window),
            equity=equity, envs=B, steps=S,
        )  # fmt: skip

    def walk(self, policy: Policy) -> np.ndarray:
        """`policy`'s targets [S, B] over the path, forced flat at each session's last step as
        the env forces it."""
        targets = np.zeros((self.steps, self.envs), np.int64)
        pos = np.zeros(self.envs, np.int64)
        for s in range(self.steps):
            pos = targets[s] = np.where(self.last[s], 0, policy(s, pos))
        return targets

    def play(self, window: int, policy: Policy) -> LedgerStats:
        """The ledger of `policy` over the path (`walk`)."""
        return self.settle(self.walk(policy), window)


def settle(book: Book, costs: Costs, path: TickPath, targets: np.ndarray,
           window: int) -> LedgerStats:  # fmt: skip
    """The ledger of `targets` [S, B] over `path` (PricedPath.settle)."""
    return PricedPath.of(book, costs, path).settle(targets, window)


def play(book: Book, costs: Costs, path: TickPath, window: int, policy: Policy) -> LedgerStats:
    """`policy` over `path`, forced flat at each session's last step as the env forces it."""
    return PricedPath.of(book, costs, path).play(window, policy)


def hold(direction: int) -> Policy:
    """Always `direction` (+1 buy-and-hold, -1 sell-and-hold; re-entered after a session end)."""
    return lambda s, pos: np.full(pos.shape, direction, np.int64)


# the expected fills of one change of a random walk on {-1, 0, +1} that moves to either other
# position with equal chance (its stationary law is uniform): from flat 1, from a side 1 or 2
FILLS_PER_CHANGE = 4.0 / 3.0


def random_walk(seed: int, per_step: float) -> Policy:
    """Changes position with chance `per_step` each step, to one of the two others at random.
    Its draws: numpy's Philox keyed by (seed, the BASELINE stream id), in step order, so a
    policy made again draws the same walk."""
    p = float(np.clip(per_step, 0.0, 1.0))
    rng = np.random.Generator(np.random.Philox(key=[int(seed) & (2**64 - 1), Stream.BASELINE]))

    def policy(s: int, pos: np.ndarray) -> np.ndarray:
        change = rng.random(pos.size) < p
        other = rng.integers(0, 2, pos.size)
        moved = (pos + 2 + other) % 3 - 1  # the two other positions of -1, 0, +1
        return np.where(change, moved, pos)

    return policy


def windows(series: np.ndarray, window: int) -> np.ndarray:
    """The sums of `series`' consecutive runs of `window` values (the last one shorter), each
    in the project's order (the short one padded with zeros, which add nothing)."""
    if series.size == 0:
        return series
    padded = np.concatenate([series, np.zeros(-series.size % window, series.dtype)])
    return total(padded.reshape(-1, window), axis=1)


def drawdown(equity: np.ndarray) -> float:
    """The deepest fall of `equity` below its running peak (which starts at 0)."""
    if equity.size == 0:
        return 0.0
    peak = np.maximum.accumulate(np.concatenate([[0.0], equity]))[1:]
    return float((peak - equity).max())


RANDOM_WALKS = 4  # the random baseline is the mean of this many independent walks per env


def matched_random(book: Book, costs: Costs, path: TickPath, window: int, seed: int,
                   turnover: float, walks: int = RANDOM_WALKS) -> LedgerStats:  # fmt: skip
    """The random walk whose turnover matches the agent's `turnover` over `path`
    (`random_baseline` of the path priced once)."""
    return random_baseline(PricedPath.of(book, costs, path).tiled(walks), window, seed, turnover,
                           walks)  # fmt: skip


def random_baseline(copies: PricedPath, window: int, seed: int, turnover: float,
                    walks: int = RANDOM_WALKS) -> LedgerStats:  # fmt: skip
    """The random walk whose turnover (fills per env per 1,000 steps) is the agent's `turnover`,
    over `copies` (the evaluation's path tiled `walks` times): its change rate from the walk's
    expected fills per change, then corrected once by the turnover the first walk made (session
    ends add fills of their own; only its fills are counted). Each env's figure is the mean of
    `walks` independent walks over its window (one walk's luck is large)."""
    rate = turnover / 1000.0 / FILLS_PER_CHANGE
    targets = copies.walk(random_walk(seed, rate))
    first = per_env_kstep(copies.fills(targets), copies.envs, copies.steps)
    if turnover > 0 and first > 0:
        rate *= turnover / first
        targets = copies.walk(random_walk(seed, rate))
    return _per_walk(copies.settle(targets, window), walks)


def _per_walk(stats: LedgerStats, walks: int) -> LedgerStats:
    """The sums of `walks` copies of the envs as the mean copy (counts become means too). The
    mean is no one walk's path: its equity is kept (the tear sheet draws it), but its drawdown
    is NaN and it has no intervals (so no Sharpe or moments: ledger figures left unlogged)."""
    return dataclasses.replace(
        stats, pnl=stats.pnl / walks, pnl_gross=stats.pnl_gross / walks,
        cost_spread=stats.cost_spread / walks, cost_fees=stats.cost_fees / walks,
        realised=stats.realised / walks, fills=stats.fills / walks,
        exposed=stats.exposed / walks, round_trips=stats.round_trips / walks,
        wins=stats.wins / walks, intervals=stats.intervals[:0], equity=stats.equity / walks,
        max_drawdown=math.nan, envs=stats.envs // walks,
    )  # fmt: skip
