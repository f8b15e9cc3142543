"""The kill check's outputs: a verdict per treatment and overall, the printed table, the JSON
report and the PNG (a curve per arm)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.criteria import (
    KILL,
    NOT_APPLICABLE,
    NOT_EVALUATED,
    PASS,
    PENDING,
    Judgement,
)
from alpha_rl.killcheck.pairs import Pair, Pairing
from alpha_rl.killcheck.stats import MAX_SEEDS, holm
from alpha_rl.tracking import RunRecord
from alpha_rl.tracking.records import json_safe
from alpha_rl.vocabulary import L_Q, PNL

KEEP, CANNOT_JUDGE = "KEEP", "CANNOT-JUDGE"
EXIT = {KEEP: 0, KILL: 1, CANNOT_JUDGE: 2}


@dataclass
class Treatment:
    """One treatment arm judged against the baseline: its rows and verdict."""

    value: str
    label: str
    pairs: list[Pair]
    rows: list[Judgement]

    @property
    def verdict(self) -> str:
        """CANNOT-JUDGE when a row blocks it (forward HER that lost its closes: what was
        tested is not the treatment); else KILL if any criterion kills; CANNOT-JUDGE without
        pairs or with a required criterion not evaluated; KEEP otherwise."""
        if any(r.blocks for r in self.rows):
            return CANNOT_JUDGE
        if any(r.verdict == KILL for r in self.rows):
            return KILL
        if not self.pairs or any(r.required and r.verdict == NOT_EVALUATED for r in self.rows):
            return CANNOT_JUDGE
        return KEEP

    @property
    def blocked_by(self) -> str:
        """What keeps a CANNOT-JUDGE treatment from a verdict, in a few words ("" otherwise)."""
        if self.verdict != CANNOT_JUDGE:
            return ""
        if not self.pairs:
            return "no pairs"
        waiting = [r for r in self.rows if r.required and r.verdict == NOT_EVALUATED]
        blocking = [r for r in self.rows if r.blocks]
        few = [r for r in waiting if "not_judged" in r.evidence]
        row = (blocking or few or waiting)[0]
        if "not_judged" in row.evidence:  # too few pairs: that is the reason, whatever else
            return f"{row.criterion}: {row.evidence['not_judged']}"
        value = row.value if len(row.value) <= 140 else row.value[:137] + "..."
        return f"{row.criterion}: {value}"


def decide(treatments: list[Treatment], crit: Criteria) -> int:
    """Every PENDING row of the check decided at once: Holm's step-down over their one-sided
    p-values holds the probability of any false KILL at `alpha`. A row whose interval still
    holds its bound, and a row not judged for too few pairs, says how many pairs (or runs per
    arm) would decide at alpha / m (Holm's first step; m the family with the rows waiting for
    pairs). A test that could not reach alpha on its
    margins (Fisher's with no broken run) passes outside the family (Tarone). Returns the
    family's size m."""
    family = []
    for row in (r for t in treatments for r in t.rows if r.verdict == PENDING):
        if row.test.floor > crit.alpha:
            row.verdict = PASS
            row.evidence["outside_family"] = row.test.floor
            row.value += f"; its smallest possible p {row.test.floor:.2g} > alpha: not tested"
        else:
            family.append(row)
    tested = [r for t in treatments for r in t.rows if r.test is not None and r.required]
    waiting = sum(r.verdict == NOT_EVALUATED for r in tested)  # would join with enough pairs
    level = crit.alpha / max(len(family) + waiting, 1)
    tests = f"{len(family)} test{'' if len(family) == 1 else 's'}"
    for row, adjusted in zip(family, holm([r.test.p for r in family]), strict=True):
        row.evidence |= {"p_adjusted": adjusted, "family": len(family), "alpha": crit.alpha}
        row.verdict = KILL if adjusted <= crit.alpha else PASS
        row.value += f", Holm-adjusted {adjusted:.2g} (of {tests})"
    for row in tested:
        close = row.verdict == NOT_EVALUATED or (row.verdict == PASS and _undecided(row))
        if close:
            n = row.test.seeds(level)
            row.evidence["seeds_to_decide"] = n
            if n is None:
                row.value += f"; {row.test.never}"
            elif n > MAX_SEEDS:
                row.value += f"; more than {MAX_SEEDS} {row.test.unit} would be needed to decide"
            else:
                row.value += (f"; about {n} {row.test.unit} would decide (at the observed effect "
                              f"and spread, one-sided at {level:.2g})")  # fmt: skip
    return len(family)


def _undecided(row: Judgement) -> bool:
    """Whether a passed row is a close call: its interval holds the bound, or (a rate) the
    treatment broke more often than the baseline."""
    e = row.evidence
    if "counts" in e:
        bt, nt, bb, nb = e["counts"]
        return bt / max(nt, 1) > bb / max(nb, 1)
    return bool(e.get("low", 0) <= e.get("bound", 0) <= e.get("high", 0))


def overall(treatments: list[Treatment]) -> str:
    """KILL when any treatment is killed; else CANNOT-JUDGE when there is none or any cannot be
    judged; else KEEP."""
    verdicts = [t.verdict for t in treatments]
    if KILL in verdicts:
        return KILL
    return KEEP if verdicts and all(v == KEEP for v in verdicts) else CANNOT_JUDGE


def summary(treatments: list[Treatment], verdict: str) -> str:
    """`verdict: KILL (her=forward killed; her=backward kept; her=on cannot be judged: 5 no
    destabilisation: 3 pairs < min_seeds 5)`: which survive, and what blocked the others."""
    by: dict[str, list[str]] = {}
    for t in treatments:
        by.setdefault(t.verdict, []).append(t.label)
    words = {KILL: "killed", KEEP: "kept"}
    parts = [f"{', '.join(by[v])} {words[v]}" for v in (KILL, KEEP) if v in by]
    parts += [f"{t.label} cannot be judged: {t.blocked_by}" for t in treatments
              if t.verdict == CANNOT_JUDGE]  # fmt: skip
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
    out.append(f"deciding on the {pairing.axis.name} axis: {deciding}; alpha {crit.alpha:g} "
               f"family-wise ({_family_text(family)})")  # fmt: skip
    out += [line("criterion", "verdict", "value  [threshold]"), "-" * (w_name + w_verdict + 24)]
    for t in treatments:
        out.append(f"== {t.label} vs {base}: {len(t.pairs)} pairs")
        out += [line(r.criterion, r.verdict + ("" if r.required else " *"),
                     f"{r.value}  [{r.threshold}]") for r in t.rows]  # fmt: skip
        out += [f"verdict {t.label}: {t.verdict}", ""]
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


def _band(runs: list[RunRecord], key: str) -> tuple[np.ndarray, ...] | None:
    """(steps, median, min, max) over runs of `key`, each run interpolated onto all steps."""
    series = [r.series(key) for r in runs]
    series = [(s, v) for s, v in series if s.size]
    if not series:
        return None
    grid = np.unique(np.concatenate([s for s, _ in series]))
    stack = np.array([np.interp(grid, s, v, left=np.nan, right=np.nan) for s, v in series])
    with np.errstate(all="ignore"):
        return grid, np.nanmedian(stack, 0), np.nanmin(stack, 0), np.nanmax(stack, 0)


PANELS = (
    ("{stability}", "{stability} (criterion 5)"),
    (L_Q, "loss/l_q over the whole batch (INFO: not comparable)"),
    ("{capture}", "{capture} (held-out)"),
    (PNL, "eval/pnl (held-out PnL per evaluation)"),
)


def plot(path: Path, treatments: list[Treatment], pairing: Pairing, keys: dict[str, str | None],
         title: str) -> None:  # fmt: skip
    """A panel per metric every judged run has (criterion 5's, l_q, the capture ratio, held-out
    PnL), a curve per arm: median over its runs with a min-max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = pairing.axis.label(pairing.axis.baseline)
    arms = {base: list({b.run_id: b for t in treatments for _, b in t.pairs}.values())}
    arms |= {t.label: [a for a, _ in t.pairs] for t in treatments}
    runs = [r for rs in arms.values() for r in rs]
    panels = []
    for key, label in PANELS:
        key = key.format(**{k: v or "" for k, v in keys.items()})
        if key and key not in [k for k, _ in panels] and all(r.metrics.get(key) for r in runs):
            panels.append((key, label.format(**{k: v or "" for k, v in keys.items()})))
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(6 * max(1, len(panels)), 4.5),
                             squeeze=False)  # fmt: skip
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (key, label) in zip(axes[0], panels, strict=False):
        for i, (arm, members) in enumerate(arms.items()):
            band = _band(members, key)
            if band is None:
                continue
            steps, mid, lo, hi = band
            color = colors[i % len(colors)]
            ax.plot(steps, mid, color=color, label=f"{arm} (median of {len(members)})")
            ax.fill_between(steps, lo, hi, color=color, alpha=0.15)
        ax.set_xlabel("env step")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
