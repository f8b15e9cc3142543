"""What a job is (where it runs, what it was asked) and what it reports when it ends."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from alpha_rl.commands import script_command

if TYPE_CHECKING:
    from alpha_rl.launch import GpuSlot


@dataclass(frozen=True)
class Job:
    """Where a job runs: its output directory, and the sweep directory of a multirun."""

    output_dir: Path
    choices: Mapping[str, str]
    sweep_dir: Path | None = None
    gpu: GpuSlot | None = None  # the GPU a local_gpus sweep gave this job
    overrides: tuple[str, ...] = ()  # the job's command-line overrides (for its resume command)

    def resume_command(self, run_dir: Path) -> str:
        """The command that continues this job's run from its newest checkpoint, as the user
        runs it (alpha_rl.commands)."""
        kept = [o for o in self.overrides if not o.startswith(("resume=", "+resume="))]
        return script_command("alpha-rl-train", [*kept, f"resume={run_dir}"])


@dataclass(frozen=True)
class Outcome:
    """What a finished job reports."""

    status: str
    run_dir: Path
    run_id: str | None
    steps: int
    reason: str | None = None
    summary: tuple[str, ...] = ()  # the last held-out evaluation and the l_q trend
    stopped_by: int | None = None  # the signal that stopped it (SIGTERM, SIGINT), if one did
    resume_command: str | None = None  # set when a checkpoint lets the run continue
    objective: float = math.nan  # what it returns to a search (NaN: it did not finish)
    experiment_id: str | None = None  # the MLflow experiment of run_id
