"""What a confirmation reports: each candidate's search value beside its confirmed value (the
shrinkage of the winner's curse), and the winner's Deflated Sharpe Ratio given every trial the
search tried."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from alpha_rl.pipeline.configure.objective import METRIC
from alpha_rl.tracking import RunRecord
from alpha_rl.vocabulary import PNL_KURTOSIS, PNL_SKEW, SHARPE, SHARPE_INTERVALS

EULER_GAMMA = 0.5772156649015329


@dataclass(frozen=True)
class Candidate:
    """One configuration to confirm: a trial's params, or the default (trial None)."""

    name: str
    trial: int | None
    params: dict[str, Any]
    search_value: float


def deflated_sharpe(
    sr: float, trials_sr: np.ndarray, n_trials: int, T: int, skew: float, kurtosis: float
) -> tuple[float, float]:
    """(DSR, SR0): the probability that the true Sharpe ratio exceeds SR0, the expected maximum
    of `n_trials` Sharpe ratios of zero-skill strategies with the trials' variance, given the
    selected strategy's estimated `sr` over T returns of that skewness and (non-excess) kurtosis
    (Bailey & López de Prado 2014, eq. 2-3). Sharpe ratios per return interval, not annualised."""
    from scipy.stats import norm

    if n_trials < 2 or trials_sr.size < 2:
        return math.nan, math.nan
    sr0 = float(np.std(trials_sr, ddof=1)) * (
        (1 - EULER_GAMMA) * norm.ppf(1 - 1 / n_trials)
        + EULER_GAMMA * norm.ppf(1 - 1 / (n_trials * math.e))
    )
    spread = 1 - skew * sr + (kurtosis - 1) / 4 * sr**2
    if T < 2 or not math.isfinite(sr) or not spread > 0:
        return math.nan, sr0
    return float(norm.cdf((sr - sr0) * math.sqrt(T - 1) / math.sqrt(spread))), sr0


def last_value(run: RunRecord, key: str) -> float:
    points = run.metrics.get(key) or []
    return float(points[-1][1]) if points else math.nan


def mean_interval(values: np.ndarray, level: float = 0.95) -> list[float]:
    """Student's t interval of the mean of `values` (runs on seeds and folds); NaN under 2."""
    from scipy.stats import t

    if values.size < 2:
        return [math.nan, math.nan]
    half = float(t.ppf(0.5 + level / 2, values.size - 1) * values.std(ddof=1)) / math.sqrt(
        values.size
    )
    return [float(values.mean()) - half, float(values.mean()) + half]


def claim(row: dict) -> str:
    """Whether a confirmed objective is above 0 (a margin: above its baseline) by its interval."""
    lo, hi = row["interval"]
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "no interval (fewer than 2 runs)"
    return "above 0" if lo > 0 else ("below 0" if hi < 0 else "not told from 0")


def report(
    study: Any, picks: list[Candidate], runs: list[RunRecord], search_runs: dict[int, RunRecord]
) -> dict:
    """Shrinkage per candidate, the trial count and the winner's DSR."""
    import optuna

    by: dict[str, list[float]] = {}
    for r in runs:
        trial = r.params.get("search.trial")
        name = "default" if trial in (None, "None", "null") else f"trial{trial}"
        by.setdefault(name, []).append(last_value(r, METRIC))
    rows = []
    for c in picks:
        values = np.array(by.get(c.name, []), np.float64)
        values = values[np.isfinite(values)]  # a confirmation run that failed has none
        confirmed = float(values.mean()) if values.size else math.nan
        rows.append(
            {
                "candidate": c.name,
                "params": c.params,
                "search": c.search_value,
                "confirmed": confirmed,
                "interval": mean_interval(values),
                "runs": int(values.size),
                "shrinkage": c.search_value - confirmed,
            }
        )
    winner = picks[1]
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    sharpes = np.array(
        [last_value(search_runs[t.number], SHARPE) for t in done if t.number in search_runs],
        np.float64,
    )
    sharpes = sharpes[np.isfinite(sharpes)]
    w = search_runs.get(winner.trial)
    dsr, sr0, sr = math.nan, math.nan, math.nan
    if w is not None:
        sr, T = last_value(w, SHARPE), last_value(w, SHARPE_INTERVALS)
        T = int(T) if math.isfinite(T) else 0
        dsr, sr0 = deflated_sharpe(
            sr,
            sharpes,
            len(study.trials),
            T,
            last_value(w, PNL_SKEW),
            last_value(w, PNL_KURTOSIS),
        )
    return {
        "study": study.study_name,
        "trials_tried": len(study.trials),
        "trials_completed": len(done),
        "candidates": rows,
        "winner": winner.name,
        "winner_sharpe": sr,
        "sharpe_of_chance": sr0,
        "deflated_sharpe_ratio": dsr,
    }


def describe(rep: dict, metric: str) -> str:
    lines = [
        f"search {rep['study']}: {rep['trials_tried']} configurations tried "
        f"({rep['trials_completed']} completed); {metric} in the search and confirmed:"
    ]
    for row in rep["candidates"]:
        lo, hi = row["interval"]
        confirmed = (f"{row['confirmed']:.6g} [{lo:.6g}, {hi:.6g}] ({row['runs']} runs, 95% t "
                     f"interval of the mean: {claim(row)})")  # fmt: skip
        if row["candidate"] == "default":
            lines.append(f"  default      confirmed {confirmed}")
            continue
        rel = row["shrinkage"] / abs(row["search"]) if row["search"] else math.nan
        lines.append(
            f"  {row['candidate']:<12} search {row['search']:.6g} -> confirmed {confirmed}: "
            f"shrank by {row['shrinkage']:.6g} ({rel:.1%})  {row['params']}"
        )
    lines.append(
        f"winner {rep['winner']}: held-out Sharpe {rep['winner_sharpe']:.4g} per "
        f"interval in the search, {rep['trials_tried']} trials' chance maximum "
        f"{rep['sharpe_of_chance']:.4g}; Deflated Sharpe Ratio "
        f"{rep['deflated_sharpe_ratio']:.4g}"
    )
    return "\n".join(lines)
