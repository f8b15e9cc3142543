"""The Hydra task behind `alpha-rl-train` / `python -m alpha_rl.train` (alpha_rl/train.py), over
conf/train.yaml: one job, trained, tracked and reported."""

from __future__ import annotations

import dataclasses
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
from alpha_rl.pipeline.configure.keys import check_command_line, command_line_overrides
from alpha_rl.pipeline.configure.options import check_chosen_options
from alpha_rl.pipeline.life.job import Job, Outcome
from alpha_rl.pipeline.life.owner import RunDirError
from alpha_rl.pipeline.life.record import search_tags
from alpha_rl.pipeline.life.run import run_job, run_jobs
from alpha_rl.pipeline.life.stop import StoppedAtOnce, sigint_raised
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
    job = job_of(hc)
    try:
        launcher = str(hc.launcher.get("_target_", ""))
        with gpu_slot(launcher, job.sweep_dir, hc.launcher.get("slots_dir")) as gpu:
            job = dataclasses.replace(job, gpu=gpu)
            outcome = run_job(cfg, job)
    except StoppedAtOnce:  # a second Ctrl-C; a first one before the run's loop is train.py's
        log.error("stopped at once; the last checkpoint written stays valid")
        sys.exit(130)
    except (AlphaRlError, OmegaConfBaseException) as exc:  # the latter: a ${...} that fails
        refused = refuse(cfg, job, exc)
        if job.sweep_dir is None:
            sys.exit(2)
        if cfg.search.trial is not None:  # the search records the trial as failed, goes on
            raise refused from None
        return math.nan
    report(outcome, cfg)
    if outcome.stopped_by is not None:
        stopped([outcome], cfg, job.sweep_dir)
    if outcome.status != "FINISHED" and job.sweep_dir is None:
        sys.exit(1)  # in a sweep the other jobs go on: a failed run is a result too
    return outcome.objective if outcome.status == "FINISHED" else math.nan


def refuse(cfg: DictConfig, job: Job, exc: Exception) -> Exception:
    """A job refused with a user-caused error: say it and, in a multirun, record it (a search's
    trial as a FAILED run, any other job in <sweep dir>/failed_jobs.jsonl). The error, as a
    ConfigError when the config could not be resolved."""
    if isinstance(exc, OmegaConfBaseException):
        exc = ConfigError(f"the config cannot be resolved: {exc}".replace("\n", "; "))
    log.error("%s", exc)
    if job.sweep_dir is None:
        return exc
    overrides = list(job.overrides)
    if cfg.search.trial is not None:
        run_id = record_failed_run(job.sweep_dir, TrackingConfig.from_cfg(cfg.tracking),
                                   f"{cfg.search.study}_trial{cfg.search.trial}", overrides,
                                   search_tags(cfg), exc)  # fmt: skip
        if run_id is not None and not isinstance(exc, RunDirError):  # not another's dir
            write_json(job.output_dir / "tracking.json", {"run_id": run_id})
        return exc
    record_failed_job(job.sweep_dir, job.output_dir, overrides, exc)
    log.error("this job of the sweep did not start; the other jobs go on")
    return exc


def run_pack(jobs: list[tuple[DictConfig, Job]],
             cpus: int | None = None) -> list[float | Exception]:  # fmt: skip
    """The jobs of one pack of a multirun (hydra/launcher=packed), run in this process as one
    (pipeline/life/run.py, run_jobs; its helpers on `cpus` CPUs, default all), each reported as
    `run` reports a job of a sweep: per job, the objective (NaN unless it finished), or the error
    that the launcher marks the job FAILED with (a search's failed trial, an unexpected error). A
    stop signal stops every run of the pack with its checkpoint, then ends the sweep as `run`
    does."""
    try:
        results = run_jobs(jobs, cpus)
    except StoppedAtOnce:
        log.error("stopped at once; the last checkpoints written stay valid")
        sys.exit(130)
    values: list[float | Exception] = []
    halted = []
    for (cfg, job), result in zip(jobs, results, strict=True):
        if isinstance(result, (AlphaRlError, OmegaConfBaseException)):
            refused = refuse(cfg, job, result)
            values.append(refused if cfg.search.trial is not None else math.nan)
        elif isinstance(result, Exception):
            log.error("job %s of the pack failed: %s: %s", job.output_dir,
                      type(result).__name__, result)  # fmt: skip
            values.append(result)
        else:
            report(result, cfg)
            if result.stopped_by is not None:
                halted.append(result)
            values.append(result.objective if result.status == "FINISHED" else math.nan)
    if halted:
        stopped(halted, jobs[0][0], jobs[0][1].sweep_dir)
    return values


def stopped(outcomes: list[Outcome], cfg: DictConfig, sweep_dir: Path | None) -> None:
    """Say how to continue each run a signal stopped, end its sweep's parent KILLED, and exit
    with the signal's status (128 + its number)."""
    for outcome in outcomes:
        it = "it" if len(outcomes) == 1 else str(outcome.run_dir)  # a pack names each run
        if outcome.resume_command:
            log.warning("to continue %s: %s", it, outcome.resume_command)
        else:
            log.warning("%s stopped before its first checkpoint: run it again to start over",
                        it)  # fmt: skip
    if sweep_dir is not None:
        stop_parent(sweep_dir, TrackingConfig.from_cfg(cfg.tracking),
                    f"a job was stopped: {outcomes[0].reason}")  # fmt: skip
        log.warning("the sweep stops here; its parent run ends KILLED")
    sys.exit(128 + int(outcomes[0].stopped_by or 0))


def start() -> None:
    """Hydra parses the command line (overrides, -m for sweeps) and runs `run` per job; a key
    that conf/ does not have, or a misspelt group option, is refused first (exit 2, keys.py), as
    is a key of another option of its group (options.py)."""
    try:
        config_path = str(paths.conf_dir())
        overrides = command_line_overrides(sys.argv[1:])
        check_command_line(overrides)
        check_chosen_options(overrides)
    except AlphaRlError as exc:
        print(f"alpha-rl-train: {exc}", file=sys.stderr)
        sys.exit(2)
    hydra.main(version_base="1.3", config_path=config_path, config_name="train")(run)()
