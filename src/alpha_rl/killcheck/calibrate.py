"""The decision rule measured: simulated studies of known truth through the real judging code.

Each scenario builds, per simulated experiment, the run records a study would log: per run a
held-out probe loss (`eval/l_q_probe`) and PnL (`eval/pnl`) at a known level, with a seed effect
shared by the runs of a seed (and a fold effect shared by a fold's runs), the HER metrics of a
healthy run, and optionally failed runs. The check then pairs, judges and decides them exactly
as `alpha-rl-kill-check` does: at one look (a fixed design of `seeds` pairs per fold), or look by
look as `alpha-rl-study` does (a staged design: seeds added in stages until each treatment is
decided). Each scenario's truth says which verdicts are errors:

- inside the tolerances (identical arms, diverged runs alike in both arms): a KILL is false, a
  KEEP is right (its rate is the power to keep);
- at the boundary (probe ratio exactly 1 + tolerance, PnL difference exactly -margin): a KILL and
  a KEEP are both false: their rates must stay at or below alpha and beta, family-wise over
  several treatments, with diverged runs, across folds, under heavy-tailed and skewed noise;
- harmful (probe ratio 1.3, PnL 30% lower, every run diverging): a KEEP is false, a KILL right.

A pair's own noise (the difference between its two runs) is normal, Student's t with 3 degrees
of freedom (heavy tails) or a gamma of skewness 0.5 (skewed, the long tail toward a false KILL:
left on the probe's log ratio, right on the PnL difference), each scaled to the same standard
deviation. Heavy tails are measured twice: with the held-out margin in sds of the pairs'
differences (the default; an sd estimated from heavy-tailed values moves the margin itself, a
stated limit) and with the same margin fixed in USD.

The Monte Carlo margin of a rate p over E experiments is 2 sqrt(p (1 - p) / E) (two standard
errors); the tests assert rates against alpha (or beta) plus a margin.
"""

from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass, replace

import numpy as np

from alpha_rl import vocabulary as vocab
from alpha_rl.errors import AlphaRlError
from alpha_rl.her_variant import TREATMENTS, HerVariant, from_params
from alpha_rl.killcheck.sequential import Design
from alpha_rl.tracking import RunRecord
from alpha_rl.vocabulary import L_Q, PNL, PROBE

EVALS = np.arange(1000, 10001, 1000)  # evaluation and log steps of a simulated run
PNL_LEVEL, PNL_SEED_SD, PNL_RUN_SD = 50_000.0, 10_000.0, 5_000.0
PROBE_LEVEL, PROBE_SEED_SD = 0.4, 0.3  # log-scale seed effect
FOLD_SD = 0.5  # log-scale (probe) and x PNL_SEED_SD (PnL) fold effects, large on purpose
POINT_SD = 0.02  # relative noise of one evaluation
# each HER variant's params, as a run records them (alpha_rl.her_variant)
HER = {v.value: v.params() for v in HerVariant}
NOISES = ("normal", "t3", "skewed")
SKEW_SHAPE = 16.0  # the skewed noise's gamma shape: skewness 2 / sqrt(shape) = 0.5
INSIDE, BOUNDARY, HARMFUL = "inside", "boundary", "harmful"


@dataclass(frozen=True)
class Scenario:
    """One simulated study design and its truth."""

    name: str
    ratio: float | str = 1.0  # the probe's true treatment / baseline ratio ("boundary": 1 + tol)
    pnl_shift: float | str = 0.0  # true PnL difference (USD; "boundary": -margin)
    treatments: tuple[str, ...] = ("backward",)  # HER values, or key values on the "arm" axis
    fail: float = 0.0  # probability that a run (of either arm) diverges; < 0: every treated run
    folds: int | None = None  # None: the calibration's own folds
    fold_noise: tuple[float, ...] = ()  # per fold, a factor on the pairs' own noise (unequal)
    fold_sizes: tuple[int, ...] = ()  # at one look: seeds per fold (unequal folds)
    noise: str = "normal"  # the pairs' own noise: normal, t3 or skewed
    log_spread: float = 0.2  # sd of a pair's log probe ratio
    truth: str = INSIDE  # inside, boundary or harmful (which verdicts are errors)
    limit: bool = False  # beyond what the rule holds its levels for: measured, stated, not held
    margin_in_units: bool = False  # the held-out margin fixed in USD (benefit_margin), not sds


def scenarios() -> list[Scenario]:
    """The suite's scenarios (boundaries at the criteria's own tolerance and margin)."""
    keys5 = ("a1", "a2", "a3", "a4", "a5")
    edge = {"ratio": "boundary", "pnl_shift": "boundary", "truth": BOUNDARY}
    return [
        Scenario("identical arms"),
        Scenario("probe ratio at the boundary", ratio="boundary", truth=BOUNDARY),
        Scenario("PnL at the boundary", pnl_shift="boundary", truth=BOUNDARY),
        Scenario("both at their boundaries", **edge),
        Scenario("3 HER treatments at the boundaries", treatments=tuple(v.value for v in
                                                                        TREATMENTS), **edge),
        Scenario("5 key treatments at the PnL boundary", pnl_shift="boundary", treatments=keys5,
                 truth=BOUNDARY),
        Scenario("2% of runs diverge in both arms", fail=0.02),
        Scenario("10% diverge, 5 key treatments", fail=0.10, treatments=keys5),
        Scenario("4 folds with fold effects, boundary", folds=4, **edge),
        Scenario("unequal folds (2/3/5/10, small noisier)", ratio="boundary", folds=4,
                 fold_sizes=(2, 3, 5, 10), fold_noise=(2.0, 1.5, 1.0, 0.7), truth=BOUNDARY),
        Scenario("heavy tails (t3), margin in USD, boundary", noise="t3", margin_in_units=True,
                 **edge),
        Scenario("heavy tails (t3), margin in sds, boundary", noise="t3", limit=True, **edge),
        Scenario("skewed noise (skewness 0.5), boundary", noise="skewed", limit=True, **edge),
        Scenario("probe ratio 1.3 (harmful)", ratio=1.3, truth=HARMFUL),
        Scenario("PnL 30% lower (harmful)", pnl_shift=-0.3 * PNL_LEVEL, truth=HARMFUL),
        Scenario("every treated run diverges (harmful)", fail=-1.0, truth=HARMFUL),
    ]  # fmt: skip


PAIR_PNL_SD = PNL_RUN_SD * math.sqrt(2)  # the true sd of a pair's PnL difference


def margin_of(crit) -> float:
    """The true held-out harm margin the criteria set for the simulated runs: benefit_margin,
    or benefit_margin_sd sds of a pair's PnL difference."""
    if crit.benefit_margin is not None:
        return float(crit.benefit_margin)
    return crit.benefit_margin_sd * PAIR_PNL_SD


def draw(noise: str, rng: np.random.Generator, harm: float) -> float:
    """One unit-variance draw of the pairs' own noise; skewed: the long tail toward `harm`'s
    sign (toward a false KILL)."""
    if noise == "t3":
        return float(rng.standard_t(3) / math.sqrt(3.0))
    if noise == "skewed":  # a gamma of shape SKEW_SHAPE centred and scaled: skewness 0.5
        return float(harm * (rng.gamma(SKEW_SHAPE) - SKEW_SHAPE) / math.sqrt(SKEW_SHAPE))
    return float(rng.normal())


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


def simulate(sc: Scenario, seeds: int, folds: int, crit, rng: np.random.Generator,
             sizes: bool = True) -> tuple[list[RunRecord], str]:  # fmt: skip
    """The runs of one simulated study (`seeds` per fold, or with `sizes` the scenario's fold
    sizes where it has them), and the axis they vary on."""
    ratio = 1 + crit.tolerance if sc.ratio == "boundary" else float(sc.ratio)
    shift = -margin_of(crit) if sc.pnl_shift == "boundary" else float(sc.pnl_shift)
    her = all(t in HER for t in sc.treatments)
    folds = sc.folds or folds
    runs: list[RunRecord] = []
    for fold in range(folds):
        fold_probe, fold_pnl = rng.normal(0, FOLD_SD, 2) if folds > 1 else (0.0, 0.0)
        spread = sc.fold_noise[fold] if sc.fold_noise else 1.0
        for seed in range(sc.fold_sizes[fold] if sc.fold_sizes and sizes else seeds):
            a = math.log(PROBE_LEVEL) + fold_probe + rng.normal(0, PROBE_SEED_SD)
            p0 = PNL_LEVEL + fold_pnl * PNL_SEED_SD + rng.normal(0, PNL_SEED_SD)
            base = {"seed": str(seed), "agent.lr": "0.0003"}
            if folds > 1:
                base["market.fold"] = str(fold)
            tags = {"probe_digest": f"probe{fold}.{seed}", "audit": "every 2000 steps"}
            # the baseline run's own noise; each treated run adds the pair's own difference
            b_probe = a + rng.normal(0, sc.log_spread / math.sqrt(2))
            b_pnl = p0 + rng.normal(0, PNL_RUN_SD)
            for value in ("off" if her else "a0", *sc.treatments):
                treated = value not in ("off", "a0")
                params = dict(base) | HER[value if her else HerVariant.OFF.value]
                if not her:
                    params["calib.arm"] = value
                level, pnl = b_probe, b_pnl
                if treated:
                    level += math.log(ratio) + spread * sc.log_spread * draw(sc.noise, rng, -1)
                    pnl += shift + spread * PAIR_PNL_SD * draw(sc.noise, rng, 1)
                probe = math.exp(level) * (1 + rng.normal(0, POINT_SD, EVALS.size))
                pnl_curve = pnl + rng.normal(0, POINT_SD * PNL_RUN_SD, EVALS.size)
                failed = (treated and sc.fail < 0) or (sc.fail > 0 and rng.random() < sc.fail)
                runs.append(_run(f"f{fold}s{seed}{value}", params, tags, probe, pnl_curve,
                                 failed))  # fmt: skip
    return runs, "her" if her else "calib.arm"


def study(runs: list[RunRecord], axis_name: str, crit, design: Design) -> tuple[dict, int]:
    """One simulated study judged look by look as `alpha-rl-study` judges (a one-look design:
    the single check): each treatment's verdict, and the seeds per fold the study ran."""
    from alpha_rl.killcheck.axes import axis_for
    from alpha_rl.killcheck.staged import Progress, judge_look

    axis = axis_for(axis_name, "a0" if axis_name == "calib.arm" else None)
    values = {v for r in runs if (v := axis.value(r)) is not None and not axis.is_baseline(v)}
    progress = Progress(design)
    by_seed: dict[int, list[RunRecord]] = {}
    for run in runs:
        by_seed.setdefault(int(run.params["seed"]), []).append(run)
    seeds = 0
    for n in design.looks:
        if progress.finished or not values - set(progress.decided):
            break
        seeds = n
        chosen = [r for s, rs in by_seed.items() if s < n or len(design.looks) == 1 for r in rs]
        judge_look(progress, chosen, axis, crit, values, info=False)
    return {v: d["verdict"] for v, d in progress.decided.items()}, seeds


@dataclass
class Rates:
    """Verdicts over experiments: per treatment, any (family-wise), and seeds used."""

    kill: float  # share of treatments killed
    kill_any: float  # share of experiments with any treatment killed
    keep: float
    keep_any: float
    undecided: float
    cannot: float
    seeds_mean: float
    seeds_p95: float
    experiments: int

    def margin(self, rate: float) -> float:
        return 2 * math.sqrt(max(rate * (1 - rate), 1e-12) / self.experiments)


def rates(sc: Scenario, crit, design: Design, folds: int, experiments: int,
          seed: int = 0) -> Rates:  # fmt: skip
    """How often the check killed and kept in `experiments` simulated studies of `sc` under
    `design` (a one-look design of n pairs: the fixed check at n seeds per fold)."""
    rng = np.random.default_rng([seed, zlib.crc32(sc.name.encode())])
    if sc.margin_in_units:  # the same true margin, fixed in the metric's units
        crit = replace(crit, benefit_margin=margin_of(crit), benefit_margin_sd=None)
    counts = dict.fromkeys(("KILL", "KEEP", "UNDECIDED", "CANNOT-JUDGE"), 0)
    kill_any = keep_any = total = 0
    used = []
    for _ in range(experiments):
        runs, axis = simulate(sc, design.looks[-1], folds, crit, rng, len(design.looks) == 1)
        verdicts, seeds = study(runs, axis, crit, design)
        for verdict in verdicts.values():
            counts[verdict] += 1
        kill_any += "KILL" in verdicts.values()
        keep_any += "KEEP" in verdicts.values()
        total += len(verdicts)
        used.append(seeds)
    share = {k: v / max(total, 1) for k, v in counts.items()}
    return Rates(share["KILL"], kill_any / experiments, share["KEEP"], keep_any / experiments,
                 share["UNDECIDED"], share["CANNOT-JUDGE"], float(np.mean(used)),
                 float(np.percentile(used, 95)), experiments)  # fmt: skip


def reads(sc: Scenario, r: Rates, crit) -> tuple[str, bool]:
    """What a scenario's rates say, and whether its errors are within their levels (alpha or
    beta plus two standard errors of the rate at that level)."""
    ok, parts = True, []
    if sc.truth in (INSIDE, BOUNDARY):
        fine = r.kill_any <= crit.alpha + r.margin(crit.alpha)
        ok &= fine
        parts.append(f"false KILL <= alpha + {r.margin(crit.alpha):.3f}: "
                     f"{'yes' if fine else 'NO'}")  # fmt: skip
    if sc.truth in (BOUNDARY, HARMFUL):
        fine = r.keep_any <= crit.beta + r.margin(crit.beta)
        ok &= fine
        parts.append(f"false KEEP <= beta + {r.margin(crit.beta):.3f}: "
                     f"{'yes' if fine else 'NO'}")  # fmt: skip
    if sc.limit:
        parts.append("a stated limit of the rule")
        ok = True
    if sc.truth == INSIDE:
        parts.append("KEEP is right")
    if sc.truth == HARMFUL:
        parts.append("KILL is right")
    return "; ".join(parts), ok


def right_rate(sc: Scenario, r: Rates) -> float | None:
    """The share of studies whose verdict was right (KEEP inside the tolerances, KILL beyond
    them); None at the boundary, where no verdict is right."""
    return {INSIDE: r.keep, HARMFUL: r.kill}.get(sc.truth)


def fixed_equivalent(sc: Scenario, crit, power: float, folds: int, experiments: int,
                     most: int = 80, step: int = 5) -> float | None:  # fmt: skip
    """The pairs a one-look check needs to be right as often as `power` (seeds per fold, linear
    between the grid's points of `step`; None beyond `most`)."""
    below, rate_below = 0, 0.0
    for n in range(step, most + 1, step):
        rate = right_rate(sc, rates(sc, crit, Design.single(n), folds, experiments)) or 0.0
        if rate >= power:
            if rate == rate_below:
                return float(n)
            return below + (n - below) * (power - rate_below) / (rate - rate_below)
        below, rate_below = n, rate
    return None


def calibrate(crit, seeds: int, folds: int, experiments: int,
              design: Design | None = None) -> str:  # fmt: skip
    """The calibration table for these criteria and design (a one-look design of `seeds` pairs
    per fold without one), as text."""
    for option, value, least in (("--seeds", seeds, 2), ("--folds", folds, 1),
                                 ("--experiments", experiments, 1)):  # fmt: skip
        if value < least:
            raise AlphaRlError(f"--calibrate {option} {value}: give at least {least}")
    design = design or Design.single(seeds)
    started = time.monotonic()
    how = (f"{seeds} seeds" if len(design.looks) == 1 else
           f"looks at {', '.join(map(str, design.looks))} seeds (spending g "
           f"{design.gamma:g})")  # fmt: skip
    lines = [f"calibration: {experiments} simulated studies per scenario, {how} x {folds} "
             f"fold(s), alpha {crit.alpha:g} and beta {crit.beta:g} (family-wise), tolerance "
             f"{crit.tolerance:g}, margin {crit.margin_text()}, broken_margin "
             f"{crit.broken_margin:g}, min_seeds {crit.min_seeds}",
             f"{'scenario':<42} {'KILL':>6} {'any':>6} {'KEEP':>6} {'any':>6} {'UNDEC':>6} "
             f"{'CANNOT':>6} {'seeds':>6} {'p95':>4}  reads", "-" * 140]  # fmt: skip
    measured = {}
    for sc in scenarios():
        r = measured[sc.name] = rates(sc, crit, design, folds, experiments)
        text, _ = reads(sc, r, crit)
        lines.append(f"{sc.name:<42} {r.kill:>6.3f} {r.kill_any:>6.3f} {r.keep:>6.3f} "
                     f"{r.keep_any:>6.3f} {r.undecided:>6.3f} {r.cannot:>6.3f} "
                     f"{r.seeds_mean:>6.1f} {r.seeds_p95:>4.0f}  {text}")  # fmt: skip
    if len(design.looks) > 1:
        lines += ["", "seeds to a decision against a fixed design (one look) right as often, "
                  f"{max(experiments // 4, 50)} studies a point:"]  # fmt: skip
        for sc in scenarios():
            if sc.truth == BOUNDARY or sc.limit or sc.fail:
                continue
            r = measured[sc.name]
            power = right_rate(sc, r)
            fixed = fixed_equivalent(sc, crit, power, folds, max(experiments // 4, 50))
            share = f"{r.seeds_mean / fixed:.0%} of it" if fixed else "beyond 80 seeds"
            lines.append(
                f"  {sc.name:<40} right {power:.3f} in {r.seeds_mean:.1f} seeds on "
                f"average; fixed design: {fixed or float('nan'):.1f} seeds; {share}"
            )
    lines.append(f"({time.monotonic() - started:.0f} s)")
    return "\n".join(lines)
