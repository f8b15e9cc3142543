"""`hydra/launcher=slurm`: hydra-submitit-launcher's SLURM launcher, made to end a sweep the way
the other launchers do when a job dies without a word.

- Its `setup` lines run under a trap: the first that fails ends the job (exit 1), its stderr
  naming the line, instead of the job going on in an environment half set up.
- It waits for every job of the array, through the attempts of one that SLURM requeued (a
  failed node: sacct says NODE_FAIL while the job is back in the queue). A job that ended
  without a result (cancelled, a failed setup line, killed out of memory) no longer aborts the
  sweep with the first such job's error while the others still run: its state (from sacct) and
  the last line of its stderr are said, and one that never started its run is noted in
  <sweep dir>/failed_jobs.jsonl, so the sweep's last lines count it and the sweep exits 2, as
  for a job refused under the basic launcher. A job whose run ended (KILLED by scancel, say) is
  counted from its outcome.json.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher import submitit_launcher
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from omegaconf import OmegaConf

from alpha_rl.errors import AlphaRlError

log = logging.getLogger(__name__)

# runs before the setup lines: the first that fails ends the job, named on its stderr
SETUP_TRAP = ("trap 'status=$?; echo \"alpha_rl: a setup line failed (exit $status): "
              "$BASH_COMMAND\" >&2; exit 1' ERR")  # fmt: skip
SETUP_END = "trap - ERR"
REQUEUE_POLL_S = 5.0  # how often a job SLURM requeued is looked for in squeue


class LostJobError(AlphaRlError):
    """A job of the sweep that SLURM ended before its run started."""


def guarded(setup: list[str] | None) -> list[str] | None:
    """The setup lines between a trap that ends the job at the first that fails and its end."""
    return [SETUP_TRAP, *setup, SETUP_END] if setup else setup


def result(job: Any) -> JobReturn:
    """The job's result. One that ended without it (sacct says NODE_FAIL, say) but that SLURM
    requeued (it is in squeue again) is waited for through its next attempts."""
    import submitit

    while True:
        try:
            return job.results()[0]
        except submitit.core.utils.FailedJobError:
            raise
        except submitit.core.utils.UncompletedJobError:
            if not in_queue(job.job_id):
                raise
            log.warning("SLURM job %s ended %s and was requeued: waiting for its next attempt",
                        job.job_id, job.state)  # fmt: skip
            while in_queue(job.job_id):
                time.sleep(REQUEUE_POLL_S)
            job.get_info(mode="force")  # sacct's state of the last attempt, not the cached one


def in_queue(job_id: str) -> bool:
    """Whether SLURM still holds the job (pending, running, completing: squeue lists it)."""
    try:
        shown = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                               text=True, timeout=60)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("squeue could not be asked about job %s (%s)", job_id, exc)
        return False
    return shown.returncode == 0 and bool(shown.stdout.strip())


class SlurmLauncher(submitit_launcher.SlurmLauncher):
    """submitit's SLURM launcher, its setup lines guarded, every job waited for (module doc)."""

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.params["setup"] = guarded(self.params.get("setup"))

    def launch(self, job_overrides: Any, initial_job_idx: int) -> list[JobReturn]:
        import submitit  # lazy, as Hydra's plugin discovery wants

        assert self.config is not None
        params = dict(self.params)
        folder, requeues = params.pop("submitit_folder"), params.pop("max_num_timeout")
        executor = submitit.AutoExecutor(cluster="slurm", folder=folder,
                                         slurm_max_num_timeout=requeues)  # fmt: skip
        queue_keys = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{key if key in queue_keys else f"slurm_{key}": value
                                      for key, value in params.items()})  # fmt: skip
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:  # as submitit's launcher does
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
        job_params = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
            job_params.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}",
                               Singleton.get_state()))  # fmt: skip
        jobs = executor.map_array(self, *zip(*job_params, strict=True))
        if jobs:
            array = jobs[0].job_id.split("_")[0]
            log.info("submitted as SLURM job %s: squeue -j %s to watch it", array, array)
        returns, errors = [], []
        pairs = zip(jobs, job_overrides, strict=True)
        for idx, (job, overrides) in enumerate(pairs, initial_job_idx):
            try:
                returns.append(result(job))
            except submitit.core.utils.FailedJobError as exc:  # the job's own error: raised,
                errors.append(exc)  # after every other job has ended
            except submitit.core.utils.UncompletedJobError:
                returns.append(self._lost(job, idx, list(overrides), sweep_dir))
        if errors:
            raise errors[0]
        return returns

    def _lost(self, job: Any, idx: int, overrides: list[str], sweep_dir: Path) -> JobReturn:
        """A job that ended without a result: said, and noted as not started when its run never
        began; its return is NaN, a failed job's objective."""
        from alpha_rl.tracking.parent import OUTCOME_FILE, record_failed_job

        job_dir = sweep_dir / str(idx)
        stderr = (job.stderr() or "").strip().splitlines()
        why = f"SLURM job {job.job_id} ended {job.state} without a result" + (
            f": {stderr[-1]}" if stderr else "")  # fmt: skip
        log.error("job #%d: %s (its log: %s)", idx, why, job.paths.stderr)
        if not (job_dir / OUTCOME_FILE).exists():
            record_failed_job(sweep_dir, job_dir, overrides, LostJobError(why))
        lost = JobReturn(overrides=overrides, status=JobStatus.COMPLETED)
        lost.return_value = math.nan
        return lost
