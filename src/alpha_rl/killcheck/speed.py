"""Learning speed on the held-out capture ratio, with censoring explicit, and the ratio of areas
under the held-out curves (which needs no target).

Steps to target: the first evaluation at which a run's capture ratio reached the pair's target
(`capture_target`, or `capture_target_frac` x the pair's baseline plateau: its mean over the last
`window` of training). A run that reached it at its *first* evaluation did so at some step up to
that one: a bound (left-censored, `<=`). A run that never reached it is right-censored at its last
evaluation: counted, never dropped. The speed-up of a pair, baseline steps / treatment steps,
then lies in an interval, [b_lo / t_hi, b_hi / t_lo] with 0 and infinity for the open ends; the
geometric mean over pairs lies in the geometric means of those ends. Every pair exact: a point
estimate with a bootstrap interval. An open lower end: `<= x`; an open upper end: `>= x`; both:
undetermined. (Every pair's interval is a point or open at one end, so there is no other case.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.criteria import INFO, NOT_EVALUATED, Judgement, interval
from alpha_rl.killcheck.pairs import Pair
from alpha_rl.tracking import RunRecord

EXACT, FIRST, NEVER = "exact", "at the first evaluation", "never"
CAPTURE_KEYS = ("eval/capture_ratio", "trade/capture_ratio")


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
    """When one run reached a target: `steps` (exact), or a bound: at most `steps` (FIRST) or
    more than `steps` (NEVER, the last evaluation)."""

    kind: str
    steps: int

    @property
    def low(self) -> float:
        return 0.0 if self.kind == FIRST else float(self.steps)

    @property
    def high(self) -> float:
        return float(self.steps) if self.kind != NEVER else float("inf")

    def text(self) -> str:
        return {EXACT: f"{self.steps}", FIRST: f"<= {self.steps}",
                NEVER: f"> {self.steps}"}[self.kind]  # fmt: skip


def reach(run: RunRecord, key: str, target: float, end: int) -> Reach | None:
    """When `run` reached `target` on `key` (evaluations up to step `end`); None: no evaluation."""
    steps, values = run.series(key)
    keep = steps <= end
    steps, values = steps[keep], values[keep]
    if steps.size == 0:
        return None
    hit = np.flatnonzero(values >= target)
    if hit.size == 0:
        return Reach(NEVER, int(steps[-1]))
    return Reach(FIRST if hit[0] == 0 else EXACT, int(steps[hit[0]]))


def _ratio_bounds(base: Reach, treated: Reach) -> tuple[float, float]:
    """[low, high] of baseline steps / treatment steps (0 and inf for open ends)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = base.low / treated.high if treated.high > 0 else 0.0
        hi = base.high / treated.low if treated.low > 0 else float("inf")
    return float(np.nan_to_num(lo, nan=0.0)), float(hi)


def _target(base: RunRecord, key: str, end: int, crit: Criteria) -> float:
    if crit.capture_target is not None:
        return float(crit.capture_target)
    plateau = window_mean(base, key, (1 - crit.window) * end, end)
    return crit.capture_target_frac * plateau if plateau > 0 else float("nan")


def _arm_text(label: str, reaches: list[Reach]) -> str:
    exact = sorted(r.steps for r in reaches if r.kind == EXACT)
    first = [r for r in reaches if r.kind == FIRST]
    never = [r for r in reaches if r.kind == NEVER]
    parts = [f"{len(exact) + len(first)} of {len(reaches)} reached"]
    if first:
        parts.append(f"{len(first)} at the first evaluation (<= {first[0].steps})")
    if exact:
        parts.append(f"median {int(np.median(exact))}" if len(exact) > 1 else f"at {exact[0]}")
    if never:
        parts.append(f"{len(never)} never (> {min(r.steps for r in never)})")
    return f"{label}: " + ", ".join(parts)


def judge_speed(pairs: list[Pair], labels: tuple[str, str], crit: Criteria) -> Judgement:
    """Steps to the capture target and the speed-up, censoring explicit (INFO)."""
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
            skipped.append({"treatment": treated.run_id, "baseline": base.run_id,
                            "why": "baseline plateau <= 0: no target" if not np.isfinite(target)
                            else "no evaluation"})  # fmt: skip
            continue
        t, b = got
        lo, hi = _ratio_bounds(b, t)
        each.append({"treatment": treated.run_id, "baseline": base.run_id, "target": target,
                     "treatment_reach": vars(t), "baseline_reach": vars(b), "low": lo,
                     "high": hi})  # fmt: skip
    evidence = {"metric": key, "target": crit.target_text(), "pairs": each, "skipped": skipped}
    if not each:
        why = skipped[0]["why"] if skipped else "no pairs"
        return Judgement(name, f"no pair can be judged ({why})", threshold, NOT_EVALUATED, False,
                         evidence)  # fmt: skip
    roles = zip(labels, ("treatment", "baseline"), strict=True)
    arms = "; ".join(_arm_text(label, [Reach(**e[f"{role}_reach"]) for e in each])
                     for label, role in roles)  # fmt: skip
    speedup, evidence["speedup"] = _speedup(each, crit)
    value = f"speed-up {speedup} over {len(each)} pairs ({crit.target_text()}; {arms})"
    if skipped:
        value += f"; {len(skipped)} pairs without a target"
    return Judgement(name, value, threshold, INFO, False, evidence)


def _speedup(each: list[dict], crit: Criteria) -> tuple[str, dict]:
    """The geometric-mean speed-up as text and evidence: a value with an interval, a bound or
    undetermined."""
    lows, highs = np.array([e["low"] for e in each]), np.array([e["high"] for e in each])
    with np.errstate(divide="ignore"):
        lo = float(np.exp(np.mean(np.log(lows)))) if (lows > 0).all() else 0.0
    hi = float(np.exp(np.mean(np.log(highs)))) if np.isfinite(highs).all() else float("inf")
    if np.array_equal(lows, highs):
        est, a, b = interval(list(lows), crit, log=True)
        return f"{est:.3g}x [{a:.3g}, {b:.3g}]", {"kind": "value", "geomean": est, "low": a,
                                                  "high": b}  # fmt: skip
    if lo == 0 and np.isfinite(hi):
        return f"<= {hi:.3g}x (a bound: censored pairs)", {"kind": "upper bound", "high": hi}
    if lo > 0 and not np.isfinite(hi):
        return f">= {lo:.3g}x (a bound: censored pairs)", {"kind": "lower bound", "low": lo}
    return "undetermined (censored both ways)", {"kind": "undetermined"}


def _finite_steps(run: RunRecord, key: str) -> np.ndarray:
    steps, values = run.series(key)
    return steps[np.isfinite(values)]


def _area(run: RunRecord, key: str, steps: np.ndarray) -> float:
    """Trapezoidal area of `key` over `steps` (the run's own points there)."""
    s, v = run.series(key)
    values = v[np.searchsorted(s, steps)]
    return float(np.sum((values[1:] + values[:-1]) / 2 * np.diff(steps)))


def judge_area(pairs: list[Pair], key: str, crit: Criteria) -> Judgement | None:
    """Treatment / baseline area under the held-out curve of `key` over the evaluations both
    runs of a pair made, mean over pairs with an interval (INFO; None when a run lacks `key`)."""
    runs = [r for pair in pairs for r in pair]
    if not runs or not all(r.metrics.get(key) for r in runs):
        return None
    name = f"area under held-out {key.split('/', 1)[1]}"
    threshold = "reported: treatment / baseline, over the evaluations both made"
    each, undefined = [], []
    for treated, base in pairs:
        common = np.intersect1d(_finite_steps(treated, key), _finite_steps(base, key))
        t_area = _area(treated, key, common) if common.size > 1 else float("nan")
        b_area = _area(base, key, common) if common.size > 1 else float("nan")
        row = {"treatment": treated.run_id, "baseline": base.run_id, "treatment_area": t_area,
               "baseline_area": b_area}  # fmt: skip
        if not (np.isfinite(t_area) and b_area > 0):
            undefined.append(row)
            continue
        each.append(row | {"ratio": t_area / b_area})
    evidence = {"metric": key, "pairs": each, "undefined": undefined}
    note = f"; {len(undefined)} pairs without a ratio (baseline area <= 0)" if undefined else ""
    if not each:
        return Judgement(name, f"no ratio: every baseline area <= 0{note}", threshold,
                         NOT_EVALUATED, False, evidence)  # fmt: skip
    est, lo, hi = interval([e["ratio"] for e in each], crit)
    evidence["ratio"] = {"mean": est, "low": lo, "high": hi, "n": len(each)}
    return Judgement(name, f"ratio {est:.3f} [{lo:.3f}, {hi:.3f}] over {len(each)} pairs{note}",
                     threshold, INFO, False, evidence)  # fmt: skip
