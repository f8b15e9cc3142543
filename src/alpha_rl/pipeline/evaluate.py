"""Held-out evaluation: the greedy policy on the held-out split, in environments of its own,
and the TD loss on the probe set (pipeline/probe.py).

Every evaluation resets its `eval.num_envs` environments to the same seeded start ticks of the
held-out book, so successive evaluations differ only by the network. There is no exploration, no
HER and no replay; the env kernels read the run's ISV (reward weights) but nothing writes it.
The greedy actions are the run's (with α: on Q + w_α aux) and the env pays c6 on the run's aux
head, exactly as in training.
The money figures come from the held-out ledger (pipeline/ledger.py): the greedy positions step by
step, marked to the mid, with the spread and fees of every fill, what is open at the end closed at
the touch; beside them the same figures of the trivial baselines on the very same windows (flat,
buy-and-hold, sell-and-hold, and a random walk trading as often as the agent did). Capture and
trades come from the env kernel's closed-trade accumulators. Hindsight rewards never enter them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator

import numpy as np

from alpha_rl.abi import ENV_ACTIONS
from alpha_rl.agent import GreedyPolicy, Learner, aux_calls
from alpha_rl.env import Environment
from alpha_rl.market.book import Book
from alpha_rl.pipeline.config import Plan
from alpha_rl.pipeline.ledger import (
    Costs,
    LedgerStats,
    hold,
    matched_random,
    play,
    settle,
    tick_path,
)
from alpha_rl.pipeline.probe import ProbeLoss, collect_probe
from alpha_rl.session import Session
from alpha_rl.vocabulary import (
    CAPTURE,
    SHARPE_INTERVALS,
    TRADES,
    baseline_key,
    eval_key,
)

F32 = np.float32


def sharpe(interval_pnl: np.ndarray) -> float:
    """mean / sample std of the interval PnL series (not annualised); NaN when undefined."""
    if interval_pnl.size < 2:
        return float("nan")
    std = float(interval_pnl.std(ddof=1))
    return float(interval_pnl.mean()) / std if std > 0 else float("nan")


def moments(interval_pnl: np.ndarray) -> tuple[float, float]:
    """(skewness, kurtosis) of the interval PnL series (kurtosis 3 for a normal; the Deflated
    Sharpe Ratio's non-normality terms); NaN when undefined."""
    x = np.asarray(interval_pnl, np.float64)
    if x.size < 3 or float(x.std()) == 0.0:
        return float("nan"), float("nan")
    z = (x - x.mean()) / x.std()
    return float(np.mean(z**3)), float(np.mean(z**4))


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


class Evaluator:
    """Greedy evaluation of `learner` on the held-out `book`."""

    def __init__(self, session: Session, book: Book, plan: Plan, learner: Learner) -> None:
        self.cfg = plan.eval
        env_cfg = dataclasses.replace(plan.env, num_envs=plan.eval.num_envs)
        self.env = Environment(env_cfg, book, session.runtime, session.isv, plan.run.seed,
                               int(session.cfg.reward.stride))  # fmt: skip
        self.policy = GreedyPolicy(learner, plan.eval.num_envs)
        self.h = session.backend.zeros(plan.eval.num_envs * self.env.obs_dim, F32)
        self.probe = ProbeLoss(learner, collect_probe(session, book, plan))
        self.book, self.seed = book, plan.run.seed
        self.costs = Costs(plan.env.lot, plan.env.multiplier, plan.env.fee_per_lot)
        # the ticks every evaluation visits (the same seeded starts each time)
        self.path = tick_path(book.session_last(), self.env.starts, plan.run.seed,
                              self.env.seeded_cursors(), plan.eval.steps)  # fmt: skip
        window = plan.eval.sharpe_window
        self.holds = {
            name: play(book, self.costs, self.path, window, hold(d))
            for name, d in (("flat", 0), ("buy_and_hold", 1), ("sell_and_hold", -1))
        }
        self.last: Reading | None = None  # the latest evaluation's ledgers (the tear sheet's)

    def due(self, t: int, steps: int) -> bool:
        """Whether an evaluation runs after env step `t` (`eval.first`, every `eval.every`, the
        end)."""
        return self.cfg.due(t, steps)

    def run(self) -> dict[str, float]:
        """One evaluation, start to end (see `steps`)."""
        steps = self.steps()
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def steps(self) -> Generator[None, None, dict[str, float]]:
        """One evaluation as a generator that yields after each of its env steps (a pack's other
        runs go on meanwhile) and returns its metrics: the agent's ledger figures (eval/pnl net of
        costs, eval/pnl_gross, eval/cost_spread, eval/cost_fees, eval/turnover, eval/exposure,
        eval/max_drawdown, eval/hit_rate, eval/pnl_per_env_kstep: ledger.UNITS) and eval/sharpe over
        its `sharpe_window` intervals (with their number and their PnL's skewness and kurtosis);
        eval/capture_ratio and eval/trades of the closed trades; eval/aux_accuracy (the share of
        steps whose next mid move the aux head called right, p_up > 0.5 for up, over the steps where
        the mid moved); each baseline's figures under eval/baseline/<name>/; and the probe's
        eval/l_q_probe and eval/q_probe_mean."""
        env, c = self.env, self.cfg
        env.reset()
        targets = np.zeros((c.steps, env.num_envs), np.int64)
        trades, realised, available = 0, 0.0, 0.0
        right, labeled = 0, 0
        be, a = self.policy.learner.backend, env.arrays
        for s in range(c.steps):
            env.perceive(self.h)
            env.step(self.policy.act(self.h), self.policy.p_up)
            targets[s] = direction(be.download(a["eff_action"]))
            r, n = aux_calls(be, self.policy.p_up, a["fill_mid"], a["post_mid"])
            right, labeled = right + r, labeled + n
            if (s + 1) % c.sharpe_window == 0 or s + 1 == c.steps:
                stats = env.harvest_trade_stats()
                trades += stats.trades
                realised += stats.realised
                available += stats.available
            yield
        agent = settle(self.book, self.costs, self.path, targets, c.sharpe_window)
        rand = matched_random(self.book, self.costs, self.path, c.sharpe_window, self.seed,
                              agent.turnover)  # fmt: skip
        self.last = Reading(agent, self.holds | {"random": rand})
        out = ledger_metrics(agent, eval_key)
        out[SHARPE_INTERVALS] = float(agent.intervals.size)
        for name, stats in self.last.baselines.items():
            figures = ledger_metrics(stats, lambda f, n=name: baseline_key(n, f))
            out |= {k: v for k, v in figures.items() if np.isfinite(v)}  # none: undefined
        return (
            out
            | {
                CAPTURE: realised / available if available > 0 else float("nan"),
                TRADES: float(trades),
                "eval/aux_accuracy": right / labeled if labeled else float("nan"),
            }
            | self.probe.run()
        )
