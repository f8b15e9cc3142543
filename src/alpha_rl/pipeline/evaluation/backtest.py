"""The calendar backtest: the held-out span walked once in time order, each tick traded once.

The evaluation's windows (pipeline/evaluation/evaluate.py) are the learning curve's measure:
seeded random starts, the same each time, overlapping, so a sum over them counts a day several
times. The backtest is what a quant reads: at the end of the run the greedy policy walks the
held-out span from its first tradable tick (the longest perception horizon in) to its last, in
calendar order.

The span's steps (a step at tick t holds a position from t to t + 1; a session's last tick is
never stepped from, the step before it being the forced close the env makes) are cut into
`segments`: each session's steps in pieces of at most ceil(steps / envs), so that `envs` envs walk
them side by side, a round of `envs` segments at a time (a segment never crosses a session end).
Each segment starts flat at its first tick and closes what it holds at the touch of the tick it
stands at after its last step, as the evaluation's ledger does (pipeline/evaluation/ledger.py).
The segments' steps, stitched in time order, are one series: each step's net PnL dated by the
time of the tick its move ends at (a daily close's return on the day it is realised).

The trivial baselines trade the very same segments. A claim against one rests on a circular
block bootstrap of the difference in daily net PnL (per `eval.sharpe_window` steps without
dates): the interval of the total difference over the span, and "above" only where it excludes
0. Ratios are annualised by the market's calendar (market/calendar.py) on daily returns of the
notional of one position at the span's mean mid; a market without one reports per 1,000 steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from alpha_rl.market.calendar import Calendar, day
from alpha_rl.pipeline.evaluation.ledger import (
    FILLS_PER_CHANGE,
    RANDOM_WALKS,
    PricedPath,
    TickPath,
    drawdown,
    hold,
    random_walk,
)
from alpha_rl.pipeline.report.summary import signed
from alpha_rl.portable import mean, std, total
from alpha_rl.rng import Stream

RESAMPLES = 2000  # the block bootstrap's resamples
LEVEL = 0.95  # its interval's coverage
HOLDS = (("flat", 0), ("buy_and_hold", 1), ("sell_and_hold", -1))


@dataclass(frozen=True)
class Segment:
    """Steps at ticks start .. start + steps - 1 of the held-out book, walked by one env."""

    start: int
    steps: int


def segments(session_last: np.ndarray, first: int, envs: int) -> list[Segment]:
    """The steps of ticks first .. T - 1 in time order, each session's cut into pieces of at
    most ceil(steps / envs) (module docstring); ValueError when there is none."""
    session_last = np.asarray(session_last, np.int64)
    spans, t = [], first
    while t < session_last.size:
        end = int(session_last[t])  # the session's last tick: never stepped from
        if end > t:
            spans.append((t, end - t))
        t = end + 1
    steps = sum(n for _, n in spans)
    if steps == 0:
        raise ValueError(f"no tick from {first} on can be stepped from: every session ends there")
    width = -(-steps // envs)
    return [Segment(a + k, min(width, n - k)) for a, n in spans for k in range(0, n, width)]


def rounds(plan: list[Segment], envs: int) -> list[list[Segment]]:
    """`plan` in rounds of `envs` segments, each round's envs side by side."""
    return [plan[i : i + envs] for i in range(0, len(plan), envs)]


def round_path(group: list[Segment], session_last: np.ndarray, envs: int) -> TickPath:
    """The ticks the `envs` envs of a round trade: env b steps through its segment's ticks and
    then stands at the tick after its last step (an env without a segment stands at the first
    segment's start); `last` marks the sessions' forced closes."""
    S = max(seg.steps for seg in group)
    padded = group + [Segment(group[0].start, 0)] * (envs - len(group))
    s = np.arange(S + 1)[:, None]
    ticks = np.array([seg.start for seg in padded]) + np.minimum(s, [seg.steps for seg in padded])
    last = np.asarray(session_last, np.int64)[ticks[:S]] <= ticks[:S] + 1
    return TickPath(ticks.astype(np.int64), last & (s[:S] < [seg.steps for seg in padded]))


def within(group: list[Segment], targets: np.ndarray, envs: int) -> np.ndarray:
    """`targets` [S, envs x copies] (env b's copies at b, envs + b, ...) with every step past an
    env's segment flat: those steps are none of the backtest's, the env trades nothing more."""
    steps = np.zeros(envs, np.int64)
    steps[: len(group)] = [seg.steps for seg in group]
    steps = np.tile(steps, targets.shape[1] // envs)
    return np.where(np.arange(targets.shape[0])[:, None] < steps, targets, 0)


@dataclass(frozen=True)
class Track:
    """A policy's backtest step by step in time order ([N] each), with its ledger's counts."""

    ticks: np.ndarray  # the held-out book's tick each step trades at
    net: np.ndarray  # currency, the segment's closing costs in its last step
    gross: np.ndarray
    spread: np.ndarray
    fees: np.ndarray
    exposed: np.ndarray  # 1 where the step holds a position (a mean of walks: the share that do)
    fills: float
    round_trips: float
    wins: float


def track(priced: list[PricedPath], plan: list[list[Segment]], targets: list[np.ndarray],
          walks: int = 1) -> Track:  # fmt: skip
    """The stitched series of `targets` (per round [S, envs x walks]: `walks` copies side by
    side, whose mean it is) over the rounds' priced paths."""
    parts: list[tuple[np.ndarray, ...]] = []
    fills = trips = wins = 0.0
    for path, group, want in zip(priced, plan, targets, strict=True):
        envs = want.shape[1] // walks
        want = within(group, want, envs)
        ledger = path.settle(want, 1)
        fills, trips, wins = fills + ledger.fills, trips + ledger.round_trips, wins + ledger.wins
        held, *flows = path.flows(want)  # the position each step holds, and its money
        for b, seg in enumerate(group):
            lanes = [b + envs * k for k in range(walks)]
            cells = [mean(f[: seg.steps + 1, lanes], axis=1) for f in flows]
            for f in cells:  # the closing fill after the last step counts in the last step
                f[seg.steps - 1] += f[seg.steps]
            holding = (held[: seg.steps, lanes] != 0).astype(np.float64)
            parts.append((np.arange(seg.start, seg.start + seg.steps), *(f[:-1] for f in cells),
                          mean(holding, axis=1)))  # fmt: skip
    ticks, gross, spread, fees, exposed = (np.concatenate(p) for p in zip(*parts, strict=True))
    return Track(ticks, gross - spread - fees, gross, spread, fees, exposed, fills / walks,
                 trips / walks, wins / walks)  # fmt: skip


def baselines(priced: list[PricedPath], plan: list[list[Segment]], agent: Track,
              seed: int) -> dict[str, Track]:  # fmt: skip
    """The trivial baselines on the very same segments: flat, buy-and-hold, sell-and-hold (each
    forced flat at a session's last step as the env forces it), and the mean of RANDOM_WALKS
    random walks whose turnover is the agent's (once corrected, as ledger.random_baseline)."""
    out = {name: track(priced, plan, [p.walk(hold(d)) for p in priced]) for name, d in HOLDS}
    copies = [p.tiled(RANDOM_WALKS) for p in priced]

    def walked(rate: float) -> Track:  # one walk of the rounds in turn, its draws in step order
        policy = random_walk(seed, rate)
        return track(copies, plan, [p.walk(policy) for p in copies], RANDOM_WALKS)

    rate = turnover(agent) / 1000.0 / FILLS_PER_CHANGE
    first = walked(rate)
    if turnover(agent) > 0 and turnover(first) > 0:
        return out | {"random": walked(rate * turnover(agent) / turnover(first))}
    return out | {"random": first}


def turnover(t: Track) -> float:
    """Fills per 1,000 steps of the walk."""
    return t.fills / t.net.size * 1000.0


@dataclass(frozen=True)
class Backtest:
    """The agent's and the baselines' tracks over the span, dated when the market has a calendar."""

    agent: Track
    baselines: dict[str, Track]
    dates: pd.DatetimeIndex | None  # [N] the time of the tick each step's move ends at
    calendar: Calendar | None
    capital: float  # one position's notional at the span's mean mid (currency)
    window: int  # steps per interval without dates (eval.sharpe_window)
    segments: int
    seed: int

    def daily(self, t: Track) -> pd.Series:
        """Net PnL a day, by date in the market's zone (needs dates)."""
        assert self.dates is not None
        days = self.dates.normalize()  # in time order: a day's steps are consecutive
        new = np.concatenate([[True], days[1:] != days[:-1]])
        net = np.bincount(np.cumsum(new) - 1, weights=t.net)  # added in step order
        return pd.Series(net, index=days[new])

    def returns(self, t: Track) -> pd.Series:
        """Net PnL a day as a return on `capital` (needs dates)."""
        return self.daily(t) / self.capital

    def periods(self, t: Track) -> np.ndarray:
        """The net PnL a period: a day with dates, `window` steps without."""
        if self.dates is not None:
            return self.daily(t).to_numpy()
        pad = np.concatenate([t.net, np.zeros(-t.net.size % self.window)])
        return total(pad.reshape(-1, self.window), axis=1)

    @cached_property
    def margins(self) -> dict[str, tuple[float, float, float]]:
        """Per baseline, the agent's net less its over the span, with the block bootstrap's
        interval (bootstrapped once: the metrics and the lines read the same)."""
        agent = self.periods(self.agent)
        out = {}
        for name, t in self.baselines.items():
            diff = agent - self.periods(t)
            out[name] = (float(total(diff)), *block_interval(diff, self.seed))
        return out

    def metrics(self) -> dict[str, float]:
        """backtest/* of the agent and backtest/baseline/<name>/* (with its margin)."""
        out = {f"backtest/{k}": v for k, v in self.figures(self.agent).items()}
        out["backtest/segments"] = float(self.segments)
        if self.calendar is not None:
            out["backtest/periods_per_year"] = self.calendar.periods_per_year
            out["backtest/days_per_year"] = self.calendar.days_per_year
        for name, t in self.baselines.items():
            figures = self.figures(t, ratios=name != "random")  # a mean of walks: no path's
            figures |= dict(zip(("margin", "margin_lo", "margin_hi"), self.margins[name],
                                strict=True))  # fmt: skip
            out |= {f"backtest/baseline/{name}/{k}": v for k, v in figures.items()}
        return {k: v for k, v in out.items() if math.isfinite(v)}

    def figures(self, t: Track, ratios: bool = True) -> dict[str, float]:
        """A track's figures (docs/markets.md, the calendar backtest)."""
        N = t.net.size
        out = {"pnl": float(total(t.net)), "pnl_gross": float(total(t.gross)),
               "cost_spread": float(total(t.spread)), "cost_fees": float(total(t.fees)),
               "steps": float(N), "turnover": turnover(t),
               "exposure": float(total(t.exposed)) / N,
               "hit_rate": t.wins / t.round_trips if t.round_trips else math.nan,
               "pnl_per_kstep": float(total(t.net)) / N * 1000.0}  # fmt: skip
        if not ratios:
            return out
        out["max_drawdown"] = drawdown(np.cumsum(t.net))
        if self.calendar is None:
            sd = float(std(t.net, ddof=1)) if N > 1 else math.nan
            ratio = float(mean(t.net)) / sd if sd > 0 else math.nan
            out["sharpe_kstep"] = ratio * math.sqrt(1000.0)
            return out
        return out | annualised(self.returns(t).to_numpy(), self.calendar.days_per_year)

    def drawdown_dates(self, t: Track) -> tuple[pd.Timestamp, pd.Timestamp] | None:
        """The dates of the deepest drawdown's peak and trough (None without dates or a fall);
        a peak before the first step is dated by the first step."""
        if self.dates is None or not t.net.size:
            return None
        equity = np.concatenate([[0.0], np.cumsum(t.net)])  # after 0, 1, ... N steps
        trough = int(np.argmax(np.maximum.accumulate(equity) - equity))
        if trough == 0:
            return None
        top = int(np.argmax(equity[: trough + 1]))
        return self.dates[max(top - 1, 0)], self.dates[trough - 1]

    def span(self) -> str:
        """`2016-08-22 .. 2022-12-28 UTC` (the dates its steps' moves end at, in the market's
        zone), or that it has none."""
        if self.dates is None:
            return "no dates (the market has no timestamps that are times)"
        return f"{day(self.dates[0])} .. {day(self.dates[-1])} {self.dates[0].tzname()}"

    def lines(self, currency: str) -> list[str]:
        """What the backtest says in the run's last lines: its figures, what annualises them,
        and the margin over each baseline with its interval (a claim only where it excludes 0)."""
        a, f = self.agent, self.figures(self.agent)
        head = (f"held-out backtest, {self.span()}: {a.net.size:,} steps in time order, each "
                f"tick once, {self.segments} segments side by side, greedy: net "
                f"{signed(f['pnl'], currency)} (gross {signed(f['pnl_gross'])} - spread "
                f"{f['cost_spread']:,.0f} - fees {f['cost_fees']:,.0f}), turnover "
                f"{f['turnover']:.4g} fills per 1,000 steps, exposure {f['exposure']:.2f}, max "
                f"drawdown {f['max_drawdown']:,.0f} {currency}{self._fall(a)}")  # fmt: skip
        if self.calendar is None:
            rate = (f"no calendar (the market has no timestamps that are times): net "
                    f"{signed(f['pnl_per_kstep'])} {currency} per 1,000 steps, Sharpe "
                    f"{f.get('sharpe_kstep', math.nan):.3g} per 1,000 steps")  # fmt: skip
        else:
            rate = (f"annual return {100 * f['annual_return']:+.2f}% of {self.capital:,.0f} "
                    f"{currency} (one position's notional at the span's mean mid; simple, over "
                    f"{f['years']:.2f} years), volatility {100 * f['annual_volatility']:.2f}% a "
                    f"year, Sharpe {f['sharpe']:.3g} a year, Sortino {f['sortino']:.3g}, Calmar "
                    f"{f.get('calmar', math.nan):.3g}; a year: "
                    f"{self.calendar.describe()}")  # fmt: skip
        unit = "day" if self.dates is not None else f"{self.window}-step interval"
        margins = ", ".join(f"{name} {claim(*m)}" for name, m in self.margins.items())
        nets = ", ".join(f"{name} {signed(float(total(t.net)))}"
                         for name, t in self.baselines.items())  # fmt: skip
        return [head, rate,
                f"backtest vs the baselines on the same ticks, net ({nets}): this run's margin, "
                f"with its {LEVEL:.0%} interval (a block bootstrap of the {unit}'s "
                f"differences): {margins}"]  # fmt: skip

    def tags(self) -> dict[str, str]:
        """The dates a quant reads it by, as the run's tags."""
        out = {"backtest.span": self.span()}
        fall = self.drawdown_dates(self.agent)
        if fall is not None:
            out["backtest.max_drawdown_dates"] = f"{day(fall[0])} .. {day(fall[1])}"
        if self.calendar is not None:
            out["backtest.calendar"] = self.calendar.describe()
        return out

    def _fall(self, t: Track) -> str:
        dates = self.drawdown_dates(t)
        return "" if dates is None else f" ({day(dates[0])} .. {day(dates[1])})"


def claim(margin: float, lo: float, hi: float) -> str:
    """`+55,608 [-102,502, +238,925]: not shown either way` ("shown above" only where the
    interval lies above 0, "shown below" where it lies below)."""
    if lo > 0:
        said = "shown above"
    elif hi < 0:
        said = "shown below"
    else:
        said = "not shown either way (the interval holds 0)"
    return f"{signed(margin)} [{signed(lo)}, {signed(hi)}]: {said}"


def annualised(daily: np.ndarray, days_per_year: float) -> dict[str, float]:
    """Simple (not compounded) annual figures of daily returns: the total return over the years
    the days make, its volatility, Sharpe, Sortino and Calmar (the annual return over the
    deepest fall of the summed returns)."""
    n = daily.size
    years = n / days_per_year
    ret = float(total(daily))
    out = {"total_return": ret, "years": years,
           "annual_return": ret / years if years > 0 else math.nan}  # fmt: skip
    sd = float(std(daily, ddof=1)) if n > 1 else math.nan
    out["annual_volatility"] = sd * math.sqrt(days_per_year)
    out["sharpe"] = float(mean(daily)) / sd * math.sqrt(days_per_year) if sd > 0 else math.nan
    losses = np.minimum(daily, 0.0)
    down = float(np.sqrt(mean(losses * losses))) if n else math.nan
    out["sortino"] = (float(mean(daily)) / down * math.sqrt(days_per_year) if down > 0
                      else math.nan)  # fmt: skip
    fall = drawdown(np.cumsum(daily))
    out["calmar"] = out["annual_return"] / fall if fall > 0 else math.nan
    return out


def block_interval(x: np.ndarray, seed: int, resamples: int = RESAMPLES,
                   level: float = LEVEL) -> tuple[float, float]:  # fmt: skip
    """The percentile interval of sum(x) under a circular block bootstrap (blocks of about
    n^(1/3) consecutive values keep their autocorrelation). Its draws: numpy's Philox keyed as
    the random baseline's (ledger.random_walk) but from counter 2^192, draws of its own."""
    n = x.size
    if n < 2:
        return math.nan, math.nan
    block = 1
    while block * block * block < n:  # the cube root of n, rounded up
        block += 1
    count = -(-n // block)
    bits = np.random.Philox(key=[int(seed) & (2**64 - 1), Stream.BASELINE], counter=[0, 0, 0, 1])
    rng = np.random.Generator(bits)
    starts = rng.integers(0, n, (resamples, count))
    index = (starts[:, :, None] + np.arange(block)).reshape(resamples, -1)[:, :n] % n
    sums = total(x[index], axis=1)
    tail = (1 - level) / 2
    return float(np.quantile(sums, tail)), float(np.quantile(sums, 1 - tail))


def backtest(priced: list[PricedPath], plan: list[list[Segment]], targets: list[np.ndarray],
             dates: pd.DatetimeIndex | None, calendar: Calendar | None, capital: float,
             window: int, seed: int) -> Backtest:  # fmt: skip
    """The backtest of the agent's `targets` (per round [S, envs]), its baselines beside it."""
    agent = track(priced, plan, targets)
    at = None if dates is None else dates[agent.ticks + 1]
    return Backtest(agent, baselines(priced, plan, agent, seed), at, calendar, capital,
                    window, sum(map(len, plan)), seed)  # fmt: skip
