"""The judgements that compare a treatment arm with its baseline, pair by pair: criterion 5 (no
destabilisation, on comparable data), the seed's literal l_q row (INFO) and the held-out
evaluation at the end of training (INFO): each arm's mean and IQM, the probability of
improvement and the paired difference."""

from __future__ import annotations

import numpy as np

from alpha_rl.killcheck.aggregate import arm_stats, improvement, stratified_mean, stratum
from alpha_rl.killcheck.axes import Axis
from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.criteria import INFO, KILL, NOT_EVALUATED, PASS, Judgement, interval
from alpha_rl.killcheck.pairs import Pair
from alpha_rl.killcheck.speed import window_mean
from alpha_rl.tracking import RunRecord

FAILURE_TAG = "alpha_rl.failure_reason"
PROBE_TAG = "probe_digest"
PROBE_KEY, LITERAL_KEY = "eval/l_q_probe", "loss/l_q"
HELD_OUT_KEYS = ("eval/pnl", "eval/sharpe", "eval/capture_ratio")
NOT_COMPARABLE = {
    "her": "HER's batches hold synthetic rows (peak or forward PnL, done = 1) at boosted "
    "priority, another regression problem",
    "agent": "each learner's l_q is its own loss (C51: a cross-entropy; n-step: n-step targets) "
    "over its own replay batches",
}


def fmt(x: float) -> str:
    """A number for the table: thousands separated from 1000 on, 4 significant digits below."""
    if not np.isfinite(x):
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def fmt_interval(est: float, lo: float, hi: float, sign: bool = False) -> str:
    """`est [lo, hi]`, `est [no interval]` without bounds."""

    def f(x: float) -> str:
        return ("+" if sign and x >= 0 else "") + fmt(x)

    bounds = f"[{f(lo)}, {f(hi)}]" if np.isfinite(lo) and np.isfinite(hi) else "[no interval]"
    return f"{f(est)} {bounds}"


def _window(treated: RunRecord, base: RunRecord, crit: Criteria) -> tuple[float, int]:
    end = min(treated.last_step, base.last_step)
    return (1 - crit.window) * end, end


def _pair_stability(treated: RunRecord, base: RunRecord, key: str, crit: Criteria) -> dict:
    """The evidence of one pair on `key`: ratio of window means, blow-up, non-finite values."""
    _, t = treated.series(key)
    _, b = base.series(key)
    _, literal = treated.series(LITERAL_KEY)
    start, end = _window(treated, base, crit)
    out = {"treatment": treated.run_id, "baseline": base.run_id,
           "points": [int(t.size), int(b.size)]}  # fmt: skip
    if FAILURE_TAG in treated.tags or not (np.isfinite(t).all() and np.isfinite(literal).all()):
        out["kill"] = treated.tags.get(FAILURE_TAG, f"non-finite {key} or l_q in the treatment")
        return out
    digests = (treated.tags.get(PROBE_TAG), base.tags.get(PROBE_TAG))
    if key == PROBE_KEY and digests[0] != digests[1]:
        out["skip"] = f"the runs' probe sets differ (probe_digest {digests[0]} vs {digests[1]})"
        return out
    if t.size == 0 or b.size == 0 or not np.isfinite(b).all():
        out["skip"] = f"no {key} in one run" if t.size * b.size == 0 else f"baseline {key} NaN"
        return out
    out["ratio"] = window_mean(treated, key, start, end) / window_mean(base, key, start, end)
    out["max_ratio"] = float(t.max() / b.max()) if b.max() > 0 else float("inf")
    if out["max_ratio"] > crit.blowup_factor:
        out["kill"] = f"max {key} {t.max():.4g} > {crit.blowup_factor} x baseline max {b.max():.4g}"
    return out


def _ratios(pairs: list[Pair], key: str,
            crit: Criteria) -> tuple[list[dict], dict[str, list[float]]]:  # fmt: skip
    """Each pair's stability evidence, and the finite ratios by stratum (the pair's fold)."""
    each = [_pair_stability(t, b, key, crit) for t, b in pairs]
    ratios: dict[str, list[float]] = {}
    for (treated, _), e in zip(pairs, each, strict=True):
        if np.isfinite(e.get("ratio", np.nan)):
            ratios.setdefault(stratum(treated), []).append(e["ratio"])
    return each, ratios


def _count(values: dict[str, list[float]]) -> int:
    return sum(len(v) for v in values.values())


def judge_stability(pairs: list[Pair], crit: Criteria) -> Judgement:
    """Criterion 5: the treatment's `stability_metric` same or better than the baseline's over
    the last `window` of training, across pairs (bootstrap interval of the ratio of window
    means), no NaN/inf (in it or in l_q), no blow-up."""
    key = crit.stability_metric
    name = f"5 no destabilisation ({key})"
    threshold = f"ratio CI low <= {1 + crit.tolerance:g}, max <= {crit.blowup_factor:g}x, finite"
    if not pairs:
        return Judgement(name, "no pairs", threshold, NOT_EVALUATED)
    each, ratios = _ratios(pairs, key, crit)
    evidence: dict = {"metric": key, "pairs": each}
    killed = [e for e in each if "kill" in e]
    if killed:
        return Judgement(name, f"{len(killed)} of {len(each)} treatment runs: {killed[0]['kill']}",
                         threshold, KILL, True, evidence)  # fmt: skip
    if not ratios:
        why = next((e["skip"] for e in each if "skip" in e), "no comparable values")
        hint = "; stability_metric=loss/l_q_real reads the batches" if key == PROBE_KEY else ""
        return Judgement(name, f"no pair to compare: {why}{hint}", threshold, NOT_EVALUATED, True,
                         evidence)  # fmt: skip
    est, lo, hi = stratified_mean(ratios, crit)
    n = _count(ratios)
    evidence["ratio"] = {"mean": est, "low": lo, "high": hi, "n": n, "strata": len(ratios)}
    skipped = len(each) - n
    value = f"ratio {fmt_interval(est, lo, hi)} over {n} pairs{_in_folds(ratios)}"
    value += f" ({skipped} skipped)" if skipped else ""
    return Judgement(name, value, threshold, KILL if lo > 1 + crit.tolerance else PASS, True,
                     evidence)  # fmt: skip


def literal_row(pairs: list[Pair], axis: Axis, crit: Criteria) -> Judgement:
    """The seed's literal criterion 5, l_q over each arm's whole batch (INFO): why it cannot
    decide, in one line."""
    name = "l_q over the whole batch (the seed's)"
    why = NOT_COMPARABLE.get(axis.name, "each arm's l_q is over its own replay batches")
    threshold = f"not comparable across arms: {why}"
    each, ratios = _ratios(pairs, LITERAL_KEY, crit)
    if not ratios:
        return Judgement(name, "no l_q in the pairs", threshold, NOT_EVALUATED, False,
                         {"pairs": each})  # fmt: skip
    est, lo, hi = stratified_mean(ratios, crit)
    n = _count(ratios)
    evidence = {"pairs": each, "ratio": {"mean": est, "low": lo, "high": hi, "n": n}}
    return Judgement(name, f"ratio {fmt_interval(est, lo, hi)} over {n} pairs{_in_folds(ratios)}",
                     threshold, INFO, False, evidence)  # fmt: skip


def _in_folds(values: dict[str, list[float]]) -> str:
    """` in 4 folds` (a stratified interval) when the values come from more than one fold."""
    return f" in {len(values)} folds" if len(values) > 1 else ""


def end_values(runs: list[RunRecord], key: str, crit: Criteria) -> dict[str, list[float]]:
    """Each run's mean of `key` over the last `window` of its training, by stratum."""
    out: dict[str, list[float]] = {}
    for run in runs:
        value = window_mean(run, key, (1 - crit.window) * run.last_step)
        if np.isfinite(value):
            out.setdefault(stratum(run), []).append(value)
    return out


def paired_differences(pairs: list[Pair], key: str, crit: Criteria) -> dict[str, list[float]]:
    """Per stratum, each pair's treatment - baseline mean of `key` over the pair's window."""
    out: dict[str, list[float]] = {}
    for t, b in pairs:
        start, end = _window(t, b, crit)
        d = window_mean(t, key, start, end) - window_mean(b, key, start, end)
        if np.isfinite(d):
            out.setdefault(stratum(t), []).append(d)
    return out


def judge_folds(pairs: list[Pair], crit: Criteria) -> list[Judgement]:
    """A row per fold of a walk-forward study (INFO): criterion 5's ratio and the held-out PnL's
    paired difference within the fold, so a result that holds in one regime only shows."""
    folds = sorted({stratum(t) for t, _ in pairs}, key=_fold_order)
    if len(folds) < 2:
        return []
    key = crit.stability_metric
    _, ratios = _ratios(pairs, key, crit)
    pnl = paired_differences(pairs, "eval/pnl", crit)
    rows = []
    for fold in folds:
        n = sum(stratum(t) == fold for t, _ in pairs)
        parts = [f"{n} pairs"]
        if fold in ratios:
            parts.append(f"{key} ratio {fmt_interval(*interval(ratios[fold], crit))}")
        if fold in pnl:
            parts.append(
                f"held-out pnl difference {fmt_interval(*interval(pnl[fold], crit), sign=True)}"
            )
        rows.append(Judgement(f"fold {fold}", "; ".join(parts),
                              "reported per fold: criterion 5 decides over all folds",
                              INFO, False, {"ratios": ratios.get(fold, []),
                                            "pnl_differences": pnl.get(fold, [])}))  # fmt: skip
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
        poi = improvement(t_vals, b_vals, crit)
        diff = stratified_mean(paired_differences(pairs, key, crit), crit)
        evidence = {"metric": key, "treatment": vars(t_arm), "baseline": vars(b_arm),
                    "probability_of_improvement": poi, "paired_difference": diff,
                    "treatment_values": t_vals, "baseline_values": b_vals}  # fmt: skip
        where = f"reported: mean over the last {crit.window:.0%} of training, per run"
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
