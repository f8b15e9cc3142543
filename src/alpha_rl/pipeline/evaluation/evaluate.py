"""Held-out evaluation: the greedy policy on the held-out split, in environments of its own,
and the TD loss on the probe set (pipeline/evaluation/probe.py).

Every evaluation resets its `eval.num_envs` environments to the same seeded start ticks of the
held-out book, so successive evaluations differ only by the network. There is no exploration, no
HER and no replay; the env kernels read the run's ISV (reward weights) but nothing writes it.
The greedy actions are the run's (with α: on Q + w_α aux) and the env pays c6 on the run's aux
head, exactly as in training.
The money figures come from the held-out ledger (pipeline/evaluation/ledger.py): the greedy
positions step by step, marked to the mid, with the spread and fees of every fill, what is open at
the end closed at the touch; beside them the same figures of the trivial baselines on the very same
windows (flat, buy-and-hold, sell-and-hold, and a random walk trading as often as the agent did).
Capture and trades come from the env kernel's closed-trade accumulators. Hindsight rewards never
enter them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from concurrent.futures import Executor, Future, wait
from typing import Any

import numpy as np

from alpha_rl.abi import ENV_ACTIONS
from alpha_rl.agent import GreedyPolicy, Learner, called_right
from alpha_rl.backend.graph import Graph
from alpha_rl.env import STATS, Environment, TradeStats
from alpha_rl.market.book import Book
from alpha_rl.market.calendar import Calendar, times
from alpha_rl.pipeline.configure.plan import Plan
from alpha_rl.pipeline.evaluation.backtest import Backtest, backtest, round_path, rounds, segments
from alpha_rl.pipeline.evaluation.ledger import (
    RANDOM_WALKS,
    Costs,
    LedgerStats,
    PricedPath,
    hold,
    random_baseline,
    tick_path,
)
from alpha_rl.pipeline.evaluation.probe import ProbeLoss, collect_probe
from alpha_rl.pipeline.step.workers import outcome, submitted
from alpha_rl.portable import mean, std
from alpha_rl.session import Session
from alpha_rl.vocabulary import (
    CAPTURE,
    SHARPE_INTERVALS,
    TRADES,
    baseline_key,
    eval_key,
)

F32 = np.float32
ENV_RECORDED = ("eff_action", "fill_mid", "post_mid")  # each eval step's, with p_up, in `records`


def sharpe(interval_pnl: np.ndarray) -> float:
    """mean / sample std of the interval PnL series (not annualised); NaN when undefined."""
    if interval_pnl.size < 2:
        return float("nan")
    sd = float(std(interval_pnl, ddof=1))
    return float(mean(interval_pnl)) / sd if sd > 0 else float("nan")


def moments(interval_pnl: np.ndarray) -> tuple[float, float]:
    """(skewness, kurtosis) of the interval PnL series (kurtosis 3 for a normal; the Deflated
    Sharpe Ratio's non-normality terms); NaN when undefined."""
    x = np.asarray(interval_pnl, np.float64)
    if x.size < 3 or float(std(x)) == 0.0:
        return float("nan"), float("nan")
    z = (x - mean(x)) / std(x)
    z2 = z * z  # products, not np.power: its SIMD code rounds differently on other CPUs
    return float(mean(z2 * z)), float(mean(z2 * z2))


def direction(eff_action: np.ndarray) -> np.ndarray:
    """The env's effective actions as positions: LONG +1, SHORT -1, FLAT 0."""
    return np.where(eff_action == ENV_ACTIONS["ACTION_LONG"], 1,
                    np.where(eff_action == ENV_ACTIONS["ACTION_SHORT"], -1, 0))  # fmt: skip


def ledger_metrics(stats: LedgerStats, key: Callable[[str], str]) -> dict[str, float]:
    """A ledger's figures and its Sharpe (with the moments of its interval PnL) under `key`."""
    skew, kurtosis = moments(stats.intervals)
    out = {key(name): value for name, value in stats.metrics().items()}
    return out | {key("sharpe"): sharpe(stats.intervals), key("pnl_skew"): skew,
                  key("pnl_kurtosis"): kurtosis}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Reading:
    """One evaluation's ledgers: the agent's and each trivial baseline's (vocabulary.BASELINES)."""

    agent: LedgerStats
    baselines: dict[str, LedgerStats]


def ledgers(priced: PricedPath, targets: np.ndarray, window: int, seed: int,
            copies: PricedPath | None = None) -> tuple[LedgerStats, LedgerStats]:  # fmt: skip
    """The agent's ledger of `targets` over `priced` and the random baseline matched to its
    turnover (over `copies`, the path tiled for its walks: tiled here when not given)."""
    agent = priced.settle(targets, window)
    copies = copies if copies is not None else priced.tiled(RANDOM_WALKS)
    return agent, random_baseline(copies, window, seed, agent.turnover)


class Evaluator:
    """Greedy evaluation of `learner` on the held-out `book`, queued on `stream` (the run's:
    after its training steps, beside a pack's other runs). On the cuda backend with
    `backend.graph` the whole evaluation (the envs' reset, every step, the per-step records and
    the trade accumulators' windows) is one CUDA graph captured at the first evaluation."""

    def __init__(self, session: Session, book: Book, plan: Plan, learner: Learner,
                 stream: Any = None, workers: Executor | None = None,
                 calendar: Calendar | None = None) -> None:  # fmt: skip
        self.cfg = c = plan.eval
        be = session.backend
        env_cfg = dataclasses.replace(plan.env, num_envs=c.num_envs)
        self.env = Environment(env_cfg, book, session.runtime, session.isv, plan.run.seed,
                               int(session.cfg.reward.stride))  # fmt: skip
        self.policy = GreedyPolicy(learner, c.num_envs)
        self.h = be.zeros(c.num_envs * self.env.obs_dim, F32)
        self.probe = ProbeLoss(learner, collect_probe(session, book, plan))
        self.book, self.seed, self.backend, self.stream = book, plan.run.seed, be, stream
        self.workers = workers
        self.costs = Costs(plan.env.lot, plan.env.multiplier, plan.env.fee_per_lot)
        # the ticks every evaluation visits (the same seeded starts each time)
        cursors = self.env.seeded_cursors()
        self.cursors = be.upload(cursors.astype(np.int32))
        self.path = tick_path(book.session_last(), self.env.starts, plan.run.seed, cursors,
                              c.steps)  # fmt: skip
        self.priced = PricedPath.of(book, self.costs, self.path)
        # the random baseline's walks (a pack's workers tile their own)
        self.copies = self.priced.tiled(RANDOM_WALKS) if workers is None else None
        self.holds = {
            name: self.priced.play(c.sharpe_window, hold(d))
            for name, d in (("flat", 0), ("buy_and_hold", 1), ("sell_and_hold", -1))
        }
        # what each step leaves, kept on the device until the evaluation's end: [steps * B]
        arrays, B = self.env.arrays, c.num_envs
        self.sources = {"p_up": self.policy.p_up} | {k: arrays[k] for k in ENV_RECORDED}
        self.records = {k: be.zeros(c.steps * B, v.dtype) for k, v in self.sources.items()}
        # the closed-trade accumulators of each `sharpe_window` steps, read and cleared
        self.windows = -(-c.steps // c.sharpe_window)
        self.trade_stats = {k: be.zeros(self.windows * B, arrays[k].dtype) for k in STATS}
        self.use_graph = plan.backend.graph and be.name == "cuda" and stream is not None
        self.graph: Graph | None = None
        self.last: Reading | None = None  # the latest evaluation's ledgers (the tear sheet's)
        self.walk = None  # the calendar backtest at the end (with eval.backtest)
        if c.backtests(dated=book.timestamps is not None):
            self.walk = CalendarWalk(session, book, plan, learner, stream, calendar)
        self.backtest: Backtest | None = None  # its result, once the last evaluation is done

    def due(self, t: int, steps: int) -> bool:
        """Whether an evaluation runs after env step `t` (`eval.first`, every `eval.every`, the
        end)."""
        return self.cfg.due(t, steps)

    def launch(self) -> None:
        """Queue one evaluation on the stream: the envs back at their seeded starts, then
        `eval.steps` greedy steps, each step's effective actions, aux p_up and mids copied into
        `records` and, every `sharpe_window` steps, the trade accumulators into `trade_stats`
        (and cleared). Nothing is read to the host."""
        env, be, s, c = self.env, self.backend, self.stream, self.cfg
        a, B = env.arrays, env.num_envs
        env.restart(self.cursors, s)
        for step in range(c.steps):
            env.perceive(self.h, s)
            env.step(self.policy.act(self.h, s), self.policy.p_up, s)
            rows = slice(step * B, (step + 1) * B)
            for k, source in self.sources.items():
                be.copy(self.records[k][rows], source, s)
            if (step + 1) % c.sharpe_window == 0 or step + 1 == c.steps:
                w = step // c.sharpe_window
                for k in STATS:
                    be.copy(self.trade_stats[k][w * B : (w + 1) * B], a[k], s)
                    be.fill(a[k], 0, s)

    def close(self) -> None:
        """Free the evaluation's CUDA graph (before the backend closes)."""
        if self.graph is not None:
            self.graph.close()
            self.graph = None

    def run(self) -> dict[str, float]:
        """One evaluation, start to end (see `steps`), waiting on its workers when it has any."""
        steps = self.steps()
        while True:
            try:
                waiting = next(steps)
            except StopIteration as done:
                return done.value
            if isinstance(waiting, Future):
                wait([waiting])

    def steps(self) -> Generator[Future | None, None, dict[str, float]]:
        """One evaluation as a generator: `start`, then (with `workers`) it yields the ledgers'
        future until it is done and returns the metrics (`Pending.metrics`)."""
        reading = yield from self.start()
        return (yield from reading.wait())

    def start(self, final: bool = False) -> Generator[Future | None, None, Pending]:
        """An evaluation's device part as a generator: it queues the evaluation (`launch`, or
        its graph), yields once while the device runs it (a pack's other runs go on meanwhile),
        reads the records and runs the probe (the nets as they are now), and hands the ledgers
        to its workers (or computes them here): the `Pending` evaluation, whose metrics need
        nothing more of the device, so the run may step on while its ledgers are computed.
        The `final` evaluation (the run's last step) walks the calendar backtest too."""
        if self.use_graph:
            if self.graph is None:
                self.graph = Graph(self.stream, self.launch)
            self.graph.launch()
        else:
            self.launch()
        yield
        c, B = self.cfg, self.env.num_envs
        read = {k: self.backend.download(v, self.stream).reshape(-1, B)
                for k, v in (self.records | self.trade_stats).items()}  # fmt: skip
        targets = direction(read["eff_action"]).astype(np.int64)
        right, labeled = called_right(read["p_up"], read["fill_mid"], read["post_mid"])
        # each window's accumulators summed as a harvest sums them, then the windows added
        trades = TradeStats.total([TradeStats.summed({k: read[k][w] for k in STATS})
                                   for w in range(self.windows)])  # fmt: skip
        found = {CAPTURE: trades.capture_ratio, TRADES: float(trades.trades),
                 "eval/aux_accuracy": right / labeled if labeled else float("nan")}  # fmt: skip
        found |= self.probe.run(self.stream)
        # the ledgers: in a worker process while the pack's thread goes on, or here
        task = (self.priced, targets, c.sharpe_window, self.seed, self.copies)
        pending = Pending(self, submitted(self.workers, ledgers, *task), task, found)
        if final and self.walk is not None:
            walked = yield from self.walk.run()
            pending.walked(self.workers, self.walk.task(walked, c.sharpe_window, self.seed))
        return pending


class Pending:
    """An evaluation whose device part is done and whose ledgers may still be computing: the
    agent's, each baseline's, with the figures read off the device (`found`)."""

    def __init__(self, evaluator: Evaluator, done: Future, task: tuple,
                 found: dict[str, float]) -> None:  # fmt: skip
        self.evaluator, self.done, self.task, self.found = evaluator, done, task, found
        self.walk: tuple[Future, tuple] | None = None  # the backtest's ledgers, and their task

    def walked(self, workers: Executor | None, task: tuple) -> None:
        """The calendar backtest's ledgers too (`backtest(*task)`, in `workers` when given)."""
        self.walk = submitted(workers, backtest, *task), task

    def waiting(self) -> Future | None:
        """A future of the ledgers while they are computed; None once they all are."""
        futures = [self.done] + ([self.walk[0]] if self.walk else [])
        return next((f for f in futures if not f.done()), None)

    def wait(self) -> Generator[Future, None, dict[str, float]]:
        """`metrics` once the ledgers are done, yielding their future until then."""
        while (waiting := self.waiting()) is not None:
            yield waiting
        return self.metrics()

    def metrics(self) -> dict[str, float]:
        """The evaluation's metrics (waiting for the ledgers if they are not done): the agent's
        ledger figures (eval/pnl net of costs, eval/pnl_gross, eval/cost_spread, eval/cost_fees,
        eval/turnover, eval/exposure, eval/max_drawdown, eval/hit_rate, eval/pnl_per_env_kstep:
        ledger.UNITS) and eval/sharpe over its `sharpe_window` intervals (with their number and
        their PnL's skewness and kurtosis); eval/capture_ratio and eval/trades of the closed
        trades; eval/aux_accuracy (the share of steps whose next mid move the aux head called
        right, p_up > 0.5 for up, over the steps where the mid moved); each baseline's figures
        under eval/baseline/<name>/; and the probe's eval/l_q_probe and eval/q_probe_mean. The
        evaluator's `last` reading becomes this one's. With the calendar backtest, its backtest/*
        (pipeline/evaluation/backtest.py) too, and it becomes the evaluator's `backtest`."""
        agent, rand = outcome(self.done, ledgers, *self.task)
        ev, out = self.evaluator, {}
        if self.walk is not None:
            ev.backtest = outcome(self.walk[0], backtest, *self.walk[1])
            out = ev.backtest.metrics()
        ev.last = Reading(agent, ev.holds | {"random": rand})
        out |= ledger_metrics(agent, eval_key)
        out[SHARPE_INTERVALS] = float(agent.intervals.size)
        for name, stats in ev.last.baselines.items():
            figures = ledger_metrics(stats, lambda f, n=name: baseline_key(n, f))
            out |= {k: v for k, v in figures.items() if np.isfinite(v)}  # none: undefined
        return out | self.found


class CalendarWalk:
    """The calendar backtest's device part (pipeline/evaluation/backtest.py): `eval.backtest.envs`
    envs of their own on the held-out book walk its segments a round at a time, greedy, each
    round from the segments' first ticks (flat), launched op by op on the run's stream (once a
    run: no graph); each step's effective action is kept on the device until the round's end."""

    def __init__(self, session: Session, book: Book, plan: Plan, learner: Learner,
                 stream: Any, calendar: Calendar | None) -> None:  # fmt: skip
        self.envs = B = plan.eval.backtest_envs
        env_cfg = dataclasses.replace(plan.env, num_envs=B)
        self.env = Environment(env_cfg, book, session.runtime, session.isv, plan.run.seed,
                               int(session.cfg.reward.stride))  # fmt: skip
        self.policy = GreedyPolicy(learner, B)
        self.backend, self.stream, be = session.backend, stream, session.backend
        self.h = be.zeros(B * self.env.obs_dim, F32)
        first = max(plan.env.perception.horizons)  # the first tick with its whole history
        session_last = book.session_last()
        self.plan = rounds(segments(session_last, first, B), B)
        costs = Costs(plan.env.lot, plan.env.multiplier, plan.env.fee_per_lot)
        paths = [round_path(g, session_last, B) for g in self.plan]
        self.priced = [PricedPath.of(book, costs, p) for p in paths]
        self.cursors = [be.upload(p.ticks[0].astype(np.int32)) for p in paths]  # each round's
        steps = max(p.steps for p in self.priced)
        self.record = be.zeros(steps * B, self.env.arrays["eff_action"].dtype)
        self.dates, self.calendar = times(book), calendar
        self.capital = costs.lot_mult * float(mean(book.mid[first:]))  # one position's notional

    def run(self) -> Generator[None, None, list[np.ndarray]]:
        """Each round's effective positions [S, envs], yielding while the device walks it."""
        env, be, s, B = self.env, self.backend, self.stream, self.envs
        out = []
        for cursors, priced in zip(self.cursors, self.priced, strict=True):
            env.restart(cursors, s)
            for step in range(priced.steps):
                env.perceive(self.h, s)
                env.step(self.policy.act(self.h, s), self.policy.p_up, s)
                be.copy(self.record[step * B : (step + 1) * B], env.arrays["eff_action"], s)
            yield
            read = be.download(self.record, s).reshape(-1, B)[: priced.steps]
            out.append(direction(read).astype(np.int64))
        return out

    def task(self, targets: list[np.ndarray], window: int, seed: int) -> tuple:
        """The arguments of `backtest` for the walked `targets`."""
        return (self.priced, self.plan, targets, self.dates, self.calendar, self.capital, window,
                seed)  # fmt: skip
