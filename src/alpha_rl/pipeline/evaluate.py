"""Held-out evaluation: the greedy policy on the held-out split, in environments of its own,
and the TD loss on the probe set (pipeline/probe.py).

Every evaluation resets its `eval.num_envs` environments to the same seeded start ticks of the
held-out book, so successive evaluations differ only by the network. There is no exploration, no
HER and no replay; the env kernels read the run's ISV (reward weights) but nothing writes it.
The greedy actions are the run's (with α: on Q + w_α aux) and the env pays c6 on the run's aux
head, exactly as in training.
The trade metrics come from closed trades only (PnL in USD); hindsight rewards never enter them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from alpha_rl.agent import GreedyPolicy, Learner, aux_calls
from alpha_rl.env import Environment
from alpha_rl.market.book import Book
from alpha_rl.pipeline.config import Plan
from alpha_rl.pipeline.probe import ProbeLoss, collect_probe
from alpha_rl.session import Session
from alpha_rl.vocabulary import (
    CAPTURE,
    PNL,
    PNL_KURTOSIS,
    PNL_SKEW,
    SHARPE,
    SHARPE_INTERVALS,
    TRADES,
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

    def due(self, t: int, steps: int) -> bool:
        """Whether an evaluation runs after env step `t` (`eval.first`, every `eval.every`, the
        end)."""
        return self.cfg.due(t, steps)

    def run(self) -> dict[str, float]:
        """eval/pnl, eval/sharpe (with its number of intervals and their PnL's skewness and
        kurtosis), eval/capture_ratio, eval/trades, eval/aux_accuracy (the share
        of steps whose next mid move the aux head called right, p_up > 0.5 for up, over the steps
        where the mid moved) and the probe's eval/l_q_probe and eval/q_probe_mean of one
        evaluation."""
        env, c = self.env, self.cfg
        env.reset()
        pnl, trades, realised, available = [], 0, 0.0, 0.0
        done, right, labeled = 0, 0, 0
        be, a = self.policy.learner.backend, env.arrays
        while done < c.steps:
            for _ in range(min(c.sharpe_window, c.steps - done)):
                env.perceive(self.h)
                env.step(self.policy.act(self.h), self.policy.p_up)
                done += 1
                r, n = aux_calls(be, self.policy.p_up, a["fill_mid"], a["post_mid"])
                right, labeled = right + r, labeled + n
            stats = env.harvest_trade_stats()
            pnl.append(stats.realised)
            trades += stats.trades
            realised += stats.realised
            available += stats.available
        skew, kurtosis = moments(np.asarray(pnl))
        return {
            PNL: realised,
            SHARPE: sharpe(np.asarray(pnl)),
            SHARPE_INTERVALS: float(len(pnl)),
            PNL_SKEW: skew,
            PNL_KURTOSIS: kurtosis,
            CAPTURE: realised / available if available > 0 else float("nan"),
            TRADES: float(trades),
            "eval/aux_accuracy": right / labeled if labeled else float("nan"),
        } | self.probe.run()
