"""The run's checkpoints as the loop writes them: where a resumed run's directory is, and the
saver that remembers the step of the last checkpoint written (and of one that failed)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from alpha_rl.errors import CheckpointError
from alpha_rl.pipeline.life import checkpoint
from alpha_rl.pipeline.life.stop import under_submitit

if TYPE_CHECKING:
    from alpha_rl.pipeline.step.trainer import Trainer

CHECKPOINT_TAG = "alpha_rl.checkpoint_missing"  # the last checkpoint failed (on_error=continue)


def resume_dir(resume: Path) -> Path:
    """The run directory `resume=` names, which must exist (CheckpointError otherwise)."""
    path = Path(resume).expanduser().absolute()
    if not path.is_dir():
        raise CheckpointError(f"resume={resume}: no such run directory; give the directory of "
                              "a run that saved a checkpoint")  # fmt: skip
    return path.resolve()


@dataclass
class Saver:
    """Writes the run's checkpoints and remembers the step of the last one written."""

    run_dir: Path
    trainer: Trainer
    with_replay: bool
    config_yaml: str
    cfg: checkpoint.CheckpointConfig
    identity: str  # the run directory's identity (identity.py), which each checkpoint carries
    last_step: int = -1

    missed_step: int = -1  # the step of the last checkpoint that failed (on_error=continue)

    def save(self) -> None:
        if checkpoint.save(self.run_dir, self.trainer, self.with_replay, self.config_yaml,
                           self.cfg, self.identity) is not None:  # fmt: skip
            self.last_step = self.trainer.t
        else:
            self.missed_step = self.trainer.t

    def missing_final(self) -> dict[str, str]:
        """A tag saying the run's last checkpoint could not be written (on_error=continue),
        and which one a resume would use; {} when it was written."""
        if self.missed_step != self.trainer.t:
            return {}
        newest = checkpoint.saved(self.run_dir)
        kept = f"the newest is {newest[0]}" if newest else "there is none"
        return {CHECKPOINT_TAG: f"no checkpoint at step {self.trainer.t}; {kept}"}


def requeued_job(output_dir: Path) -> bool:
    """Whether this is a restart of a submitit job that checkpointed before it was requeued."""
    return under_submitit() and bool(checkpoint.saved(output_dir))
