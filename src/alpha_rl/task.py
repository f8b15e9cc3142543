"""The Hydra task behind `alpha-rl-train` / `python -m alpha_rl.train` (alpha_rl/train.py), over
conf/train.yaml: one job, trained, tracked and reported."""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from alpha_rl import paths
from alpha_rl.errors import AlphaRlError, ConfigError
from alpha_rl.launch import GpuSlot, gpu_slot
from alpha_rl.pipeline.keys import check_command_line, command_line_overrides
from alpha_rl.pipeline.owner import RunDirError
from alpha_rl.pipeline.run import Job, Outcome, run_job, search_tags
from alpha_rl.pipeline.stop import StoppedAtOnce, sigint_raised
from alpha_rl.tracking import TrackingConfig
from alpha_rl.tracking.links import open_line
from alpha_rl.tracking.parent import record_failed_job, record_failed_run, stop_parent
from alpha_rl.tracking.records import write_json

log = logging.getLogger("alpha_rl")


def sweep_dir_of(hc: object) -> Path | None:
    """The sweep directory of a multirun job (None for a single run)."""
    multirun = hc.mode == RunMode.MULTIRUN  # type: ignore[attr-defined]
    return Path(hc.sweep.dir).resolve() if multirun else None  # type: ignore[attr-defined]


def job_of(hc: object, gpu: GpuSlot | None = None) -> Job:
    """Where Hydra runs this job (its output dir; the sweep dir in a multirun; its GPU slot)."""
    return Job(
        output_dir=Path(hc.runtime.output_dir),  # type: ignore[attr-defined]
        choices=dict(hc.runtime.choices),  # type: ignore[attr-defined]
        sweep_dir=sweep_dir_of(hc),
        gpu=gpu,
        # as typed: reading them resolved would resolve (and may fail on) ${...} in them
        overrides=tuple(
            OmegaConf.to_container(hc.overrides.task, resolve=False)  # type: ignore[attr-defined]
        ),
    )


def report(outcome: Outcome, cfg: DictConfig) -> None:
    """Where the results are and how to open them."""
    uri = cfg.tracking.uri
    log.info("run %s after %d steps: %s", outcome.status, outcome.steps, outcome.run_dir)
    for line in outcome.summary:
        log.info("%s", line)
    if outcome.run_id:
        log.info("mlflow: run %s in experiment %r at %s", outcome.run_id,
                 cfg.tracking.experiment, uri)  # fmt: skip
    opening = open_line(str(uri), outcome.experiment_id) if outcome.experiment_id else None
    if opening:
        log.info("every metric in the UI: %s", opening)


@sigint_raised()  # a Ctrl-C held through the start-up (train.py) is raised here, before the run
def run(cfg: DictConfig) -> float:
    """One job: train, track and report; returns the run's objective (NaN unless it finished),
    which a hyper-parameter search reads.

    A user-caused error exits 2 with its message. In a multirun the job is recorded in
    <sweep dir>/failed_jobs.jsonl and the sweep goes on (it then ends FAILED and exits 2); in a
    search the trial becomes a FAILED run, the error goes back to the search and the search goes
    on. A run that ends FAILED exits 1 (a single run) or lets the sweep go on (a multirun). A run
    stopped by SIGTERM or SIGINT exits 143 or 130 after saying how to resume it; in a sweep the
    stop ends the sweep, its parent run KILLED."""
    hc = HydraConfig.get()
    try:
        launcher = str(hc.launcher.get("_target_", ""))
        with gpu_slot(launcher, sweep_dir_of(hc), hc.launcher.get("slots_dir")) as gpu:
            job = job_of(hc, gpu)
            outcome = run_job(cfg, job)
    except StoppedAtOnce:  # a second Ctrl-C; a first one before the run's loop is train.py's
        log.error("stopped at once; the last checkpoint written stays valid")
        sys.exit(130)
    except (AlphaRlError, OmegaConfBaseException) as exc:  # the latter: a ${...} that fails
        if isinstance(exc, OmegaConfBaseException):
            exc = ConfigError(f"the config cannot be resolved: {exc}".replace("\n", "; "))
        log.error("%s", exc)
        sweep_dir = sweep_dir_of(hc)
        if sweep_dir is None:
            sys.exit(2)
        overrides = list(OmegaConf.to_container(hc.overrides.task, resolve=False))
        if cfg.search.trial is not None:  # the search records the trial as failed, goes on
            run_id = record_failed_run(sweep_dir, TrackingConfig.from_cfg(cfg.tracking),
                                       f"{cfg.search.study}_trial{cfg.search.trial}", overrides,
                                       search_tags(cfg), exc)  # fmt: skip
            if run_id is not None and not isinstance(exc, RunDirError):  # not another's dir
                write_json(Path(hc.runtime.output_dir) / "tracking.json", {"run_id": run_id})
            raise exc from None
        record_failed_job(sweep_dir, Path(hc.runtime.output_dir), overrides, exc)
        log.error("this job of the sweep did not start; the other jobs go on")
        return math.nan
    report(outcome, cfg)
    if outcome.stopped_by is not None:
        stopped(outcome, cfg, job.sweep_dir)
    if outcome.status != "FINISHED" and job.sweep_dir is None:
        sys.exit(1)  # in a sweep the other jobs go on: a failed run is a result too
    return outcome.objective if outcome.status == "FINISHED" else math.nan


def stopped(outcome: Outcome, cfg: DictConfig, sweep_dir: Path | None) -> None:
    """Say how to continue a run a signal stopped, end its sweep's parent KILLED, and exit with
    the signal's status (128 + its number)."""
    if outcome.resume_command:
        log.warning("to continue it: %s", outcome.resume_command)
    else:
        log.warning("it stopped before its first checkpoint: run it again to start over")
    if sweep_dir is not None:
        stop_parent(sweep_dir, TrackingConfig.from_cfg(cfg.tracking),
                    f"a job was stopped: {outcome.reason}")  # fmt: skip
        log.warning("the sweep stops here; its parent run ends KILLED")
    sys.exit(128 + outcome.stopped_by)


def start() -> None:
    """Hydra parses the command line (overrides, -m for sweeps) and runs `run` per job; a key
    that conf/ does not have, or a misspelt group option, is refused first (exit 2, keys.py)."""
    try:
        config_path = str(paths.conf_dir())
        check_command_line(command_line_overrides(sys.argv[1:]))
    except AlphaRlError as exc:
        print(f"alpha-rl-train: {exc}", file=sys.stderr)
        sys.exit(2)
    hydra.main(version_base="1.3", config_path=config_path, config_name="train")(run)()
