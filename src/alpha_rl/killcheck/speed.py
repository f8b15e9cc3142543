"""Learning speed on the held-out capture ratio, with censoring explicit, and the areas under the
held-out curves (which need no target).

Steps to target: a run's capture ratio is seen only at its evaluations, so a run that first
reached the pair's target at evaluation k reached it somewhere in (s_j, s_k], s_j its last
evaluation before k with a finite value (NaN, as an evaluation without a closed trade gives, tells
nothing): an interval, (0, s_k] when k is its first evaluation with a value (printed `<= s_k`),
(s_last, inf) when never (printed `> s_last`). The target is `capture_target`, or the baseline's
first evaluation plus `capture_target_frac` of its rise to its plateau (its mean over the last
`window` of training), so a curve that stays below 0 still has one; a baseline that does not rise
gives none.

Each arm's median steps come from Turnbull's nonparametric maximum-likelihood estimate (NPMLE) of
the interval-censored times: masses on the innermost intervals (a left end followed by a right end
among all the runs' ends), fitted by Wang's constrained Newton method (2007) with an EM step after
each round until the log-likelihood is within `GAP` of its maximum (a bound concavity gives; a fit
that stops short says so). The median is the middle of the estimate's median set (of an even split,
the middle of the two middle times, as R's survfit reads it) with each mass at the end of its
innermost interval, the evaluation that saw it: the steps printed. Where in its interval a mass
lies the data do not say; all at the left ends give the other end of the range (a, b] the median
lies in (printed `within (a, b]`, b the value). The median is a bound: `<= s_1` when more than
half the arm reached the target by the first evaluation, `> a` when b is infinite, half the arm or
more never having reached it (a = s_last with more than half; with exactly half, the upper middle
time is past s_last and a = (l + s_last) / 2, l the left end of the interval that takes the
cumulative mass to 1/2). Beside it, a distribution-free `confidence` interval for the
arm's median: (X_(k), X_(n+1-k)] with k from the binomial at 1/2, X_(k) taken down to the k-th
smallest left end and X_(n+1-k) up to the (n+1-k)-th smallest right end (each time lies in its
run's interval); at 95% it needs 6 runs, (0, inf) with fewer.

The speed-up is the baseline's median over the treatment's, with the range the two medians' ranges
allow. Pair by pair, the treatment was faster when its interval ends before the baseline's begins,
slower when the reverse, else undecided; a two-sided sign test over the decided pairs
(scipy.stats.binomtest) says whether the arms differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from alpha_rl.killcheck.aggregate import t_estimate
from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.criteria import INFO, NOT_EVALUATED, Judgement
from alpha_rl.killcheck.fmt import fmt_interval
from alpha_rl.killcheck.pairs import Pair
from alpha_rl.killcheck.turnbull import TIE, middle, turnbull
from alpha_rl.tracking import RunRecord
from alpha_rl.vocabulary import CAPTURE, TRAIN_CAPTURE

EXACT, FIRST, NEVER = "exact", "at the first evaluation", "never"
CAPTURE_KEYS = (CAPTURE, TRAIN_CAPTURE)


def capture_key(runs: list[RunRecord]) -> str | None:
    """eval/capture_ratio when every run has it, else trade/capture_ratio when they all do."""
    for key in CAPTURE_KEYS:
        if runs and all(run.metrics.get(key) for run in runs):
            return key
    return None


def window_mean(run: RunRecord, key: str, start: float, end: float | None = None) -> float:
    """Mean of `key` over the finite points at steps in [start, end] (NaN when there are none:
    an evaluation without a closed trade has no capture ratio)."""
    steps, values = run.series(key)
    chosen = values[(steps >= start) & (steps <= (end if end is not None else np.inf))]
    chosen = chosen[np.isfinite(chosen)]
    return float(chosen.mean()) if chosen.size else float("nan")


@dataclass(frozen=True)
class Reach:
    """When one run reached a target: in (low, high] (high = inf: never, by its last evaluation
    `low`; low = 0: at its first evaluation)."""

    kind: str
    low: float
    high: float

    def text(self) -> str:
        return {EXACT: f"({self.low:.0f}, {self.high:.0f}]", FIRST: f"<= {self.high:.0f}",
                NEVER: f"> {self.low:.0f}"}[self.kind]  # fmt: skip


def reach(run: RunRecord, key: str, target: float, end: int) -> Reach | None:
    """When `run` reached `target` on `key` (evaluations up to step `end` with a finite value: NaN
    tells nothing); None: no such evaluation."""
    steps, values = run.series(key)
    keep = (steps <= end) & np.isfinite(values)
    steps, values = steps[keep], values[keep]
    if steps.size == 0:
        return None
    hit = np.flatnonzero(values >= target)
    if hit.size == 0:
        return Reach(NEVER, float(steps[-1]), math.inf)
    k = int(hit[0])
    if k == 0:
        return Reach(FIRST, 0.0, float(steps[0]))
    return Reach(EXACT, float(steps[k - 1]), float(steps[k]))


def _target(base: RunRecord, key: str, end: int, crit: Criteria) -> float:
    """The pair's target: absolute, or the baseline's start + frac x its rise to its plateau
    (NaN when it does not rise)."""
    if crit.capture_target is not None:
        return float(crit.capture_target)
    steps, values = base.series(key)
    finite = values[np.isfinite(values) & (steps <= end)]
    plateau = window_mean(base, key, (1 - crit.window) * end, end)
    if not finite.size or not plateau > finite[0]:
        return float("nan")
    return float(finite[0] + crit.capture_target_frac * (plateau - finite[0]))


def median_ci(reaches: list[Reach], confidence: float) -> tuple[float, float]:
    """A distribution-free `confidence` interval for the arm's median time: (X_(k), X_(n+1-k)],
    k the largest with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2, widened to the k-th
    smallest left end and the (n+1-k)-th smallest right end (each time lies in its run's
    interval); (0, inf) when no k >= 1 is small enough (too few runs)."""
    n = len(reaches)
    k = int(np.sum(stats.binom.cdf(np.arange(n), n, 0.5) <= (1 - confidence) / 2))
    if k == 0:
        return 0.0, math.inf
    lows, highs = sorted(r.low for r in reaches), sorted(r.high for r in reaches)
    return float(lows[k - 1]), float(highs[n - k])


@dataclass(frozen=True)
class Median:
    """An arm's median steps to target from the Turnbull estimate: a value or a bound (`steps`),
    the range (low, high] the censoring leaves it in, a confidence interval (None: not asked),
    and the fit's convergence."""

    kind: str  # "value", "at most" (by the first evaluation), "more than" (unbounded above)
    steps: float
    low: float
    high: float
    converged: bool
    gap: float
    ci: tuple[float, float] | None = None
    confidence: float | None = None

    def text(self) -> str:
        """`3,000 (within (2,000, 3,000], 95% CI (1,000, 4,000])`, `> 12,000 (...)`."""
        bound = {"value": "", "at most": "<= ", "more than": "> "}[self.kind]
        notes = [f"within {_span(self.low, self.high)}"] if self.kind == "value" else []
        if self.ci is not None:
            notes.append(f"{self.confidence:.0%} CI {_span(*self.ci)}")
        if not self.converged:
            notes.append(f"the fit did not converge (gap {self.gap:.2g})")
        return bound + _steps(self.steps) + (f" ({', '.join(notes)})" if notes else "")

    def evidence(self) -> dict:
        return {"kind": self.kind, "steps": self.steps, "within": [self.low, self.high],
                "ci": list(self.ci) if self.ci else None, "confidence": self.confidence,
                "converged": self.converged, "gap": self.gap}  # fmt: skip


def _steps(x: float) -> str:
    return f"{x:,.0f}" if math.isfinite(x) else "inf"


def _span(low: float, high: float) -> str:
    """`(1,000, 4,000]`, `(12,000, inf)`."""
    return f"({_steps(low)}, {_steps(high)}{']' if math.isfinite(high) else ')'}"


def turnbull_median(reaches: list[Reach], confidence: float | None = None) -> Median:
    """The median of an arm's interval-censored times from Turnbull's NPMLE, with its interval at
    `confidence` when given (module docstring)."""
    fit = turnbull(np.array([r.low for r in reaches]), np.array([r.high for r in reaches]))
    keep = fit.mass > TIE  # innermost intervals the fit leaves empty hold no median
    low, high, cum = fit.low[keep], fit.high[keep], np.cumsum(fit.mass[keep])
    lo, hi = middle(cum, low), middle(cum, high)
    ci = median_ci(reaches, confidence) if confidence is not None else None
    kind = "more than" if not math.isfinite(hi) else "at most" if lo <= 0 else "value"
    return Median(kind, lo if kind == "more than" else hi, lo, hi, fit.converged, fit.gap, ci,
                  confidence)  # fmt: skip


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.inf


def _speedup(base: Median, treated: Median) -> tuple[str, dict]:
    """Baseline median / treatment median as text and evidence: a value or a bound, and the range
    the medians' ranges allow."""
    ratio = _ratio(base.steps, treated.steps)
    within = [_ratio(base.low, treated.high), _ratio(base.high, treated.low)]
    kinds = (base.kind, treated.kind)
    lower = {("more than", "value"), ("value", "at most"), ("more than", "at most")}
    upper = {("at most", "value"), ("value", "more than"), ("at most", "more than")}
    if kinds == ("value", "value"):
        text, found = f"{ratio:.3g}x", {"kind": "value", "speedup": ratio}
    elif kinds in lower:
        text, found = f">= {ratio:.3g}x (a bound: censored medians", {"kind": "lower bound",
                                                                      "low": ratio}  # fmt: skip
    elif kinds in upper:
        text, found = f"<= {ratio:.3g}x (a bound: censored medians", {"kind": "upper bound",
                                                                      "high": ratio}  # fmt: skip
    else:
        text, found = "undetermined (both medians censored alike", {"kind": "undetermined"}
    span = _allows(*within)
    text += f" ({span})" if found["kind"] == "value" else f"; {span})"
    return text, found | {"within": within}


def _allows(low: float, high: float) -> str:
    """The range of speed-ups the censoring allows, as text."""
    if not math.isfinite(high):
        return "censoring allows any" if low <= 0 else f"censoring allows {low:.3g}x or more"
    if low <= 0:
        return f"censoring allows up to {high:.3g}x"
    return f"censoring allows {low:.3g}x to {high:.3g}x"


def _arm_text(label: str, reaches: list[Reach], median: Median) -> str:
    first = [r for r in reaches if r.kind == FIRST]
    never = [r for r in reaches if r.kind == NEVER]
    parts = [f"{len(reaches) - len(never)} of {len(reaches)} reached",
             f"median {median.text()}"]  # fmt: skip
    if first:
        parts.append(f"{len(first)} at the first evaluation (<= {max(r.high for r in first):.0f})")
    if never:
        parts.append(f"{len(never)} never (> {min(r.low for r in never):.0f})")
    return f"{label}: " + ", ".join(parts)


def judge_speed(pairs: list[Pair], labels: tuple[str, str], crit: Criteria) -> Judgement:
    """Steps to the capture target: Turnbull medians per arm, their ratio, and a paired sign
    test (INFO)."""
    name, threshold = "steps to capture target", f"claimed speed-up {crit.claimed_speedup:g}x"
    key = capture_key([r for pair in pairs for r in pair])
    if key is None:
        return Judgement(name, "no capture-ratio metric in the pairs", threshold, NOT_EVALUATED,
                         False)  # fmt: skip
    each, skipped = [], []
    for treated, base in pairs:
        end = min(treated.last_step, base.last_step)
        target = _target(base, key, end, crit)
        got = (reach(treated, key, target, end), reach(base, key, target, end))
        if not np.isfinite(target) or None in got:
            why = ("the baseline's capture does not rise: no target" if not np.isfinite(target)
                   else "no evaluation with a value")  # fmt: skip
            skipped.append({"treatment": treated.run_id, "baseline": base.run_id, "why": why})
            continue
        t, b = got
        faster = t.high <= b.low
        slower = b.high <= t.low
        each.append({"treatment": treated.run_id, "baseline": base.run_id, "target": target,
                     "treatment_reach": vars(t), "baseline_reach": vars(b),
                     "treatment_faster": faster, "treatment_slower": slower})  # fmt: skip
    evidence = {"metric": key, "target": crit.target_text(), "pairs": each, "skipped": skipped}
    if not each:
        why = skipped[0]["why"] if skipped else "no pairs"
        return Judgement(name, f"no pair can be judged ({why})", threshold, NOT_EVALUATED, False,
                         evidence)  # fmt: skip
    reaches = {role: [Reach(**e[f"{role}_reach"]) for e in each]
               for role in ("treatment", "baseline")}  # fmt: skip
    medians = {role: turnbull_median(r, crit.confidence) for role, r in reaches.items()}
    speedup, evidence["speedup"] = _speedup(medians["baseline"], medians["treatment"])
    evidence["medians"] = {role: m.evidence() for role, m in medians.items()}
    faster = sum(e["treatment_faster"] for e in each)
    slower = sum(e["treatment_slower"] for e in each)
    decided = faster + slower
    p = stats.binomtest(faster, decided, 0.5).pvalue if decided else 1.0
    evidence["sign_test"] = {"faster": faster, "slower": slower, "undecided": len(each) - decided,
                             "p": p}  # fmt: skip
    arms = "; ".join(
        _arm_text(label, reaches[role], medians[role])
        for label, role in zip(labels, ("treatment", "baseline"), strict=True)
    )
    value = (f"speed-up {speedup} over {len(each)} pairs ({crit.target_text()}; {arms}); "
             f"faster in {faster}, slower in {slower} of {len(each)} pairs (sign test "
             f"p {p:.2g})")  # fmt: skip
    for why in sorted({s["why"] for s in skipped}):
        count = sum(s["why"] == why for s in skipped)
        value += f"; {count} pair{'s' * (count != 1)} not judged ({why})"
    return Judgement(name, value, threshold, INFO, False, evidence)


def _finite_steps(run: RunRecord, key: str) -> np.ndarray:
    steps, values = run.series(key)
    return steps[np.isfinite(values)]


def _area(run: RunRecord, key: str, steps: np.ndarray) -> float:
    """Trapezoidal area of `key` over `steps` (the run's own points there)."""
    s, v = run.series(key)
    values = v[np.searchsorted(s, steps)]
    return float(np.sum((values[1:] + values[:-1]) / 2 * np.diff(steps)))


def judge_area(pairs: list[Pair], key: str, crit: Criteria) -> Judgement | None:
    """The area under the held-out curve of `key` over the evaluations both runs of a pair made,
    treatment against baseline (INFO; None when a run lacks `key`): the geometric mean of the
    ratios of areas when every baseline area is positive, else (a curve at or below 0, as PnL
    on a real market can be) the mean difference of the curves' levels (area / span)."""
    runs = [r for pair in pairs for r in pair]
    if not runs or not all(r.metrics.get(key) for r in runs):
        return None
    name = f"area under held-out {key.split('/', 1)[1]}"
    each = []
    for treated, base in pairs:
        common = np.intersect1d(_finite_steps(treated, key), _finite_steps(base, key))
        if common.size < 2:
            continue
        span = float(common[-1] - common[0])
        each.append({"treatment": treated.run_id, "baseline": base.run_id,
                     "treatment_area": _area(treated, key, common),
                     "baseline_area": _area(base, key, common), "span": span})  # fmt: skip
    evidence: dict = {"metric": key, "pairs": each}
    threshold = "reported: treatment against baseline, over the evaluations both made"
    if not each:
        return Judgement(name, "no pair with two common evaluations", threshold, NOT_EVALUATED,
                         False, evidence)  # fmt: skip
    stratum = {"all": []}
    if all(e["baseline_area"] > 0 and e["treatment_area"] > 0 for e in each):
        stratum["all"] = [math.log(e["treatment_area"] / e["baseline_area"]) for e in each]
        est, lo, hi = t_estimate(stratum, crit, log=True)
        evidence["ratio"] = {"geometric_mean": est, "low": lo, "high": hi, "n": len(each)}
        value = f"geometric-mean ratio {fmt_interval(est, lo, hi)} over {len(each)} pairs"
    else:
        stratum["all"] = [(e["treatment_area"] - e["baseline_area"]) / e["span"] for e in each]
        est, lo, hi = t_estimate(stratum, crit)
        evidence["level_difference"] = {"mean": est, "low": lo, "high": hi, "n": len(each)}
        value = (f"mean level difference {fmt_interval(est, lo, hi, sign=True)} over "
                 f"{len(each)} pairs (an area <= 0: no ratio)")  # fmt: skip
    return Judgement(name, value, threshold, INFO, False, evidence)
