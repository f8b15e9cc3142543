"""What a run records of itself besides its metrics: its params, tags and artifacts at the
start, its plots (curves, tear sheet) and its outcome file at the end."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Generator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from alpha_rl.market import Market
from alpha_rl.pipeline.configure.plan import Plan
from alpha_rl.pipeline.evaluation import tearsheet
from alpha_rl.pipeline.evaluation.evaluate import Evaluator, Pending
from alpha_rl.pipeline.life.job import Job
from alpha_rl.pipeline.life.labels import (
    ORACLE_AUDIT,
    config_yaml,
    flatten,
    money_units,
    resolved,
    tags,
)
from alpha_rl.pipeline.report.curves import plot_run
from alpha_rl.pipeline.report.progress import Progress
from alpha_rl.pipeline.report.summary import Summary
from alpha_rl.pipeline.report.sweep_report import OUTCOME_FILE, write_outcome
from alpha_rl.pipeline.step.trainer import Trainer
from alpha_rl.pipeline.step.workers import outcome, submitted
from alpha_rl.session import Session
from alpha_rl.tracking import Tracker
from alpha_rl.tracking.reap import HEARTBEAT

log = logging.getLogger("alpha_rl")


def describe_run(tracker: Tracker, session: Session, cfg: DictConfig, job: Job, plan: Plan,
                 market: Market, probe_digest: str) -> None:  # fmt: skip
    """Params (the config's, the resolved values, the fold's ranges and the money units), tags
    and the config and ISV artifacts of a new run."""
    if session.backend.name == "numpy":
        audit = ORACLE_AUDIT
    else:
        audit = f"every {plan.run.audit_every} steps" if plan.run.audit_every else "off"
    units = money_units(session.cfg) | {"reward.scale_resolved": float(session.cfg.reward.scale)}
    tracker.log_params(flatten(resolved(cfg)) | plan.resolved_params() | market.params() | units)
    labels = tags(session, job.choices, audit)
    labels["probe_digest"] = probe_digest
    labels["fold"] = "single" if market.fold.index is None else str(market.fold.index)
    if job.gpu is not None:
        labels["gpu_slot"] = job.gpu.tag
    tracker.set_tags(labels)
    tracker.log_text(config_yaml(cfg), "config.yaml")
    tracker.log_text(session.isv.layout.table(), "isv_table.txt")


def search_tags(cfg: DictConfig) -> dict[str, str]:
    """The tags that name a search trial's study and number, and the instance (seed, fold) of
    the trial the run is (cfg.search)."""
    tags = {"search.study": str(cfg.search.study), "search.trial": str(cfg.search.trial)}
    if cfg.search.get("instance") is not None:
        tags["search.instance"] = str(cfg.search.instance)
    return tags


def say_outcome(run_dir: Path, status: str, steps: int, reason: str | None,
                group: dict[str, Any] | None = None) -> None:  # fmt: skip
    """<run dir>/outcome.json, which the sweep's last lines count (a failed write: a warning);
    `group`: the agents its steps were launched with (pipeline/lockstep.Seat.group)."""
    try:
        write_outcome(run_dir, status, steps, reason, group)
    except OSError as exc:
        log.warning("could not write %s: %s", run_dir / OUTCOME_FILE, exc)


def write_plots(run_dir: Path, tracker: Tracker, evaluator: Evaluator, summary: Summary,
                inline: bool = False) -> Generator[Future, None, None]:  # fmt: skip
    """<run dir>/curves.png, and tearsheet.html and .png of the start's last evaluation (with
    `eval.tearsheet`), as the run's artifacts. A pack draws them in its worker processes,
    yielding meanwhile (`inline`: here, as a lone run does); a failed plot is a warning, never
    the run's error."""
    title = summary.title or str(run_dir)
    plots: list[tuple[str, Callable[..., Any], tuple]] = [
        ("curves", plot_run, (run_dir, run_dir / "curves.png", title, summary.currency,
                              (summary.eval_envs, summary.eval_steps))),
    ]  # fmt: skip
    reading, walked = evaluator.last, evaluator.backtest
    if walked is not None:
        summary.backtest = walked.lines(summary.currency)
        tracker.set_tags(walked.tags())
    if evaluator.cfg.tearsheet and (reading or walked) is not None:
        windows = None if reading is None else (reading.agent, reading.baselines)
        plots.append(("tear sheet", tearsheet.write_tearsheet,
                      (run_dir, title, summary.currency, walked, windows,
                       tearsheet.undated(evaluator.book, evaluator.walk is not None))))  # fmt: skip
    workers = None if inline else evaluator.workers
    drawn = [(what, fn, args, submitted(workers, fn, *args)) for what, fn, args in plots]
    for what, fn, args, future in drawn:
        while not future.done():
            yield future
        try:
            paths = outcome(future, fn, *args)
        except Exception as exc:
            log.warning("could not write the %s of %s: %s", what, run_dir, exc)
            continue
        if what == "curves":
            summary.curves = paths
            paths = [paths]
        for path in paths:
            tracker.log_artifact(path)
        if what == "tear sheet":
            log.info("tear sheet: %s", ", ".join(map(str, paths)))


@dataclasses.dataclass
class Point:
    """A log point of step `t` held back while its evaluation's ledgers are computed (in a
    pack's worker processes): written, whole and in step order, before anything after it."""

    t: int
    metrics: dict[str, float]
    diag: dict[str, Any]
    reading: Pending

    def ready(self) -> bool:
        return self.reading.waiting() is None

    def write(self, tracker: Tracker, summary: Summary,
              progress: Progress) -> Generator[Future, None, None]:  # fmt: skip
        """Wait for the ledgers (yielding their future), then record the point."""
        self.metrics |= yield from self.reading.wait()
        self._record(tracker, summary)
        progress.record(self.metrics, self.t)

    def write_now(self, tracker: Tracker, summary: Summary) -> None:
        """The same, waiting here (a run that ends by an error); a failure is only said."""
        try:
            self.metrics |= self.reading.metrics()
            self._record(tracker, summary)
        except Exception as exc:
            log.warning("the evaluation at step %d is not recorded: %s", self.t, exc)

    def _record(self, tracker: Tracker, summary: Summary) -> None:
        tracker.log_point(self.t, self.metrics, self.diag)
        summary.update(self.t, self.metrics)


def log_point(trainer: Trainer, tracker: Tracker, mark: tuple[float, int],
              metrics: dict[str, float], diag: dict[str, Any]) -> tuple[float, int]:  # fmt: skip
    """The log point's metrics and diag blocks added to the step's, with the steps per second
    since `mark` (time, step); a metric that is not finite is recorded, then raises
    DivergenceError. The new mark."""
    t = trainer.t
    point, blocks = trainer.read_log_point()
    now = time.perf_counter()
    sps = (t - mark[1]) / (now - mark[0])
    metrics |= point | {"perf/sps": sps, "perf/env_sps": sps * trainer.env.num_envs,
                        HEARTBEAT: time.time()}  # fmt: skip
    diag |= blocks
    if not trainer.finite(point):
        tracker.log_point(t, metrics, diag)  # the NaN itself is the evidence
        trainer.check_finite(point)  # raises DivergenceError
    return now, t
