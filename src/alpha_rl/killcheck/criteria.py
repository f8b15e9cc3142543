"""The seed plan's kill criteria 1-4 (HER's own), judged on MLflow runs (DESIGN §11).

Each judge returns a `Judgement`: the value found, the threshold it was held to, a verdict
(PASS, KILL, NOT-EVALUATED; NOT-APPLICABLE where a criterion has no meaning for the treatment, as
HER's criteria on another axis or the forward criterion for backward-only HER; INFO for reports
that never decide) and the evidence per run. Criteria 1-3 rest on the GPU-vs-oracle audit
(`audit/<kernel>` metrics): runs without it are "not audited", never a pass; runs of the numpy
backend executed the oracles themselves, so there is nothing to audit (NOT-APPLICABLE). A
statistical row carries its `Test` (two one-sided p-values against its tolerance: harm and
harmlessness); its verdict (KILL, PASS: within its tolerance, OPEN: neither shown) is decided for
the whole check at once (`report.decide`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from alpha_rl import vocabulary as vocab
from alpha_rl.her_variant import TREATMENTS, HerVariant
from alpha_rl.kernels import her as her_kernels
from alpha_rl.killcheck.axes import Axis, her_variant
from alpha_rl.killcheck.config import Criteria
from alpha_rl.pipeline.life.labels import ORACLE_AUDIT
from alpha_rl.tracking import RunRecord

PASS, KILL, NOT_EVALUATED, INFO = "PASS", "KILL", "NOT-EVALUATED", "INFO"
OPEN = "OPEN"  # a statistical row that showed neither harm nor harmlessness (yet)
NOT_APPLICABLE = "NOT-APPLICABLE"
PENDING = "PENDING"  # a statistical row before the check's correction decides it


@dataclass(frozen=True)
class Audited:
    """Criteria 1-3: the kernels whose `audit/<kernel>` mismatch counts a criterion reads, and the
    variants it applies to (every HER run for criterion 1)."""

    kernels: tuple[str, ...]
    direction: str  # "backward", "forward" or "" (both), as the verdict table says it
    variants: tuple[HerVariant, ...]  # the variants it applies to


BACKWARD = tuple(v for v in TREATMENTS if v.backward)
FORWARD = tuple(v for v in TREATMENTS if v.forward)
AUDITS = {
    "1 track": Audited((her_kernels.TRACK.name,), "", TREATMENTS),
    "2 backward inject": Audited((her_kernels.INJECT.name,), "backward", BACKWARD),
    # her_inject writes the forward ring; her_record (a kernel since merged into her_inject) did
    # in runs recorded before it did
    "3 forward inject": Audited((her_kernels.INJECT.name, her_kernels.FORWARD.name, "her_record"),
                                "forward", FORWARD),
}  # fmt: skip


def runs_with(runs: list[RunRecord], variants: tuple[HerVariant, ...]) -> list[RunRecord]:
    """The runs whose HER variant is one of `variants`."""
    return [r for r in runs if her_variant(r) in variants]


INJECTIONS = "4 injections on done steps"
FAILURE_TAG = "alpha_rl.failure_reason"  # a run that ended FAILED says why


@dataclass(frozen=True)
class Test:
    """The two one-sided tests behind a statistical row, against one bound (the row's
    tolerance): `p` small, the treatment is shown harmed beyond it (KILL); `p_safe` small, shown
    within it (harmlessness, needed for KEEP); and how many pairs (or runs per arm) would decide
    at a level, either way."""

    p: float
    seeds: Callable[[float], int | None]
    unit: str = "pairs"
    never: str = "the observed effect sits on the bound: no number of pairs would decide"
    floor: float = 0.0  # the smallest p-value the test could give on its margins (discrete)
    p_safe: float = 1.0
    safe_seeds: Callable[[float], int | None] | None = None  # None: `seeds` serves both ways
    strata: int | None = None  # a t-test on pairs in this many folds (None: about normal)


@dataclass
class Judgement:
    """One row of the verdict table."""

    criterion: str
    value: str
    threshold: str
    verdict: str
    required: bool = True
    evidence: dict[str, Any] = field(default_factory=dict)
    blocks: bool = False  # the treatment cannot be judged whatever the other rows say
    test: Test | None = None  # a statistical row's test (its verdict PENDING until `decide`)

    def record(self) -> dict[str, Any]:
        """The row as the JSON report holds it (the test as its p-value)."""
        out = {k: v for k, v in vars(self).items() if k != "test"}
        out["p"] = self.test.p if self.test else None
        out["p_safe"] = self.test.p_safe if self.test else None
        return out


def her_criteria(axis: Axis, treated: list[RunRecord], crit: Criteria) -> list[Judgement]:
    """Criteria 1-4 on a treatment arm's runs; NOT-APPLICABLE off the HER axis or where the arm
    runs no HER; the audits (1-3) NOT-APPLICABLE on runs that executed the oracles themselves
    (the numpy backend), criterion 3's count of lost closes still read."""
    names = [*AUDITS, INJECTIONS]
    her = runs_with(treated, TREATMENTS) if axis.is_her else []  # other axes: HER not judged
    if not axis.is_her or not her:
        why = (f"HER's own criterion; the axis is {axis.name}" if not axis.is_her
               else "the treatment runs no HER")  # fmt: skip
        return [Judgement(n, why, "-", NOT_APPLICABLE, False) for n in names]
    if all(r.tags.get("audit") == ORACLE_AUDIT for r in her):
        why = ("the runs executed the NumPy oracles themselves (backend numpy): there is "
               "nothing to audit them against")  # fmt: skip
        audits = [Judgement(n, why, "-", NOT_APPLICABLE, False) for n in AUDITS]
        audits[-1] = judge_forward_coverage(audits[-1], her, crit)
    else:
        audits = [judge_audit(name, her, crit) for name in AUDITS]
        audits[-1] = judge_forward_coverage(audits[-1], her, crit)
    return [*audits, judge_injections(her, crit)]


# what a forward run's ring lost unjudged, of what it was given
LOST_KEYS = (vocab.HER_FORWARD_OVERWRITTEN, vocab.HER_FORWARD_EXPIRED)
CLOSES = vocab.HER_FORWARD_CLOSES


def judge_forward_coverage(audit: Judgement, runs: list[RunRecord], crit: Criteria) -> Judgement:
    """Criterion 3 on top of its audits: forward HER judged every close it was given. A run
    whose ring lost more than `max_forward_lost` of its closed trades unjudged (overwritten
    before judgement or found past its window; an episode's end is not a loss), or that has no
    count of them (recorded before forward HER counted them), tested a forward HER that was
    partly idle: the row is NOT-EVALUATED and blocks the treatment's verdict (CANNOT-JUDGE,
    whatever else kills). Mismatching audits (KILL) and a direction that does not run stay."""
    runs = runs_with(runs, FORWARD)
    if audit.verdict == KILL or not runs:
        return audit
    limit = crit.max_forward_lost
    lost = f"closes lost unjudged <= {100 * limit:g}%"
    threshold = lost if audit.verdict == NOT_APPLICABLE else f"{audit.threshold}; {lost}"
    evidence, uncounted, over, worst = dict(audit.evidence), [], {}, 0.0
    for run in runs:
        series = [run.series(key)[1] for key in (*LOST_KEYS, CLOSES)]
        if not all(len(s) for s in series):
            uncounted.append(run.run_id)
            continue
        *lost, closes = (float(s[-1]) for s in series)
        share = sum(lost) / closes if closes > 0 else 0.0
        evidence.setdefault("lost_unjudged", {})[run.run_id] = {
            "overwritten": int(lost[0]), "expired": int(lost[1]), "closes": int(closes),
            "share": share,
        }  # fmt: skip
        worst = max(worst, share)
        if share > limit:
            over[run.run_id] = f"{100 * share:.1f}%"
    if uncounted:
        evidence["uncounted"] = uncounted
        value = (f"{len(uncounted)} of {len(runs)} forward runs have no {LOST_KEYS[0]} (recorded "
                 "before forward HER counted its lost closes): whether it judged them is "
                 "unknown")  # fmt: skip
        return Judgement(audit.criterion, value, threshold, NOT_EVALUATED, True, evidence, True)
    if over:
        runs_over = ", ".join(f"{rid[:8]} {v}" for rid, v in list(over.items())[:3])
        value = (f"forward HER lost closes unjudged in {len(over)} of {len(runs)} runs "
                 f"({runs_over}): partly idle, not judged; give it a ring that holds one "
                 "lookahead's closes (her.closed_ring=auto)")  # fmt: skip
        return Judgement(audit.criterion, value, threshold, NOT_EVALUATED, True, evidence, True)
    value = f"{audit.value}; at most {100 * worst:.2f}% of closes lost unjudged"
    if audit.verdict == NOT_APPLICABLE:  # not audited: the count alone, not blocking
        return Judgement(audit.criterion, value, threshold, PASS, False, evidence)
    return Judgement(audit.criterion, value, threshold, audit.verdict, audit.required, evidence)


def judge_audit(name: str, runs: list[RunRecord], crit: Criteria) -> Judgement:
    """Criteria 1-3: zero audit mismatches of the kernels of `name` (and, for backward, the
    counters: no more backward injections in a log interval than trades closed in it);
    NOT-APPLICABLE when no run enables the direction the criterion is about."""
    direction = AUDITS[name].direction
    runs = runs_with(runs, AUDITS[name].variants)
    threshold = "0 mismatches on audited runs"
    if not runs:
        return Judgement(name, f"the treatment runs no {direction} HER", "-", NOT_APPLICABLE,
                         False)  # fmt: skip
    evidence, audits, bad = {}, 0, 0
    for run in runs:
        counts = [v for key in AUDITS[name].kernels for _, v in run.metrics.get(f"audit/{key}", [])]
        audits, bad = audits + len(counts), bad + int(np.nansum(counts))
        evidence[run.run_id] = {"audits": len(counts), "mismatches": int(np.nansum(counts)),
                                "audit": run.tags.get("audit", "?")}  # fmt: skip
    broken = _counter_violations(runs) if direction == "backward" else {}
    if broken:
        evidence["counter_violations"] = broken
        return Judgement(name, f"backward injections exceed closed trades in {broken}",
                         "injections <= closes per interval", KILL, True, evidence)  # fmt: skip
    if bad:
        return Judgement(name, f"{bad} mismatches in {audits} audits", threshold, KILL, True,
                         evidence)  # fmt: skip
    if audits == 0:
        how = "; ".join(sorted({r.tags.get("audit", "no audit tag") for r in runs}))
        note = "; counters consistent" if direction == "backward" else ""
        return Judgement(name, f"no audits (audit: {how}){note}", threshold, NOT_EVALUATED,
                         crit.require_audit, evidence)  # fmt: skip
    return Judgement(name, f"0 mismatches in {audits} audits over {len(runs)} runs", threshold,
                     PASS, crit.require_audit, evidence)  # fmt: skip


def _counter_violations(runs: list[RunRecord]) -> dict[str, list[int]]:
    """Per run, the log steps where the backward total grew by more than the trades closed."""
    out = {}
    for run in runs:
        steps, total = run.series(vocab.HER_BACKWARD_TOTAL)
        closes = dict(run.metrics.get(vocab.TRAIN_TRADES, []))
        if len(steps) < 2:
            continue
        grown = np.diff(total)
        bad = [int(s) for s, g in zip(steps[1:], grown, strict=True)
               if s in closes and g > closes[s]]  # fmt: skip
        if bad:
            out[run.run_id] = bad[:5]
    return out


def injection_step(run: RunRecord, crit: Criteria) -> int:
    """The step by which a HER run must have injected: min_steps_with_her, or
    min_steps_with_her_frac of the run's own length when that is earlier."""
    return max(1, min(crit.min_steps_with_her,
                      int(crit.min_steps_with_her_frac * run.last_step)))  # fmt: skip


def judge_injections(runs: list[RunRecord], crit: Criteria) -> Judgement:
    """Criterion 4: every HER run injected by its injection step (`injection_step`)."""
    name = INJECTIONS
    needs = {r.run_id: injection_step(r, crit) for r in runs}
    low, high = min(needs.values(), default=0), max(needs.values(), default=0)
    by = f"{low}" if low == high else f"{low}-{high}"
    threshold = (
        f"her/inject_total > 0 by step {by} (min_steps_with_her "
        f"{crit.min_steps_with_her} or {crit.min_steps_with_her_frac:g} of the run)"
    )
    # a run that failed is counted among the broken runs, not here
    long = [r for r in runs if r.metrics and FAILURE_TAG not in r.tags]
    if not long:  # every run failed: the rate of broken runs judges that; more seeds may bring
        # runs that end (a study waits for them)
        why = "no HER run that ran to its end logged a metric"
        return Judgement(name, why, threshold, NOT_EVALUATED, True, {"not_judged": why})
    evidence = {}
    for run in long:
        need = needs[run.run_id]
        steps, total = run.series(vocab.HER_INJECT_TOTAL)
        # the last log point by then; without one, the first (the earliest evidence there is)
        by = total[steps <= need] if (steps <= need).any() else total[:1]
        evidence[run.run_id] = float(by[-1]) if by.size else 0.0
    zero = [rid for rid, v in evidence.items() if not v > 0]
    value = (
        f"{len(long) - len(zero)} of {len(long)} runs injected (min {min(evidence.values()):.0f})"
    )
    return Judgement(name, value, threshold, KILL if zero else PASS, True, evidence)
