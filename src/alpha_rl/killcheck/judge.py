"""One check's judgement: every treatment of an axis against its baseline, row by row, decided
together (Holm over the check). The command (cli), the confirmation of a search and the
calibration all judge through here."""

from __future__ import annotations

from dataclasses import dataclass, field

from alpha_rl.killcheck.axes import Axis
from alpha_rl.killcheck.broken import BROKEN, judge_broken
from alpha_rl.killcheck.compare import (
    judge_baselines,
    judge_benefit,
    judge_folds,
    judge_held_out,
    judge_stability,
    literal_row,
)
from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.criteria import (
    INFO,
    INJECTIONS,
    NOT_APPLICABLE,
    NOT_EVALUATED,
    PENDING,
    Judgement,
    her_criteria,
)
from alpha_rl.killcheck.pairs import Pair, Pairing, pair_runs
from alpha_rl.killcheck.report import Settled, Treatment, decide
from alpha_rl.killcheck.sequential import Design
from alpha_rl.killcheck.speed import judge_area, judge_speed
from alpha_rl.tracking import RunRecord
from alpha_rl.vocabulary import CAPTURE, PNL


def judge_treatment(axis: Axis, value: str, pairs: list[Pair], crit: Criteria,
                    info: bool = True) -> Treatment:  # fmt: skip
    """Every row of one treatment against the baseline; the axis's criteria set decides (the
    other rows are INFO; info=False leaves out those that never decide, as the calibration
    does). Its statistical rows stay PENDING for `decide`, or NOT-EVALUATED with fewer than
    `min_seeds` pairs (counting, for a test on pairs, those it could use)."""
    label, base = axis.label(value), axis.label(axis.baseline)
    deciding = crit.deciding_for(axis.name)
    rows = her_criteria(axis, [t for t, _ in pairs], crit)
    for row in rows:
        owner = "injections" if row.criterion == INJECTIONS else "audits"
        if owner not in deciding and row.verdict != NOT_APPLICABLE:
            row.required, row.blocks = False, False
            row.value += f" ({row.verdict}; not deciding on the {axis.name} axis)"
            row.verdict = INFO
    rows += [judge_stability(pairs, crit, "stability" in deciding),
             _deciding(judge_broken(pairs, (label, base), crit), "broken" in deciding, axis),
             _deciding(judge_benefit(pairs, crit), "benefit" in deciding, axis)]  # fmt: skip
    if info:
        rows += [literal_row(pairs, axis, crit), judge_speed(pairs, (label, base), crit)]
        rows += [row for key in (CAPTURE, PNL)
                 if (row := judge_area(pairs, key, crit)) is not None]  # fmt: skip
        rows += judge_held_out(pairs, (label, base), crit)
        rows += judge_baselines(pairs, (label, base), crit)
        rows += judge_folds(pairs, crit)
    for row in rows:  # a test on fewer pairs than min_seeds (broken pairs left out) waits
        used = len(pairs) if row.criterion == BROKEN else row.evidence.get("n", len(pairs))
        if row.verdict == PENDING and used < crit.min_seeds:
            why = f"{used} pair{'' if used == 1 else 's'} < min_seeds {crit.min_seeds}: not judged"
            row.verdict = NOT_EVALUATED
            row.value += f"; {why}"
            row.evidence["not_judged"] = why
    return Treatment(value, label, pairs, rows)


def _deciding(row: Judgement, decides: bool, axis: Axis) -> Judgement:
    """`row` as it stands where it decides, else an INFO row (its p-value kept as evidence)."""
    if decides:
        return row
    row.required, row.test = False, None
    if row.verdict == PENDING:
        row.verdict = INFO
    row.threshold = f"reported: not deciding on the {axis.name} axis"
    return row


def judge(runs: list[RunRecord], axis: Axis, crit: Criteria, info: bool = True,
          look: Look | None = None) -> tuple[list[Treatment], Pairing, int]:  # fmt: skip
    """Every treatment of the axis judged and decided together (Holm over the check), the
    pairing and the number of tests in the family (info: as `judge_treatment`, and whether
    open rows say how many pairs would decide). A staged study's `look` says which look this is
    of its design, what its earlier looks settled, and which treatments are still judged."""
    look = look or Look()
    runs = [r for r in runs if r.params]  # a parent run holds no config
    pairing = pair_runs(runs, axis, crit.pair_ignore)
    treatments = [judge_treatment(axis, v, pairs, crit, info)
                  for v, pairs in pairing.arms.items()
                  if look.values is None or v in look.values]  # fmt: skip
    family = decide(treatments, crit, look.design, look.index, look.settled, explain=info)
    return treatments, pairing, family


@dataclass(frozen=True)
class Look:
    """Which look of a staged study a judgement is: the design, its index, what earlier looks
    settled, and the treatment values still judged (None: every value; a single check is the
    one look of a one-look design)."""

    design: Design | None = None
    index: int = 0
    settled: Settled = field(default_factory=Settled)
    values: frozenset[str] | None = None
