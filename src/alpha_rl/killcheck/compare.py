"""The judgements that compare a HER run with its baseline: criterion 5 (no destabilisation),
the speed-up report (steps to a capture-ratio target, HER vs baseline) and the held-out report
(the evaluation's capture ratio, PnL and Sharpe at the end of training, HER vs baseline)."""

from __future__ import annotations

import numpy as np

from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.criteria import INFO, KILL, NOT_EVALUATED, PASS, Judgement, interval
from alpha_rl.tracking import RunRecord

CAPTURE_KEYS = ("eval/capture_ratio", "trade/capture_ratio")
FAILURE_TAG = "alpha_rl.failure_reason"


def window_mean(run: RunRecord, key: str, start: float) -> float:
    """Mean of `key` over the points at steps >= start (NaN when there are none)."""
    steps, values = run.series(key)
    chosen = values[steps >= start]
    return float(chosen.mean()) if chosen.size else float("nan")


def _pair_stability(her: RunRecord, base: RunRecord, crit: Criteria) -> dict:
    """The evidence of one pair: ratio of window means, blow-up, non-finite values."""
    _, h = her.series("loss/l_q")
    _, b = base.series("loss/l_q")
    end = min(her.last_step, base.last_step)
    start = (1 - crit.window) * end
    out = {"her": her.run_id, "baseline": base.run_id, "points": [int(h.size), int(b.size)]}
    if not np.isfinite(h).all() or FAILURE_TAG in her.tags:
        out["kill"] = her.tags.get(FAILURE_TAG, "non-finite loss/l_q in the HER run")
        return out
    if h.size == 0 or b.size == 0 or not np.isfinite(b).all():
        out["skip"] = "no l_q in one run" if h.size * b.size == 0 else "baseline l_q non-finite"
        return out
    out["ratio"] = window_mean(her, "loss/l_q", start) / window_mean(base, "loss/l_q", start)
    out["max_ratio"] = float(h.max() / b.max()) if b.max() > 0 else float("inf")
    if out["max_ratio"] > crit.blowup_factor:
        out["kill"] = f"max l_q {h.max():.4g} > {crit.blowup_factor} x baseline max {b.max():.4g}"
    return out


def judge_stability(pairs: list[tuple[RunRecord, RunRecord]], crit: Criteria) -> Judgement:
    """Criterion 5: HER l_q same or better than the baseline over the last `window` of training,
    across seeds (bootstrap interval of the ratio), no NaN/inf, no blow-up."""
    name = "5 no destabilisation"
    threshold = (f"ratio CI low <= {1 + crit.tolerance:g}, max <= {crit.blowup_factor:g}x, "
                 "finite")  # fmt: skip
    if not pairs:
        return Judgement(name, "no HER/baseline pairs", threshold, NOT_EVALUATED)
    each = [_pair_stability(h, b, crit) for h, b in pairs]
    evidence = {"pairs": each}
    killed = [e for e in each if "kill" in e]
    if killed:
        return Judgement(name, f"{len(killed)} of {len(each)} HER runs: {killed[0]['kill']}",
                         threshold, KILL, True, evidence)  # fmt: skip
    ratios = [e["ratio"] for e in each if np.isfinite(e.get("ratio", np.nan))]
    if not ratios:
        return Judgement(name, "no comparable l_q in any pair", threshold, NOT_EVALUATED, True,
                         evidence)  # fmt: skip
    est, lo, hi = interval(ratios, crit)
    evidence["ratio"] = {"mean": est, "low": lo, "high": hi, "n": len(ratios)}
    value = f"l_q ratio {est:.3f} [{lo:.3f}, {hi:.3f}] over {len(ratios)} pairs"
    return Judgement(name, value, threshold, KILL if lo > 1 + crit.tolerance else PASS, True,
                     evidence)  # fmt: skip


def capture_key(runs: list[RunRecord]) -> str | None:
    """eval/capture_ratio when every run has it, else trade/capture_ratio when they all do."""
    for key in CAPTURE_KEYS:
        if runs and all(run.metrics.get(key) for run in runs):
            return key
    return None


def steps_to(run: RunRecord, key: str, target: float) -> int | None:
    """The first step at which `key` reached `target` (None: never)."""
    steps, values = run.series(key)
    hit = np.flatnonzero(values >= target)
    return int(steps[hit[0]]) if hit.size else None


def judge_speedup(pairs: list[tuple[RunRecord, RunRecord]], crit: Criteria) -> Judgement:
    """The seed's claim: baseline steps / HER steps to reach the capture target (INFO)."""
    name = "speed-up to capture target"
    key = capture_key([r for pair in pairs for r in pair])
    threshold = f"claimed {crit.claimed_speedup:g}x"
    if key is None:
        return Judgement(name, "no capture-ratio metric in the pairs", threshold, NOT_EVALUATED,
                         False)  # fmt: skip
    each = []
    for her, base in pairs:
        sh, sb = steps_to(her, key, crit.capture_target), steps_to(base, key, crit.capture_target)
        each.append({"her": her.run_id, "baseline": base.run_id, "her_steps": sh, "base_steps": sb,
                     "ratio": sb / sh if sh and sb else None})  # fmt: skip
    ratios = [e["ratio"] for e in each if e["ratio"]]
    counts = {
        "both": len(ratios),
        "her_only": sum(1 for e in each if e["her_steps"] and not e["base_steps"]),
        "base_only": sum(1 for e in each if e["base_steps"] and not e["her_steps"]),
        "neither": sum(1 for e in each if not e["her_steps"] and not e["base_steps"]),
    }
    evidence = {"metric": key, "target": crit.capture_target, "pairs": each, "counts": counts}
    reached = ", ".join(f"{k} {v}" for k, v in counts.items())
    if not ratios:
        return Judgement(name, f"not reached in any pair ({key} >= {crit.capture_target:g}; "
                         f"{reached})", threshold, INFO, False, evidence)  # fmt: skip
    est, lo, hi = interval(ratios, crit, log=True)
    evidence["speedup"] = {"geomean": est, "low": lo, "high": hi}
    value = f"{est:.2f}x [{lo:.2f}, {hi:.2f}] ({key} >= {crit.capture_target:g}; {reached})"
    return Judgement(name, value, threshold, INFO, False, evidence)


HELD_OUT_KEYS = ("eval/capture_ratio", "eval/pnl", "eval/sharpe")


def judge_held_out(pairs: list[tuple[RunRecord, RunRecord]], crit: Criteria) -> list[Judgement]:
    """What the held-out evaluation says at the end of training (INFO, not a criterion): per
    eval metric every run has, HER minus baseline of its mean over the last `window` of
    training, across pairs with a bootstrap interval."""
    runs = [r for pair in pairs for r in pair]
    threshold = f"reported: HER - baseline, mean over the last {crit.window:.0%} of training"
    rows = []
    for key in HELD_OUT_KEYS:
        if not runs or not all(run.metrics.get(key) for run in runs):
            continue
        each = []
        for her, base in pairs:
            start = (1 - crit.window) * min(her.last_step, base.last_step)
            h, b = window_mean(her, key, start), window_mean(base, key, start)
            each.append({"her": her.run_id, "baseline": base.run_id, "her_mean": h,
                         "base_mean": b, "difference": h - b})  # fmt: skip
        name = f"held-out {key.split('/', 1)[1]} at the end"
        done = [e for e in each if np.isfinite(e["difference"])]
        if not done:
            rows.append(Judgement(name, "no values in the window", threshold, NOT_EVALUATED,
                                  False, {"metric": key, "pairs": each}))  # fmt: skip
            continue
        est, lo, hi = interval([e["difference"] for e in done], crit)
        her_mean = float(np.mean([e["her_mean"] for e in done]))
        base_mean = float(np.mean([e["base_mean"] for e in done]))
        value = (f"{est:+.4g} [{lo:+.4g}, {hi:+.4g}] (HER {her_mean:.4g}, baseline "
                 f"{base_mean:.4g}; {len(done)} pairs)")  # fmt: skip
        evidence = {"metric": key, "pairs": each,
                    "difference": {"mean": est, "low": lo, "high": hi, "n": len(done)}}  # fmt: skip
        rows.append(Judgement(name, value, threshold, INFO, False, evidence))
    return rows
