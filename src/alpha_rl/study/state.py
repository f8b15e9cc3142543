"""A staged study's record on disk (`<study dir>/study.json`): what it runs, its design, the
stages it ran (each a multirun under the study's MLflow run) and what its looks decided. Written
whole after every change (a temporary file renamed over it), so a study stopped at any point
continues from it (`alpha-rl-study --resume <study dir>`)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from alpha_rl.errors import ConfigError
from alpha_rl.killcheck.staged import Progress

STATE_FILE = "study.json"
RUNNING, DONE, ABANDONED = "running", "done", "abandoned"


@dataclass
class Stage:
    """One stage: its look, the seeds it ran, its multirun directory and parent run, and whether
    it ran to its end (a stage stopped part-way is run again whole, and its runs left out)."""

    look: int
    seeds: list[int]
    values: list[str]  # the treatment values it ran (the open ones), and the baseline
    sweep_dir: str
    parent: str | None
    status: str = RUNNING


@dataclass
class StudyState:
    """Everything a study needs to go on: its preset and overrides, the axis, the tracking
    store, the study's own MLflow run, its stages and progress, and the criteria's overrides."""

    preset: str
    overrides: list[str]
    axis: str  # the axis's name, which is also the key its stages override
    baseline: str
    values: list[str]
    uri: str
    experiment: str
    tracking: dict[str, Any]  # the runs' tracking settings, as composed
    parent: str | None
    criteria: list[str]
    progress: Progress
    stages: list[Stage] = field(default_factory=list)

    def save(self, study_dir: Path) -> None:
        data = asdict(self) | {"progress": self.progress.as_json()}
        path = study_dir / STATE_FILE
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, study_dir: Path) -> StudyState:
        path = study_dir / STATE_FILE
        if not path.is_file():
            raise ConfigError(f"--resume {study_dir}: no {STATE_FILE} there (not a study "
                              "directory?): give the directory a study printed")  # fmt: skip
        try:
            data: dict[str, Any] = json.loads(path.read_text())
            data.pop("axis_key", None)  # a record from before: always the axis itself
            data["progress"] = Progress.from_json(data["progress"])
            data["stages"] = [Stage(**s) for s in data["stages"]]
            return cls(**data)
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{path} cannot be read ({type(exc).__name__}: {exc}): it is a "
                              "study's record; start the study again") from None  # fmt: skip

    @property
    def open_values(self) -> list[str]:
        """The treatment values no look has decided yet."""
        return [v for v in self.values if v not in self.progress.decided]

    def done_parents(self) -> list[str]:
        """The parent runs of the stages that ran to their end."""
        return [s.parent for s in self.stages if s.status == DONE and s.parent]
