"""What a run returns to a hyper-parameter search: one held-out figure (conf/objective/).

Every run computes it at its end from its own diag.jsonl (so a resumed run counts the
evaluations of its first start too), logs it as the metric `search/objective` and returns it
from the task function, which is what the Optuna sweeper (alpha_rl.search) reads. A run that does
not finish (diverged, failed, stopped) returns NaN: the search records that trial as failed.

`objective=margin` is the calendar backtest's net margin over a declared baseline (the run's
net PnL on the held-out span less the baseline's on the very same ticks,
pipeline/evaluation/backtest.py): a run with it ends with the backtest whatever its market.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from alpha_rl.errors import ConfigError
from alpha_rl.pipeline.report.curves import read_series
from alpha_rl.portable import mean

METRIC = "search/objective"
STATISTICS = ("iqm", "mean", "last")
DIRECTIONS = ("maximize", "minimize")
MARGIN = "backtest/margin"  # objective.metric of the margin over objective.baseline
BASELINES = ("flat", "buy_and_hold", "sell_and_hold")  # the backtest's trivial baselines


@dataclass(frozen=True)
class Objective:
    """`statistic` of `metric` over the evaluations in the last `window` of training; with
    `baseline`, the backtest's margin over it (the one figure at the run's end)."""

    metric: str
    window: float
    statistic: str
    direction: str
    baseline: str | None = None  # objective=margin: the baseline the margin is over

    @classmethod
    def from_cfg(cls, cfg: DictConfig) -> Objective:
        """From conf/objective/*.yaml (`objective.*`); raises ConfigError naming the bad key."""
        o = cfg.objective
        metric, statistic, direction = str(o.metric), str(o.statistic), str(o.direction)
        window, baseline = float(o.window), None
        if metric == MARGIN:
            baseline = str(o.get("baseline", "auto"))
            if baseline == "auto":  # a market of real prices is judged against holding it
                baseline = "flat" if cfg.market.name == "synthetic_waves" else "buy_and_hold"
            if baseline not in BASELINES:
                raise ConfigError(f"objective.baseline={baseline!r}: one of auto, "
                                  f"{', '.join(BASELINES)}")  # fmt: skip
        elif not metric.startswith("eval/"):
            raise ConfigError(
                f"objective.metric={metric!r}: a search judges held-out figures; "
                "name an eval/ metric (eval/pnl, eval/sharpe, eval/capture_ratio) or "
                f"{MARGIN} (objective=margin)"
            )
        if not 0.0 < window <= 1.0:
            raise ConfigError(
                f"objective.window={window}: the last fraction of training whose "
                "evaluations count must be in (0, 1]"
            )
        if statistic not in STATISTICS:
            raise ConfigError(f"objective.statistic={statistic!r}: one of {', '.join(STATISTICS)}")
        if direction not in DIRECTIONS:
            raise ConfigError(f"objective.direction={direction!r}: one of {', '.join(DIRECTIONS)}")
        return cls(metric, window, statistic, direction, baseline)

    @property
    def source(self) -> str:
        """The metric of the run's log it is computed from."""
        if self.baseline is None:
            return self.metric
        return f"backtest/baseline/{self.baseline}/margin"

    def describe(self) -> str:
        if self.baseline is not None:
            return f"the held-out net margin over {self.baseline} (the calendar backtest)"
        return f"{self.statistic} of {self.metric} over the last {self.window:g} of training"

    def value(self, diag: Path, steps: int, last: tuple[int, dict] | None = None) -> float:
        """The objective of a run of `steps` steps from its diag.jsonl and `last`, the (step,
        metrics) of its last log point not yet written; NaN when no evaluation of the metric falls
        in the window (or one of them is not finite)."""
        series = read_series(diag, finite_only=False) if diag.is_file() else {}
        at, values = series.get(self.source, (np.zeros(0, int), np.zeros(0)))
        if last is not None and self.source in last[1]:
            at, values = np.append(at, last[0]), np.append(values, float(last[1][self.source]))
        kept = values[at > (1.0 - self.window) * steps]
        if kept.size == 0 or not np.all(np.isfinite(kept)):
            return float("nan")
        if self.statistic == "last":
            return float(kept[-1])
        if self.statistic == "mean":
            return float(mean(kept))
        return interquartile_mean(kept)


def interquartile_mean(values: np.ndarray) -> float:
    """The mean of `values` after cutting int(n / 4) of them from each end (the values
    scipy.stats.trim_mean(values, 0.25) keeps), added in the project's order (portable.mean), so
    a run's objective is the same on every CPU."""
    x = np.sort(np.asarray(values, np.float64))
    cut = int(0.25 * x.size)
    return float(mean(x[cut : x.size - cut]))
