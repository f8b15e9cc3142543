"""The decision rule measured: simulated studies of known truth through the real judging code.

Each scenario builds, per simulated experiment, the run records a study of `seeds` seeds (times
`folds` walk-forward folds) would log: per run a held-out probe loss (`eval/l_q_probe`) and PnL
(`eval/pnl`) at a known level, with a seed effect shared by the two runs of a pair (and a fold
effect shared by a fold's runs), the HER metrics of a healthy run, and optionally failed runs.
`judge` then pairs, judges and decides them exactly as `alpha-rl-kill-check` does, and the
table gives how often a check KILLed:

- at the boundary of the criteria (probe ratio exactly 1 + tolerance, PnL difference exactly
  -benefit_margin) a KILL is false: its rate must stay at or below `alpha`, per treatment and
  family-wise over several treatments (Holm), with diverged runs in both arms and with folds;
- against a 30% effect (probe ratio 1.3, or PnL 30% below the baseline's) it is right: power.

Then the coverage of the INFO intervals at `seeds` runs (the arm mean, its IQM, the paired
difference, the probability of improvement) for each candidate method: the percentile bootstrap
(the check's before), BCa, the t-interval and Yuen's trimmed-mean interval.

The Monte Carlo margin of a rate p over E experiments is 2 sqrt(p (1 - p) / E) (two standard
errors); the tests assert rates against alpha plus that margin.
"""

from __future__ import annotations

import math
import time
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from alpha_rl import vocabulary as vocab
from alpha_rl.errors import AlphaRlError
from alpha_rl.her_variant import TREATMENTS, HerVariant, from_params
from alpha_rl.tracking import RunRecord
from alpha_rl.vocabulary import L_Q, PNL, PROBE

EVALS = np.arange(1000, 10001, 1000)  # evaluation and log steps of a simulated run
PNL_LEVEL, PNL_SEED_SD, PNL_RUN_SD = 50_000.0, 10_000.0, 5_000.0
PROBE_LEVEL, PROBE_SEED_SD = 0.4, 0.3  # log-scale seed effect
FOLD_SD = 0.5  # log-scale (probe) and x PNL_SEED_SD (PnL) fold effects, large on purpose
POINT_SD = 0.02  # relative noise of one evaluation
# each HER variant's params, as a run records them (alpha_rl.her_variant)
HER = {v.value: v.params() for v in HerVariant}


@dataclass(frozen=True)
class Scenario:
    """One simulated study design and its truth."""

    name: str
    ratio: float | str = 1.0  # the probe's true treatment / baseline ratio ("boundary": 1 + tol)
    pnl_shift: float | str = 0.0  # true PnL difference (USD; "boundary": -margin)
    treatments: tuple[str, ...] = ("backward",)  # HER values, or key values on the "arm" axis
    fail: float = 0.0  # probability that a run (of either arm) diverges
    folds: int | None = None  # None: the calibration's own folds
    log_spread: float = 0.2  # sd of a pair's log probe ratio
    expect: str = "false"  # "false": a KILL is an error; "power": a KILL is right


def scenarios(tolerance: float) -> list[Scenario]:
    """The suite's scenarios (the boundary at the criteria's own tolerance)."""
    return [
        Scenario("identical arms"),
        Scenario("probe ratio at the boundary", ratio="boundary", pnl_shift=PNL_RUN_SD * 10),
        Scenario("PnL at the boundary", pnl_shift="boundary"),
        Scenario("both at their boundaries", ratio="boundary", pnl_shift="boundary"),
        Scenario("3 HER treatments at the boundaries", ratio="boundary", pnl_shift="boundary",
                 treatments=tuple(v.value for v in TREATMENTS)),
        Scenario("5 treatments of a key at the PnL boundary", pnl_shift="boundary",
                 treatments=("a1", "a2", "a3", "a4", "a5")),
        Scenario("2% of runs diverge in both arms", fail=0.02),
        Scenario("2% diverge, 5 key treatments", fail=0.02, treatments=("a1", "a2", "a3", "a4",
                                                                          "a5")),
        Scenario("4 folds with fold effects, boundary", ratio="boundary", pnl_shift="boundary",
                 folds=4),
        Scenario("probe ratio 1.3 (power)", ratio=1.3, pnl_shift=PNL_RUN_SD * 10,
                 expect="power"),
        Scenario("PnL 30% lower (power)", pnl_shift=-0.3 * PNL_LEVEL, expect="power"),
        Scenario("every run of the treatment diverges (power)", fail=-1.0, expect="power"),
    ]  # fmt: skip


def _run(rid: str, params: dict[str, str], tags: dict[str, str], probe: np.ndarray,
         pnl: np.ndarray, failed: bool) -> RunRecord:  # fmt: skip
    steps = [int(s) for s in EVALS]
    loss = np.full(EVALS.size, 0.3)
    if failed:  # diverged: its loss went NaN and it ended FAILED with the reason
        loss[-1] = probe[-1] = np.nan
        tags = tags | {"alpha_rl.failure_reason": "non-finite loss/l_q (diverged)"}
    metrics = {
        PROBE: list(zip(steps, probe.tolist(), strict=True)),
        PNL: list(zip(steps, pnl.tolist(), strict=True)),
        L_Q: list(zip(steps, loss.tolist(), strict=True)),
    }
    if from_params(params, rid) not in (None, HerVariant.OFF):  # a healthy, audited HER run
        zeros = [(s, 0.0) for s in steps]
        metrics |= {vocab.HER_INJECT_TOTAL: [(s, 3.0 * s) for s in steps],
                    vocab.HER_BACKWARD_TOTAL: [(s, 2.0 * s) for s in steps],
                    vocab.TRAIN_TRADES: [(s, 5000.0) for s in steps],
                    vocab.HER_FORWARD_CLOSES: [(s, 50.0 * s) for s in steps],
                    vocab.HER_FORWARD_OVERWRITTEN: zeros, vocab.HER_FORWARD_EXPIRED: zeros,
                    "audit/her_track": zeros, "audit/her_inject": zeros}  # fmt: skip
    status = "FAILED" if failed else "FINISHED"
    return RunRecord(rid, rid, status, params, tags, metrics)


def simulate(sc: Scenario, seeds: int, folds: int, tolerance: float, margin: float,
             rng: np.random.Generator) -> tuple[list[RunRecord], str]:  # fmt: skip
    """The runs of one simulated study, and the axis they vary on."""
    ratio = 1 + tolerance if sc.ratio == "boundary" else float(sc.ratio)
    shift = -margin if sc.pnl_shift == "boundary" else float(sc.pnl_shift)
    her = all(t in HER for t in sc.treatments)
    axis = "her" if her else "calib.arm"
    folds = sc.folds or folds
    runs: list[RunRecord] = []
    for fold in range(folds):
        fold_probe, fold_pnl = rng.normal(0, FOLD_SD, 2) if folds > 1 else (0.0, 0.0)
        for seed in range(seeds):
            a = math.log(PROBE_LEVEL) + fold_probe + rng.normal(0, PROBE_SEED_SD)
            p0 = PNL_LEVEL + fold_pnl * PNL_SEED_SD + rng.normal(0, PNL_SEED_SD)
            base = {"seed": str(seed), "agent.lr": "0.0003"}
            if folds > 1:
                base["market.fold"] = str(fold)
            tags = {"probe_digest": f"probe{fold}.{seed}", "audit": "every 2000 steps"}
            for value in ("off" if her else "a0", *sc.treatments):
                treated = value not in ("off", "a0")
                params = dict(base)
                if her:
                    params |= HER[value]
                else:
                    params |= HER[HerVariant.OFF.value] | {"calib.arm": value}
                # each run's own noise: half the pair's log-ratio variance
                level = a + rng.normal(0, sc.log_spread / math.sqrt(2))
                level += math.log(ratio) if treated else 0.0
                probe = math.exp(level) * (1 + rng.normal(0, POINT_SD, EVALS.size))
                pnl = p0 + (shift if treated else 0.0) + rng.normal(0, PNL_RUN_SD)
                pnl_curve = pnl + rng.normal(0, POINT_SD * PNL_RUN_SD, EVALS.size)
                failed = (treated and sc.fail < 0) or (sc.fail > 0 and rng.random() < sc.fail)
                rid = f"f{fold}s{seed}{value}"
                runs.append(_run(rid, params, tags, probe, pnl_curve, failed))
    return runs, axis


def _judge(crit, runs: list[RunRecord], axis_name: str) -> dict[str, str]:
    """Each treatment's verdict from the check itself (its deciding rows only)."""
    from alpha_rl.killcheck.axes import axis_for
    from alpha_rl.killcheck.judge import judge

    axis = axis_for(axis_name, "a0" if axis_name == "calib.arm" else None)
    treatments, _, _ = judge(runs, axis, crit, info=False)
    return {t.value: t.verdict for t in treatments}


@dataclass
class Rate:
    """Kills over experiments: per treatment and any (family-wise)."""

    per_treatment: float
    any: float
    cannot: float  # share of treatments that could not be judged
    experiments: int

    def margin(self, rate: float) -> float:
        return 2 * math.sqrt(max(rate * (1 - rate), 1e-12) / self.experiments)


def kill_rates(sc: Scenario, crit, seeds: int, folds: int, experiments: int, seed: int = 0,
               judge: Callable | None = None) -> Rate:  # fmt: skip
    """How often the check killed in `experiments` simulated studies of scenario `sc`."""
    rng = np.random.default_rng([seed, zlib.crc32(sc.name.encode())])
    judge = judge or (lambda runs, axis: _judge(crit, runs, axis))
    per, anyk, cannot, total = 0, 0, 0, 0
    for _ in range(experiments):
        runs, axis = simulate(sc, seeds, folds, crit.tolerance, crit.benefit_margin, rng)
        verdicts = judge(runs, axis)
        kills = sum(v == "KILL" for v in verdicts.values())
        per += kills
        anyk += kills > 0
        cannot += sum(v == "CANNOT-JUDGE" for v in verdicts.values())
        total += len(verdicts)
    return Rate(per / max(total, 1), anyk / experiments, cannot / max(total, 1), experiments)


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


def calibrate(crit, seeds: int, folds: int, experiments: int) -> str:
    """The calibration table for these criteria, seeds and folds, as text."""
    for option, value, least in (("--seeds", seeds, 2), ("--folds", folds, 1),
                                 ("--experiments", experiments, 1)):  # fmt: skip
        if value < least:
            raise AlphaRlError(f"--calibrate {option} {value}: give at least {least}")
    started = time.monotonic()
    lines = [f"calibration: {experiments} simulated studies per scenario, {seeds} seeds x "
             f"{folds} fold(s), alpha {crit.alpha:g} (family-wise), tolerance "
             f"{crit.tolerance:g}, benefit_margin {crit.benefit_margin:g}, min_seeds "
             f"{crit.min_seeds}",
             f"{'scenario':<44} {'KILL/treatment':>15} {'KILL any':>9} {'CANNOT':>7}  reads",
             "-" * 96]  # fmt: skip
    for sc in scenarios(crit.tolerance):
        r = kill_rates(sc, crit, seeds, folds, experiments)
        if sc.expect == "false":
            ok = r.any <= crit.alpha + r.margin(crit.alpha)
            reads = f"false KILL; <= alpha + {r.margin(crit.alpha):.3f}: {'yes' if ok else 'NO'}"
        else:
            reads = "power (a KILL is right)"
        lines.append(f"{sc.name:<44} {r.per_treatment:>15.3f} {r.any:>9.3f} {r.cannot:>7.3f}  "
                     f"{reads}")  # fmt: skip
    cov = coverage(seeds, crit.confidence, max(experiments // 2, 50))
    lines += ["", f"coverage of {crit.confidence:g} intervals at {seeds} runs (nominal "
              f"{crit.confidence:g}):"]  # fmt: skip
    for figure, methods in cov.items():
        lines.append(f"  {figure:<18} " + "  ".join(f"{m} {v:.3f}" for m, v in methods.items()))
    lines.append(f"({time.monotonic() - started:.0f} s)")
    return "\n".join(lines)
