"""Coverage of the kill check's INFO intervals, measured: simulated normal runs (the calibration's
levels and spreads) and the share of studies whose interval at the check's confidence held the
true value, per figure (the arm mean, its IQM, the paired difference, the probability of
improvement) and candidate method (the percentile bootstrap, BCa, the t-interval, Yuen's
trimmed-mean interval)."""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats

from alpha_rl.killcheck.calibrate import PNL_LEVEL, PNL_RUN_SD, PNL_SEED_SD

METHODS = {
    "mean": ("percentile", "BCa", "t"),
    "IQM": ("percentile", "BCa", "Yuen"),
    "paired difference": ("percentile", "t"),
    "P(X > Y)": ("percentile",),
}


def coverage(seeds: int, confidence: float, experiments: int, resamples: int = 999,
             seed: int = 0) -> dict[str, dict[str, float]]:  # fmt: skip
    """Per INFO figure and method, the share of simulated studies (normal runs, one split) whose
    interval at `confidence` held the true value."""
    from alpha_rl.killcheck.aggregate import prob_improvement
    from alpha_rl.killcheck.stats import t_mean, yuen_interval

    rng = np.random.default_rng([seed, 7])
    sd = math.hypot(PNL_SEED_SD, PNL_RUN_SD)
    hits: dict[str, dict[str, int]] = {k: dict.fromkeys(v, 0) for k, v in METHODS.items()}

    def boot(samples, statistic, method: str) -> tuple[float, float]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = stats.bootstrap(samples, statistic, confidence_level=confidence,
                                  n_resamples=resamples, method=method, vectorized=True,
                                  random_state=rng)  # fmt: skip
        return res.confidence_interval.low, res.confidence_interval.high

    iqm = lambda x, axis=-1: stats.trim_mean(x, 0.25, axis=axis)  # noqa: E731
    poi = lambda x, y, axis=-1: prob_improvement(x, y)  # noqa: E731
    for _ in range(experiments):
        x = PNL_LEVEL + rng.normal(0, sd, seeds)  # one arm's runs
        shared = rng.normal(0, PNL_SEED_SD, seeds)
        d = (shared + rng.normal(0, PNL_RUN_SD, seeds)) - (shared + rng.normal(0, PNL_RUN_SD,
                                                                              seeds))  # fmt: skip
        y = PNL_LEVEL + rng.normal(0, sd, seeds)
        found = {
            ("mean", "t"): t_mean({"all": list(x)}).interval(confidence),
            ("IQM", "Yuen"): yuen_interval(x, confidence)[1:],
            ("paired difference", "t"): t_mean({"all": list(d)}).interval(confidence),
        }
        for method in ("percentile", "BCa"):
            found["mean", method] = boot((x,), np.mean, method)
            found["IQM", method] = boot((x,), iqm, method)
        found["paired difference", "percentile"] = boot((d,), np.mean, "percentile")
        found["P(X > Y)", "percentile"] = boot((x, y), poi, "percentile")
        truth = {"mean": PNL_LEVEL, "IQM": PNL_LEVEL, "paired difference": 0.0, "P(X > Y)": 0.5}
        for (figure, method), (lo, hi) in found.items():
            hits[figure][method] += bool(lo <= truth[figure] <= hi)
    return {k: {m: n / experiments for m, n in v.items()} for k, v in hits.items()}


def coverage_text(seeds: int, confidence: float, experiments: int) -> str:
    """The coverage table at `seeds` runs, as the calibration prints it."""
    lines = [f"coverage of {confidence:g} intervals at {seeds} runs (nominal {confidence:g}):"]
    for figure, methods in coverage(seeds, confidence, experiments).items():
        lines.append(f"  {figure:<18} " + "  ".join(f"{m} {v:.3f}" for m, v in methods.items()))
    return "\n".join(lines)
