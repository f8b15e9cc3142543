"""A study in stages: looks at its runs as seeds are added, each treatment decided once.

At each look the treatments still open are judged (`judge.judge` with the look): a KILL, a KEEP
or a CANNOT-JUDGE is final, and the treatment runs no more seeds; an UNDECIDED one goes on to the
next stage, until the design's last look, where what is still open stays UNDECIDED. What a
decided treatment held of the error levels stays with it (`report.Settled`): the tests it was not
killed on keep their share of alpha, and a treatment not kept keeps its share of beta, so the
family-wise errors hold over every look (docs/verdicts.md, "Studies in stages").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from alpha_rl.killcheck.axes import Axis
from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.criteria import KILL
from alpha_rl.killcheck.judge import Look, judge
from alpha_rl.killcheck.pairs import Pairing
from alpha_rl.killcheck.report import CANNOT_JUDGE, KEEP, Settled, Treatment
from alpha_rl.killcheck.sequential import Design
from alpha_rl.tracking import RunRecord

FINAL = (KILL, KEEP, CANNOT_JUDGE)


@dataclass
class Progress:
    """What a study has decided so far: per treatment value its verdict and the look and pairs
    it was decided at; the levels the decided ones hold."""

    design: Design
    decided: dict[str, dict[str, Any]] = field(default_factory=dict)
    settled: Settled = field(default_factory=Settled)
    looks_done: int = 0

    def look(self, values: set[str]) -> Look:
        """The next look over the treatments of `values` not yet decided."""
        open_values = frozenset(v for v in values if v not in self.decided)
        return Look(self.design, self.looks_done, self.settled, open_values)

    def record(self, treatments: list[Treatment]) -> None:
        """One look's judgement: its final verdicts kept (at the last look, UNDECIDED too)."""
        last = self.looks_done == len(self.design.looks) - 1
        kill_open, keep_open = self.settled.kill_open, self.settled.keep_open
        for t in treatments:
            if t.verdict not in FINAL and not last:
                continue
            self.decided[t.value] = {"verdict": t.verdict, "look": self.looks_done,
                                     "pairs": len(t.pairs), "label": t.label}  # fmt: skip
            kill_open += sum(r.test is not None and r.required and r.verdict != KILL
                             for r in t.rows)  # fmt: skip
            keep_open += t.verdict != KEEP
        self.settled = Settled(kill_open, keep_open)
        self.looks_done += 1

    @property
    def finished(self) -> bool:
        return self.looks_done >= len(self.design.looks)

    def as_json(self) -> dict[str, Any]:
        return {"looks": list(self.design.looks), "gamma": self.design.gamma,
                "decided": self.decided, "settled": vars(self.settled),
                "looks_done": self.looks_done}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Progress:
        return cls(Design(tuple(data["looks"]), float(data["gamma"])), dict(data["decided"]),
                   Settled(**data["settled"]), int(data["looks_done"]))  # fmt: skip


def judge_look(
    progress: Progress,
    runs: list[RunRecord],
    axis: Axis,
    crit: Criteria,
    values: set[str],
    info: bool = True,
) -> tuple[list[Treatment], Pairing, int]:
    """Judge the open treatments at the study's next look and record it."""
    treatments, pairing, family = judge(runs, axis, crit, info, progress.look(values))
    progress.record(treatments)
    return treatments, pairing, family
