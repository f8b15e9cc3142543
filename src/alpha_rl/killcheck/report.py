"""The kill check's outputs: a verdict per treatment and overall, the printed table, the JSON
report and the PNG (a curve per arm)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.criteria import (
    KILL,
    NOT_APPLICABLE,
    NOT_EVALUATED,
    OPEN,
    PASS,
    PENDING,
    Judgement,
)
from alpha_rl.killcheck.pairs import Pair, Pairing
from alpha_rl.killcheck.sequential import Design
from alpha_rl.killcheck.stats import MAX_SEEDS
from alpha_rl.tracking.records import json_safe

KEEP, CANNOT_JUDGE, UNDECIDED = "KEEP", "CANNOT-JUDGE", "UNDECIDED"
EXIT = {KEEP: 0, KILL: 1, CANNOT_JUDGE: 2, UNDECIDED: 2}


@dataclass
class Treatment:
    """One treatment arm judged against the baseline: its rows and verdict."""

    value: str
    label: str
    pairs: list[Pair]
    rows: list[Judgement]
    kept: bool = False  # harmlessness shown on every deciding row (set by `decide`)

    @property
    def verdict(self) -> str:
        """CANNOT-JUDGE when a row blocks it (forward HER that lost its closes: what was
        tested is not the treatment); else KILL if any criterion kills; CANNOT-JUDGE without
        pairs or with a required criterion that more seeds would not evaluate (no audits); KEEP
        when harmlessness was shown on every deciding criterion; else UNDECIDED (more seeds would
        decide)."""
        if any(r.blocks for r in self.rows):
            return CANNOT_JUDGE
        if any(r.verdict == KILL for r in self.rows):
            return KILL
        if not self.pairs or self._stuck():
            return CANNOT_JUDGE
        return KEEP if self.kept else UNDECIDED

    def _stuck(self) -> list[Judgement]:
        """Required rows not evaluated for a reason other than too few pairs."""
        return [r for r in self.rows if r.required and r.verdict == NOT_EVALUATED
                and "not_judged" not in r.evidence]  # fmt: skip

    @property
    def open_rows(self) -> list[Judgement]:
        """The deciding rows that showed neither harm nor harmlessness, or wait for pairs."""
        return [r for r in self.rows if r.required and (r.verdict == OPEN or (
            r.verdict == NOT_EVALUATED and "not_judged" in r.evidence))]  # fmt: skip

    @property
    def seeds_needed(self) -> int | None:
        """The most pairs any open row says would decide it (None: no row says)."""
        found = [r.evidence.get("seeds_to_decide") for r in self.open_rows]
        found = [n for n in found if n is not None]
        return max(found) if found else None

    @property
    def blocked_by(self) -> str:
        """What keeps a CANNOT-JUDGE or UNDECIDED treatment from a verdict, in a few words (""
        otherwise)."""
        verdict = self.verdict
        if verdict == UNDECIDED:
            return "; ".join(_open_text(r) for r in self.open_rows) or "harmlessness not shown"
        if verdict != CANNOT_JUDGE:
            return ""
        if not self.pairs:
            return "no pairs"
        blocking = [r for r in self.rows if r.blocks]
        row = (blocking or self._stuck())[0]
        value = row.value if len(row.value) <= 140 else row.value[:137] + "..."
        return f"{row.criterion}: {value}"


def _open_text(row: Judgement) -> str:
    """`7 no held-out harm (eval/pnl): open, about 12 pairs would decide`."""
    why = row.evidence.get("not_judged") or "open"
    need, unit = row.evidence.get("seeds_to_decide"), row.test.unit if row.test else "pairs"
    if need is None:
        return f"{row.criterion}: {why}"
    more = f"more than {MAX_SEEDS}" if need > MAX_SEEDS else f"about {need}"
    return f"{row.criterion}: {why}, {more} {unit} would decide"


@dataclass(frozen=True)
class Settled:
    """What a study's earlier looks decided, for the levels of the next: the deciding tests of
    treatments decided before that were not rejected keep their share of alpha, and treatments
    decided before without a KEEP keep their share of beta (neither is handed on)."""

    kill_open: int = 0
    keep_open: int = 0


def decide(treatments: list[Treatment], crit: Criteria, design: Design | None = None,
           look: int = 0, settled: Settled = Settled(), explain: bool = True) -> int:  # fmt: skip
    """Every PENDING row of the check decided at once, both ways, against its tolerance.

    KILL: Holm's step-down over the rows' one-sided harm p-values holds the probability of any
    false KILL at `alpha` (family-wise; at look `look` of a staged `design` each step's level
    is the nominal level that spends it over the looks). A discrete test that cannot reach the
    level Holm would give it (Fisher's with no broken run) stays out of the family (Tarone).
    KEEP: a treatment is kept when every deciding row shows harmlessness (its harmlessness
    p-value at most the level: an intersection-union test, whose error is at most the level
    whatever the number of rows) and no fact kills or waits; Holm's step-down over the
    treatments holds the probability of any false KEEP at `beta`. A row neither killed nor
    shown within its tolerance is OPEN; an open row, and one waiting for pairs, says how many
    pairs would decide it (explain). Returns the number of tests the KILL family decided (its
    levels count the rows waiting for pairs too)."""
    design = design or Design.single()
    tested = [r for t in treatments for r in t.rows if r.test is not None and r.required]
    pending = [r for r in tested if r.verdict == PENDING]
    waiting = sum(r.verdict == NOT_EVALUATED for r in tested) + settled.kill_open
    family, size = _tarone(pending, waiting, crit.alpha, design, look)
    for row in pending:
        if row not in family:
            row.evidence["outside_family"] = row.test.floor
            row.value += f"; its smallest possible p {row.test.floor:.2g} > its level: not tested"
    _holm_kill(family, size, crit.alpha, design, look)
    _holm_keep(treatments, crit.beta, design, look, len(treatments) + settled.keep_open)
    for t in treatments:
        for row in t.rows:
            if row.verdict == PENDING:
                need = row.evidence.setdefault("keep_level", crit.beta)
                row.verdict = PASS if t.kept or row.test.p_safe <= need else OPEN
    if explain:
        kill_level = design.nominal(len(design.looks) - 1, crit.alpha / max(size, 1))
        last_keep = design.nominal(len(design.looks) - 1, crit.beta / max(len(treatments), 1))
        for t in treatments:
            for row in t.open_rows:
                if row.test is not None:
                    _explain(row, kill_level, last_keep)
    return len(family)


def _tarone(pending: list[Judgement], waiting: int, alpha: float, design: Design,
            look: int) -> tuple[list[Judgement], int]:  # fmt: skip
    """Tarone's (1990) family: the smallest m such that the tests whose smallest possible
    p-value reaches the nominal level of alpha / m, with the rows waiting for pairs, number at
    most m; those tests, and m."""
    total = len(pending) + waiting
    for m in range(1, total + 1):
        level = design.nominal(look, alpha / m)
        able = [r for r in pending if r.test.floor <= level]
        if len(able) + waiting <= m:
            return able, m
    return list(pending), total


def _holm_kill(family: list[Judgement], size: int, alpha: float, design: Design,
               look: int) -> None:  # fmt: skip
    """Holm's step-down over the family's harm tests, as closed testing with Bonferroni's
    local tests: every test not yet rejected at alpha / (those left of `size`), each at its own
    nominal level for the look; KILL those at or below it, and again with the level they free,
    until none is."""
    tests = f"{size} test{'' if size == 1 else 's'}"
    left, rejected = list(family), 0
    while left:
        level = alpha / (size - rejected)
        killed = []
        for row in left:
            nominal = design.nominal(look, level, row.test.strata)
            row.evidence |= {"level": nominal, "family": size, "alpha": alpha}
            if row.test.p <= nominal:
                killed.append(row)
        for row in killed:
            row.verdict = KILL
            row.value += f", harm shown at level {row.evidence['level']:.2g} (Holm, {tests})"
            left.remove(row)
        if not killed:
            return
        rejected += len(killed)


def _holm_keep(treatments: list[Treatment], beta: float, design: Design, look: int,
               size: int) -> None:  # fmt: skip
    """Holm's step-down over the treatments' harmlessness (closed testing as `_holm_kill`): a
    treatment is kept when every deciding row's harmlessness p-value is at most its nominal
    level at beta / (the treatments not yet kept of `size`); the rows of those not kept hold
    that level (`keep_level`), what they needed."""
    left = []
    for t in treatments:
        rows = [r for r in t.rows if r.required and r.verdict != NOT_APPLICABLE]
        facts_ok = all(r.verdict == PASS for r in rows if r.test is None)
        tests = [r for r in rows if r.test is not None]
        if t.pairs and facts_ok and not any(r.blocks for r in rows) and all(
                r.verdict == PENDING for r in tests):  # fmt: skip
            left.append((t, tests))
    kept = 0
    while True:
        level = beta / max(size - kept, 1)
        now = [(t, tests) for t, tests in left
               if all(r.test.p_safe <= design.nominal(look, level, r.test.strata)
                      for r in tests)]  # fmt: skip
        for t, tests in now:
            t.kept = True
            left.remove((t, tests))
        if not now or not left:
            for _t, tests in left:
                for r in tests:
                    r.evidence["keep_level"] = design.nominal(look, level, r.test.strata)
            return
        kept += len(now)


def _explain(row: Judgement, kill_level: float, keep_level: float) -> None:
    """The pairs (or runs per arm) at which an open row's observed effect and spread would just
    be decided, toward harm at the KILL level or toward harmlessness at the KEEP level."""
    test = row.test
    harm = test.p < test.p_safe
    level = kill_level if harm else keep_level
    seeds = test.seeds if harm or test.safe_seeds is None else test.safe_seeds
    n = seeds(level)
    have = row.evidence.get("n")
    if n is not None and have is not None and n <= have:  # open at these pairs: at least one more
        n = have + 1
    row.evidence["seeds_to_decide"] = n
    toward = "harm" if harm else "harmlessness"
    if n is None:
        row.value += f"; {test.never}"
    elif n > MAX_SEEDS:
        row.value += f"; more than {MAX_SEEDS} {test.unit} would be needed to decide"
    else:
        row.value += (f"; about {n} {test.unit} would decide (toward {toward}, at the observed "
                      f"effect and spread, one-sided at {level:.2g})")  # fmt: skip


def overall(treatments: list[Treatment]) -> str:
    """The check's verdict over its treatments' (`overall_of`)."""
    return overall_of([t.verdict for t in treatments])


def overall_of(verdicts: list[str]) -> str:
    """KILL when any treatment is killed; else KEEP when there are treatments and every one is
    kept; else CANNOT-JUDGE when any cannot be judged (or there is none); else UNDECIDED."""
    if KILL in verdicts:
        return KILL
    if verdicts and all(v == KEEP for v in verdicts):
        return KEEP
    return CANNOT_JUDGE if CANNOT_JUDGE in verdicts or not verdicts else UNDECIDED


def summary(treatments: list[Treatment], verdict: str) -> str:
    """`verdict: KILL (her=forward killed; her=backward kept; her=on undecided: 5 no
    destabilisation: 3 pairs < min_seeds 5: not judged; about 12 pairs would decide)`: which
    survive, and what holds the others back."""
    by: dict[str, list[str]] = {}
    for t in treatments:
        by.setdefault(t.verdict, []).append(t.label)
    words = {KILL: "killed", KEEP: "kept"}
    parts = [f"{', '.join(by[v])} {words[v]}" for v in (KILL, KEEP) if v in by]
    parts += [f"{t.label} cannot be judged: {t.blocked_by}" for t in treatments
              if t.verdict == CANNOT_JUDGE]  # fmt: skip
    parts += [f"{t.label} undecided: {t.blocked_by}" for t in treatments
              if t.verdict == UNDECIDED]  # fmt: skip
    return f"verdict: {verdict}" + (f" ({'; '.join(parts)})" if parts else " (no treatment)")


def table(treatments: list[Treatment], pairing: Pairing, crit: Criteria, family: int) -> str:
    """One table, `criterion  verdict  value  [threshold]`: the settings that differ from the
    defaults above it, a block per treatment with its verdict under it; the unpaired runs at the
    end (the verdict line, `summary`, is the command's last)."""
    rows = [r for t in treatments for r in t.rows]
    w_name = max([len("criterion"), *(len(r.criterion) for r in rows)])
    w_verdict = max([len("verdict"), *(len(r.verdict) + 2 for r in rows)])
    line = lambda a, b, c: f"{a:<{w_name}}  {b:<{w_verdict}}  {c}"  # noqa: E731
    base = pairing.axis.label(pairing.axis.baseline)
    changed = crit.non_default_text()
    out = [f"non-default criteria: {changed}"] if changed else []
    deciding = ", ".join(crit.deciding_for(pairing.axis.name))
    out.append(f"deciding on the {pairing.axis.name} axis: {deciding}; KILL: alpha "
               f"{crit.alpha:g} family-wise ({_family_text(family)}); KEEP: beta {crit.beta:g} "
               f"family-wise (harmlessness shown on every deciding criterion; Holm over "
               f"{len(treatments)} treatment{'' if len(treatments) == 1 else 's'})")  # fmt: skip
    out += [line("criterion", "verdict", "value  [threshold]"), "-" * (w_name + w_verdict + 24)]
    for t in treatments:
        out.append(f"== {t.label} vs {base}: {len(t.pairs)} pairs")
        out += [line(r.criterion, r.verdict + ("" if r.required else " *"),
                     f"{r.value}  [{r.threshold}]") for r in t.rows]  # fmt: skip
        why = f" ({t.blocked_by})" if t.verdict == UNDECIDED else ""
        out += [f"verdict {t.label}: {t.verdict}{why}", ""]
    out.append("(* = not blocking)")
    out += [f"unpaired: {run.name} ({run.run_id}): {why}" for run, why in pairing.unpaired]
    return "\n".join(out)


def _family_text(family: int) -> str:
    """How the check's tests were decided, for the table's header."""
    if family == 0:
        return "no test decided: each row says why"
    return f"Holm over the check's {family} test{'' if family == 1 else 's'}"


def write_json(path: Path, treatments: list[Treatment], verdict: str, pairing: Pairing,
               meta: dict[str, Any]) -> None:  # fmt: skip
    """The whole report: settings, axis, every treatment with its pairs, rows and evidence."""
    axis = pairing.axis
    report = {
        **meta,
        "axis": {"name": axis.name, "baseline": axis.baseline},
        "verdict": verdict,
        "treatments": [
            {
                "value": t.value,
                "label": t.label,
                "verdict": t.verdict,
                "pairs": [
                    {
                        "treatment": a.run_id,
                        "baseline": b.run_id,
                        "treatment_name": a.name,
                        "baseline_name": b.name,
                    }
                    for a, b in t.pairs
                ],
                "blocked_by": t.blocked_by,
                "criteria": [r.record() for r in t.rows],
            }
            for t in treatments
        ],
        "unpaired": [{"run": r.run_id, "name": r.name, "why": why} for r, why in pairing.unpaired],
    }
    path.write_text(json.dumps(json_safe(report), indent=1, allow_nan=False))


NOTE_TAG = "mlflow.note.content"  # a run's description (markdown) in MLflow's UI


def note(treatments: list[Treatment], verdict: str, axis: str, when: str,
         changed: str = "") -> str:  # fmt: skip
    """The check's verdicts as the markdown description of a sweep's parent run, one row per
    treatment: its verdict, its pairs, the deciding criteria's verdicts and the held-out PnL."""

    def cell(text: str) -> str:
        return text.replace("|", "/").replace("\n", " ")

    lines = [f"**Kill check** on the `{axis}` axis, {when}: **{verdict}**", ""]
    if changed:
        lines += [f"non-default criteria: {cell(changed)}", ""]
    lines += [
             "| treatment | verdict | pairs | deciding criteria | held-out PnL at the end |",
             "|---|---|---|---|---|"]  # fmt: skip
    for t in treatments:
        deciding = "; ".join(f"{r.criterion}: {r.verdict}" for r in t.rows
                             if r.required and r.verdict != NOT_APPLICABLE)  # fmt: skip
        pnl = next((r.value for r in t.rows if r.criterion.startswith("held-out pnl at the end: "
                                                                        "mean")), "-")  # fmt: skip
        lines.append(f"| {t.label} | **{t.verdict}** | {len(t.pairs)} | {cell(deciding)} | "
                     f"{cell(pnl)} |")  # fmt: skip
    lines += ["", "Every row of the check: this run's `kill_check/` artifacts (JSON and plot)."]
    return "\n".join(lines)
