"""What a finished run says about itself: the last held-out evaluation, the l_q trend and where
the curves are, in a few lines at the end of the log."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from alpha_rl.portable import mean
from alpha_rl.tracking.records import read_diag
from alpha_rl.vocabulary import (
    BASELINES,
    CAPTURE,
    L_Q,
    PNL,
    PNL_GROSS,
    SHARPE,
    TRADES,
    baseline_key,
    eval_key,
)

COSTS = (eval_key("cost_spread"), eval_key("cost_fees"), eval_key("turnover"))
EVAL_KEYS = (PNL, PNL_GROSS, CAPTURE, SHARPE, TRADES, *COSTS,
             *(baseline_key(name, "pnl") for name in BASELINES))  # fmt: skip


def _number(value: object) -> bool:
    """Whether a diag.jsonl metric value is a number (a non-finite one is written as text)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int | float) or value in ("nan", "inf", "-inf")


def versus_baselines(metrics: dict[str, float]) -> tuple[list[str], list[str]]:
    """The baselines an evaluation's net PnL is above, and those it is not (of those logged):
    one evaluation's figures, no interval."""
    above, below = [], []
    for name in BASELINES:
        key = baseline_key(name, "pnl")
        if key in metrics and PNL in metrics:
            (above if metrics[PNL] > metrics[key] else below).append(name)
    return above, below


def signed(value: float, unit: str = "") -> str:
    """`+1,234 USD`, `-0.5`, `-` for a missing value."""
    if value is None or not math.isfinite(value):
        return "-"
    text = f"{value:+,.0f}" if abs(value) >= 100 else f"{value:+.3g}"
    return f"{text} {unit}".rstrip()


def per_env_kstep(pnl: float, envs: int, steps: int) -> float:
    """A held-out PnL summed over `envs` envs x `steps` steps, per env per 1,000 steps: one
    agent's rate, comparable across evaluation sizes."""
    return pnl / envs / steps * 1000.0


@dataclass
class Summary:
    """The figures a run ends with, gathered from its log points."""

    currency: str
    eval_envs: int
    eval_steps: int
    sharpe_window: int  # steps per interval of the evaluation's Sharpe
    l_q: list[float] = field(default_factory=list)
    last_eval: dict[str, float] = field(default_factory=dict)
    last_eval_step: int = 0
    curves: Path | None = None  # the PNG of the run's curves, once written
    backtest: list[str] = field(default_factory=list)  # the calendar backtest's lines
    title: str = ""  # what the run is (variant, seed, market), the curves' title

    def per_env_kstep(self, pnl: float) -> float:
        """A held-out PnL of this run's evaluation per env per 1,000 steps (per_env_kstep)."""
        return per_env_kstep(pnl, self.eval_envs, self.eval_steps)

    def update(self, step: int, metrics: dict[str, float]) -> None:
        """Record one log point's metrics."""
        if L_Q in metrics:
            self.l_q.append(float(metrics[L_Q]))
        if PNL in metrics:
            self.last_eval = {k: float(metrics[k]) for k in EVAL_KEYS if k in metrics}
            self.last_eval_step = step

    def read_history(self, diag: Path) -> None:
        """Record the log points of a resumed run's diag.jsonl (its steps before the resume), so
        that its summary covers the whole run; a missing file adds nothing."""
        if not diag.is_file():
            return
        for record in read_diag(diag):
            metrics = record.get("metrics")
            if isinstance(metrics, dict):
                self.update(int(record["step"]), {k: float(v) for k, v in metrics.items()
                                                  if _number(v)})  # fmt: skip

    def l_q_trend(self) -> str:
        """`0.83 -> 0.31`: the mean of the first and of the last quarter of the log points."""
        if not self.l_q:
            return "no learner updates yet"
        q = max(1, len(self.l_q) // 4)
        first, last = mean(np.array(self.l_q[:q])), mean(np.array(self.l_q[-q:]))
        return (f"{first:.4g} -> {last:.4g} (mean of the first and the last quarter of "
                f"{len(self.l_q)} log points)")  # fmt: skip

    def lines(self) -> list[str]:
        """The summary, a line per figure."""
        out = []
        e = self.last_eval
        if e:
            pnl = e.get(PNL, math.nan)
            out.append(
                f"held-out, the last evaluation (step {self.last_eval_step}, greedy, "
                f"{self.eval_envs} envs x {self.eval_steps} steps): pnl "
                f"{signed(pnl, self.currency)} in all ({signed(self.per_env_kstep(pnl))} per env "
                f"per 1,000 steps), capture "
                f"{e.get('eval/capture_ratio', math.nan):.3f}, Sharpe "
                f"{e.get('eval/sharpe', math.nan):.3g} per {self.sharpe_window}-step interval, "
                f"trades {e.get('eval/trades', 0):.0f}"
            )
            if PNL_GROSS in e:
                spread, fees = (signed(e.get(k, math.nan)).lstrip("+") for k in COSTS[:2])
                out.append(
                    f"held-out costs: gross {signed(e[PNL_GROSS], self.currency)} - spread "
                    f"{spread} - fees {fees} = net {signed(pnl)}; turnover "
                    f"{e.get(COSTS[2], math.nan):.4g} fills per env per 1,000 steps"
                )
            beat, lost = versus_baselines(e)
            if beat or lost:
                shown = ", ".join(
                    f"{name} {signed(e[baseline_key(name, 'pnl')])}"
                    for name in BASELINES
                    if baseline_key(name, "pnl") in e
                )
                said = "; ".join(f"{side} {', '.join(names)}" for side, names in
                                 (("above", beat), ("not above", lost)) if names)  # fmt: skip
                out.append(f"baselines on the same windows, net ({shown}): this run's net is "
                           f"{said} (one evaluation's windows, no interval)")  # fmt: skip
        else:
            out.append("held-out: no evaluation ran")
        out.extend(self.backtest)
        out.append(f"l_q {self.l_q_trend()}")
        if self.curves is not None:
            out.append(f"curves: {self.curves}")
        return out
