"""The judgements that compare a treatment arm with its baseline, pair by pair: criterion 5 (no
destabilisation, on comparable data: the geometric mean of the pairs' ratios), the rate of runs
that broke, no held-out harm (the benefit metric's paired difference), the seed's literal l_q row
(INFO) and the held-out evaluation at the end of training (INFO): each arm's mean and IQM, the
probability of improvement and the paired difference.

A deciding statistical row carries its one-sided `Test`; `decide` settles it for the whole check
under Holm's correction. Off the axes where it decides (`deciding` in the criteria), criterion 5
is an INFO row with its p-value in the evidence.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from alpha_rl.killcheck.aggregate import Estimate, arm_stats, improvement, stratum, t_estimate
from alpha_rl.killcheck.axes import Axis
from alpha_rl.killcheck.broken import broke
from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.criteria import (
    INFO,
    NOT_EVALUATED,
    PENDING,
    Judgement,
    Test,
)
from alpha_rl.killcheck.fmt import fmt, fmt_interval, fmt_p
from alpha_rl.killcheck.pairs import Pair
from alpha_rl.killcheck.speed import window_mean
from alpha_rl.killcheck.stats import TMean, t_mean
from alpha_rl.killcheck.values import (
    HEAVY,
    SKEWED,
    end_values,
    excess_kurtosis,
    pair_window,
    paired_differences,
    paired_end_values,
    skewness,
)
from alpha_rl.tracking import RunRecord
from alpha_rl.vocabulary import BASELINES, HELD_OUT, L_Q, PNL, PROBE, baseline_key

PROBE_TAG = "probe_digest"
PROBE_KEY, LITERAL_KEY = PROBE, L_Q
HELD_OUT_KEYS = HELD_OUT
NOT_COMPARABLE = {
    "her": "HER's batches hold synthetic rows (peak or forward PnL, done = 1) at boosted "
    "priority, another regression problem",
    "agent": "each learner's l_q is its own loss (C51: a cross-entropy; n-step: n-step targets) "
    "over its own replay batches",
}
VS_BASELINE = "held-out pnl: {arm} vs the best trivial baseline in hindsight"
BENEFIT = "7 no held-out harm ({metric})"


def _pair_values(pairs: list[Pair], key: str, crit: Criteria,
                 log_ratio: bool) -> tuple[list[dict], dict[str, list[float]]]:  # fmt: skip
    """Each pair's evidence on `key` and its value by stratum (the pair's fold): the log of the
    ratio of the window means (log_ratio) or their difference; pairs with a broken run, different
    probe sets or no values are skipped, saying why."""
    each, values = [], {}
    for treated, base in pairs:
        out = {"treatment": treated.run_id, "baseline": base.run_id}
        start, end = pair_window(treated, base, crit)
        broken = broke(treated, crit) or broke(base, crit)
        digests = (treated.tags.get(PROBE_TAG), base.tags.get(PROBE_TAG))
        t = window_mean(treated, key, start, end)
        b = window_mean(base, key, start, end)
        if broken:
            out["skip"] = f"a run broke: {broken}"
        elif key == PROBE_KEY and digests[0] != digests[1]:
            out["skip"] = f"the runs' probe sets differ (probe_digest {digests[0]} vs {digests[1]})"
        elif not (np.isfinite(t) and np.isfinite(b)):
            out["skip"] = f"no {key} in the window of one run"
        elif log_ratio and not (t > 0 and b > 0):
            out["skip"] = f"{key} <= 0: no ratio"
        else:
            out["value"] = math.log(t / b) if log_ratio else t - b
            out["ratio" if log_ratio else "difference"] = t / b if log_ratio else t - b
            values.setdefault(stratum(treated), []).append(out["value"])
        each.append(out)
    return each, values


def _count(values: dict[str, list[float]]) -> int:
    return sum(len(v) for v in values.values())


def _skipped(each: list[dict]) -> str:
    skipped = [e["skip"] for e in each if "skip" in e]
    return f" ({len(skipped)} skipped: {skipped[0]})" if skipped else ""


def judge_stability(pairs: list[Pair], crit: Criteria, decides: bool) -> Judgement:
    """Criterion 5: the treatment's `stability_metric` same or better than the baseline's over
    the last `window` of training: per pair the log of the ratio of window means; across pairs
    their mean with a t-interval stratified by fold, shown as the geometric mean ratio. The test:
    H0 the true ratio <= 1 + tolerance. INFO (never deciding) off the axes whose set names it."""
    key = crit.stability_metric
    name = f"5 no destabilisation ({key})"
    bound = math.log1p(crit.tolerance)
    threshold = f"geometric-mean ratio not above {1 + crit.tolerance:g} (one-sided t on logs)"
    if not decides:
        threshold = (
            "reported: a learner's probe loss is not a fault here (deciding: "
            f"{', '.join(crit.deciding_for('other'))})"
        )
    if not pairs:
        return Judgement(name, "no pairs", threshold, NOT_EVALUATED, decides)
    each, values = _pair_values(pairs, key, crit, log_ratio=True)
    return _tested(name, each, values, key, threshold, decides, crit, bound, log=True)


def judge_benefit(pairs: list[Pair], crit: Criteria) -> Judgement:
    """No held-out harm: the paired difference treatment - baseline of `benefit_metric` over the
    pair's window, its mean with a stratified t-interval, tested both ways against -margin: the
    margin `benefit_margin` (the metric's units), or `benefit_margin_sd` standard deviations of
    the paired differences (a standardised margin, tested exactly by the noncentral t)."""
    key = crit.benefit_metric
    name = BENEFIT.format(metric=key)
    each, values = _pair_values(pairs, key, crit, log_ratio=False)
    if crit.benefit_margin is not None:
        margin = float(crit.benefit_margin)
        threshold = f"paired difference against -{fmt(margin)} (one-sided t each way)"
        row = _tested(name, each, values, key, threshold, True, crit, -margin, log=False)
    else:
        c = float(crit.benefit_margin_sd)
        threshold = (f"paired difference against -{c:g} x the sd of the paired differences "
                     "(one-sided noncentral t each way)")  # fmt: skip
        row = _tested(name, each, values, key, threshold, True, crit, math.nan, log=False,
                      standardised=c)  # fmt: skip
    row.evidence["margin"] = -row.evidence.get("bound", math.nan)
    return row


def _noncentral(m: TMean, c: float) -> tuple[float, float]:
    """(p of harm, p of harmlessness) of H0 mean = -c sd from the t statistic mean / se, which
    at the bound is noncentral t with df and noncentrality -c sqrt(n) (sd = se sqrt(n))."""
    if m.se == 0:  # every pair alike: no spread, so the bound is 0 itself
        return (0.0, 1.0) if m.mean < 0 else (1.0, 0.0)
    t, nc = m.mean / m.se, -c * math.sqrt(m.n)
    return float(stats.nct.cdf(t, m.df, nc)), float(stats.nct.sf(t, m.df, nc))


def _tested(
    name: str,
    each: list[dict],
    values: dict[str, list[float]],
    key: str,
    threshold: str,
    decides: bool,
    crit: Criteria,
    bound: float,
    log: bool,
    standardised: float | None = None,
) -> Judgement:
    """A row of one-sided t-tests of the pairs' `values` against `bound`, both ways: on log
    ratios harm is a mean above it (shown as the geometric-mean ratio), on differences a mean
    below it. `standardised` c: the bound is -c standard deviations of the values themselves,
    H0 mean / sd = -c, tested by the noncentral t (exact for normal values). NOT-EVALUATED,
    saying why and what to do, without two comparable pairs."""
    m = t_mean(values)
    evidence: dict = {"metric": key, "pairs": each}
    if not math.isfinite(m.se):
        why = next((e["skip"] for e in each if "skip" in e), "fewer than two comparable pairs")
        hint = ""
        if "probe sets" in why:
            hint = "; stability_metric=loss/l_q_real reads the batches"
        elif why.startswith("no ") and not log:
            hint = f"; the runs need held-out evaluations (eval.every > 0) logging {key}"
        if why.startswith("a run broke") or why.startswith("fewer than"):  # more seeds may
            evidence["not_judged"] = f"{m.n} comparable pairs: {why}"  # bring pairs (or the
            # rate of broken runs decides): waiting, not a treatment that cannot be judged
        return Judgement(name, f"{m.n} pairs to compare: {why}{hint}", threshold, NOT_EVALUATED,
                         decides, evidence)  # fmt: skip
    lo, hi = m.interval(crit.confidence)
    shown = (f"geometric-mean ratio {fmt_interval(*np.exp([m.mean, lo, hi]))}" if log
             else f"paired difference {fmt_interval(m.mean, lo, hi, sign=True)}")  # fmt: skip
    if standardised is not None:
        bound = -standardised * m.sd
        p, safe = _noncentral(m, standardised)
    else:
        p = m.p_above(bound) if log else m.p_below(bound)
        safe = m.p_below(bound) if log else m.p_above(bound)
    evidence |= {
        "mean": m.mean,
        "low": lo,
        "high": hi,
        "bound": bound,
        "se": m.se,
        "df": m.df,
        "n": m.n,
        "strata": len(values),
        "p": p,
        "p_within": safe,
        "scale": "log ratio" if log else "difference",
    }
    if log:
        evidence["geometric_mean"] = float(np.exp(m.mean))
        ratios = [e["ratio"] for e in evidence["pairs"] if "ratio" in e]
        evidence["arithmetic_mean_of_ratios"] = float(np.mean(ratios))
    value = f"{shown} over {m.n} pairs{_in_folds(values)}, {fmt_p(p)}; within: {fmt_p(safe)}"
    value += _skipped(evidence["pairs"])
    evidence["skewness"] = skew = skewness(values)
    if math.isfinite(skew) and (skew if log else -skew) <= -SKEWED:  # a tail away from harm
        value += (f"; skewed away from harm (skewness {skew:+.2g}): the t-test may KILL more "
                  "often than its level (docs/verdicts.md, the rule's limits)")  # fmt: skip
    if standardised is not None:
        evidence["excess_kurtosis"] = heavy = excess_kurtosis(values)
        if math.isfinite(heavy) and heavy >= HEAVY:
            value += (f"; heavy-tailed (excess kurtosis {heavy:.2g}): a margin in sds may KILL "
                      "more often than its level, set benefit_margin in the metric's units "
                      "(docs/verdicts.md, the rule's limits)")  # fmt: skip
    test = Test(p, lambda level: m.seeds_to_decide(bound, level), p_safe=safe, strata=m.strata)
    if not decides:
        return Judgement(name, value, threshold, INFO, False, evidence)
    return Judgement(name, value, threshold, PENDING, True, evidence, test=test)


def literal_row(pairs: list[Pair], axis: Axis, crit: Criteria) -> Judgement:
    """The seed's literal criterion 5, l_q over each arm's whole batch (INFO): why it cannot
    decide, in one line."""
    name = "l_q over the whole batch (the seed's)"
    why = NOT_COMPARABLE.get(axis.name, "each arm's l_q is over its own replay batches")
    threshold = f"not comparable across arms: {why}"
    each, logs = _pair_values(pairs, LITERAL_KEY, crit, log_ratio=True)
    if not logs:
        return Judgement(name, "no l_q in the pairs", threshold, NOT_EVALUATED, False,
                         {"pairs": each})  # fmt: skip
    est, lo, hi = t_estimate(logs, crit, log=True)
    n = _count(logs)
    evidence = {"pairs": each, "ratio": {"geometric_mean": est, "low": lo, "high": hi, "n": n}}
    return Judgement(name, f"geometric-mean ratio {fmt_interval(est, lo, hi)} over {n} pairs"
                     f"{_in_folds(logs)}", threshold, INFO, False, evidence)  # fmt: skip


def _in_folds(values: dict[str, list[float]]) -> str:
    """` in 4 folds` (a stratified interval) when the values come from more than one fold."""
    return f" in {len(values)} folds" if len(values) > 1 else ""


def judge_folds(pairs: list[Pair], crit: Criteria) -> list[Judgement]:
    """A row per fold of a walk-forward study (INFO): criterion 5's ratio and the held-out PnL's
    paired difference within the fold, so a result that holds in one regime only shows."""
    folds = sorted({stratum(t) for t, _ in pairs}, key=_fold_order)
    if len(folds) < 2:
        return []
    key, benefit = crit.stability_metric, crit.benefit_metric
    _, logs = _pair_values(pairs, key, crit, log_ratio=True)
    _, diffs = _pair_values(pairs, benefit, crit, log_ratio=False)
    rows = []
    for fold in folds:
        n = sum(stratum(t) == fold for t, _ in pairs)
        parts = [f"{n} pairs"]
        if fold in logs:
            ratio = t_estimate({fold: logs[fold]}, crit, log=True)
            parts.append(f"{key} geometric-mean ratio {fmt_interval(*ratio)}")
        if fold in diffs:
            diff = t_estimate({fold: diffs[fold]}, crit)
            parts.append(f"held-out {benefit.split('/', 1)[1]} difference "
                         f"{fmt_interval(*diff, sign=True)}")  # fmt: skip
        rows.append(Judgement(f"fold {fold}", "; ".join(parts),
                              "reported per fold: the criteria decide over all folds",
                              INFO, False, {"log_ratios": logs.get(fold, []),
                                            "differences": diffs.get(fold, [])}))  # fmt: skip
    return rows


def _fold_order(fold: str) -> tuple[int, str]:
    return (int(fold), "") if fold.isdigit() else (1 << 30, fold)


def judge_held_out(pairs: list[Pair], labels: tuple[str, str], crit: Criteria) -> list[Judgement]:
    """Per held-out metric every run has (INFO, never deciding): each arm's mean and IQM over
    the last `window` of training with stratified-bootstrap intervals, P(treatment > baseline),
    and the paired difference."""
    treated = list({t.run_id: t for t, _ in pairs}.values())
    bases = list({b.run_id: b for _, b in pairs}.values())
    tl, bl = labels
    rows = []
    for key in HELD_OUT_KEYS:
        if not all(run.metrics.get(key) for run in treated + bases):
            continue
        metric = key.split("/", 1)[1]
        t_vals, b_vals = end_values(treated, key, crit), end_values(bases, key, crit)
        if not t_vals or not b_vals:
            rows.append(Judgement(f"held-out {metric} at the end", "no values in the window",
                                  "reported", NOT_EVALUATED, False, {"metric": key}))  # fmt: skip
            continue
        t_arm, b_arm = arm_stats(t_vals, crit), arm_stats(b_vals, crit)
        poi = improvement(paired_end_values(pairs, key, crit), crit)
        diff = t_estimate(paired_differences(pairs, key, crit), crit)
        evidence = {"metric": key, "treatment": vars(t_arm), "baseline": vars(b_arm),
                    "probability_of_improvement": poi, "paired_difference": diff,
                    "treatment_values": t_vals, "baseline_values": b_vals}  # fmt: skip
        where = f"reported: mean over the last {crit.window:.0%} of training, per run"
        if metric == "sharpe":  # the windows' Sharpe: named by its interval, never annualised
            where += "; eval/sharpe is per eval.sharpe_window steps, not annualised"
        rows += [
            Judgement(f"held-out {metric} at the end: mean",
                      f"{tl} {fmt_interval(*t_arm.mean)} vs {bl} {fmt_interval(*b_arm.mean)}; "
                      f"paired difference {fmt_interval(*diff, sign=True)}", where, INFO, False,
                      evidence),
            Judgement(f"held-out {metric} at the end: IQM",
                      f"{tl} {fmt_interval(*t_arm.iqm)} vs {bl} {fmt_interval(*b_arm.iqm)}",
                      "reported: interquartile mean across runs", INFO, False),
            Judgement(f"held-out {metric}: P({tl} > {bl})",
                      f"{fmt_interval(*poi)} over {t_arm.n} x {b_arm.n} runs",
                      "reported: 0.5 = no difference", INFO, False),
        ]  # fmt: skip
    return rows


def margin_over_baselines(run: RunRecord, crit: Criteria) -> tuple[float, str] | None:
    """A run's held-out net PnL less its best trivial baseline's, both as means over the last
    `window` of its training, and that baseline's name; None for a run without baselines."""
    start = (1 - crit.window) * run.last_step
    means = {name: window_mean(run, baseline_key(name, "pnl"), start) for name in BASELINES}
    means = {name: v for name, v in means.items() if np.isfinite(v)}
    agent = window_mean(run, PNL, start)
    if not means or not np.isfinite(agent):
        return None
    best = max(means, key=lambda name: means[name])
    return agent - means[best], best


def margin_reading(estimate: Estimate, n: int) -> str:
    """What the mean margin over the best trivial baseline shows, from its (mean, low, high) over
    `n` runs: above or below that baseline only where the interval excludes 0."""
    _, lo, hi = estimate
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return f"nothing shown (no interval{' from one run' * (n < 2)})"
    if lo > 0:
        return "shown above the best trivial policy"
    if hi < 0:
        return "shown below the best trivial policy"
    return "not shown above the best trivial policy (the interval holds 0)"


def judge_baselines(pairs: list[Pair], labels: tuple[str, str], crit: Criteria) -> list[Judgement]:
    """Per arm (INFO, never deciding): each run's held-out net PnL less the best of its trivial
    baselines on the same windows (flat, buy-and-hold, sell-and-hold, random at its turnover),
    the mean with its interval and what that interval shows, how many runs were above their best
    (each one run's net, no interval), and which baseline was best."""
    arms = ({t.run_id: t for t, _ in pairs}, {b.run_id: b for _, b in pairs})
    rows = []
    for label, runs in zip(labels, arms, strict=True):
        margins: dict[str, list[float]] = {}
        best: dict[str, int] = {}
        for run in runs.values():
            found = margin_over_baselines(run, crit)
            if found is None:
                continue
            margins.setdefault(stratum(run), []).append(found[0])
            best[found[1]] = best.get(found[1], 0) + 1
        n = sum(len(v) for v in margins.values())
        if n == 0:
            continue  # runs recorded before the baselines were
        above = sum(v > 0 for vs in margins.values() for v in vs)
        bests = ", ".join(f"{name} x{k}" for name, k in sorted(best.items(), key=lambda i: -i[1]))
        estimate = t_estimate(margins, crit) if n >= 2 else (next(iter(margins.values()))[0],
                                                              math.nan, math.nan)  # fmt: skip
        rows.append(Judgement(
            VS_BASELINE.format(arm=label),
            f"mean margin {fmt_interval(*estimate, sign=True)} over {n} run{'s' * (n > 1)}: "
            f"{margin_reading(estimate, n)}; {above} of {n} runs above their best baseline, "
            f"each one run's net (no interval); best: {bests}",
            f"reported: net of costs, mean over the last {crit.window:.0%} of training; the "
            "best chosen after the fact (no policy knows beforehand whether to hold long or "
            f"short); shown above or below it only where the mean margin's {crit.confidence:.0%} "
            "interval over the runs (stratified t) excludes 0", INFO, False,
            {"margins": margins, "best_baselines": best, "n": n},
        ))  # fmt: skip
    return rows
