"""One training job from a composed config: check, build, step, log, evaluate, checkpoint, report.

Order of failure: a bad config raises before the market is built or a device is touched; a
run that diverges (NaN/inf in l_q or the parameters) stops, keeps its last checkpoint and ends as
FAILED in MLflow with the reason as a tag; any other error ends it as FAILED too and is re-raised.
SIGTERM or SIGINT stops it after the current step with a checkpoint at that step, KILLED, the
resume command in the log and as a tag (pipeline/stop.py). The tracker writes the diag JSONL
locally before it talks to the store, so a store outage never loses a metric. Each run records
its host and pid and, at every log point, a `sys/heartbeat` (unix time), so that a run whose
process died can be told from one still going (`python -m alpha_rl.tracking reap`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import socket
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from omegaconf import DictConfig, open_dict

from alpha_rl.commands import script_command
from alpha_rl.errors import CheckpointError, DivergenceError, WriteError
from alpha_rl.market import Market
from alpha_rl.pipeline import checkpoint, owner, tearsheet
from alpha_rl.pipeline.config import Plan, learner_updates, plan_run, with_market
from alpha_rl.pipeline.curves import plot_run
from alpha_rl.pipeline.evaluate import Evaluator
from alpha_rl.pipeline.identity import (
    IDENTITY_FILE,
    check_identity,
    check_resume_store,
    keep_diag_until,
    market_digest,
    previous_run_id,
    read_identity,
    refuse_a_used_dir,
    set_identity_run,
    write_identity,
)
from alpha_rl.pipeline.labels import (
    ORACLE_AUDIT,
    check_resumable,
    config_yaml,
    curves_title,
    flatten,
    money_units,
    resolved,
    run_name,
    tags,
)
from alpha_rl.pipeline.objective import METRIC as OBJECTIVE_METRIC
from alpha_rl.pipeline.parts import layout_from_plan
from alpha_rl.pipeline.progress import Progress
from alpha_rl.pipeline.saver import Saver, resume_dir
from alpha_rl.pipeline.scale import Markets, market_and_config
from alpha_rl.pipeline.stop import StopSignals, under_submitit
from alpha_rl.pipeline.summary import Summary
from alpha_rl.pipeline.sweep_report import OUTCOME_FILE, write_outcome
from alpha_rl.pipeline.trainer import Trainer
from alpha_rl.pipeline.workers import Workers, open_workers, outcome, submitted
from alpha_rl.replay import ReplayConfig
from alpha_rl.session import Session, open_sessions
from alpha_rl.tracking import Tracker, TrackingConfig, open_tracker, parent_run_for
from alpha_rl.tracking.reap import HEARTBEAT, HOST_TAG, PID_TAG, RESUME_TAG
from alpha_rl.tracking.stores import check_store_to_write
from alpha_rl.tracking.system import SystemMetrics
from alpha_rl.tracking.tracker import DIAG_FILE

if TYPE_CHECKING:
    from alpha_rl.launch import GpuSlot

log = logging.getLogger("alpha_rl")


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


def run_job(cfg: DictConfig, job: Job) -> Outcome:
    """Run the job `cfg` describes; see the module docstring for what happens on failure."""
    (result,) = run_jobs([(cfg, job)])
    if isinstance(result, BaseException):
        raise result
    return result


def run_jobs(jobs: Sequence[tuple[DictConfig, Job]],
             cpus: int | None = None) -> list[Outcome | Exception]:  # fmt: skip
    """Run `jobs` in this process as one pack: every job's run on one backend (one CUDA
    context), each its own trainer, stream, run directory, MLflow run, checkpoints and outcome.
    The pack steps every run once, then again: each run's launches queue on its own stream, so
    the device runs them side by side, and each run is bit for bit what it is alone.

    A job that fails (a bad config, a diverging run, an error of its own) ends as it would alone
    and its result is the Outcome or the exception; the other jobs go on. A stop signal stops
    them all, each with its checkpoint. In a pack of more than one job a cluster's requeue
    signal stops the runs like SIGTERM (the requeue is a single job's)."""
    results: list[Outcome | Exception | None] = [None] * len(jobs)
    requeue = len(jobs) == 1 and checkpoint.checkpoint_config(jobs[0][0]).requeue
    with StopSignals(requeue) as stop:
        live: dict[int, Generator] = {}
        asks = {}
        workers = open_workers(len(jobs), cpus)  # the evaluations' ledgers, side by side
        markets = Markets()  # runs of one market and seed share it
        try:
            for i, (cfg, job) in enumerate(jobs):
                run = _job_steps(cfg, job, stop, workers, markets)
                try:
                    asks[i] = next(run)  # its config and ISV layout: ready for a session
                    live[i] = run
                except Exception as exc:
                    results[i] = exc
            if live:
                with open_sessions([asks[i] for i in live]) as sessions:
                    try:
                        _drive(live, dict(zip(live, sessions, strict=True)), results)
                    finally:
                        for run in live.values():  # any still open: ended before the backend
                            run.close()
        finally:
            for run in live.values():
                run.close()
            if workers is not None:
                workers.shutdown()
    return results  # type: ignore[return-value]


def _drive(live: dict[int, Generator], sessions: dict[int, Session],
           results: list[Outcome | Exception | None]) -> None:  # fmt: skip
    """Advance every live run a step at a time, round robin, until each has returned its
    Outcome or raised; a run that raises leaves the pack with its exception as its result. A run
    waiting on a helper yields that work's Future: when every live run waits, the pack sleeps
    until one of them is done rather than spin."""

    def advance(i: int, sent: Session | None = None) -> Any:
        try:
            return live[i].send(sent)
        except StopIteration as done:
            results[i] = done.value
        except Exception as exc:
            if len(results) > 1:
                log.error("run %d of the pack stopped: %s; the others go on", i, exc)
            results[i] = exc
        del live[i]
        return None

    for i, session in sessions.items():
        advance(i, session)  # builds its trainer and takes its first step
    while live:
        waits = [advance(i) for i in list(live)]
        pending = [w for w in waits if isinstance(w, Future) and not w.done()]
        if pending and len(pending) == len(live):  # every run still going waits
            wait(pending, return_when=FIRST_COMPLETED)


def _job_steps(cfg: DictConfig, job: Job, stop: StopSignals, workers: Workers | None = None,
               markets: Markets | None = None,
               ) -> Generator[Any, Session | None, Outcome]:  # fmt: skip
    """One job as a generator: it yields its scaled config and ISV layout once (send it its
    session), then after every step; it returns the job's Outcome. `workers`: a pack's pool
    for the evaluations' ledgers (pipeline/workers.py); `markets`: the markets its runs
    share."""
    if job.gpu is not None and job.gpu.ordinal is not None:
        cfg = cfg.copy()
        with open_dict(cfg):
            cfg.backend.device = job.gpu.ordinal
    plan = plan_run(cfg)
    saving = checkpoint.checkpoint_config(cfg)
    tracking = TrackingConfig.from_cfg(cfg.tracking)
    check_store_to_write(tracking.uri)  # a damaged store, or another program's: not written
    if plan.run.resume is None and saving.requeue and requeued_job(job.output_dir):
        log.info("a requeued job: resuming from its checkpoint in %s", job.output_dir)
        plan = dataclasses.replace(plan, run=dataclasses.replace(plan.run, resume=job.output_dir))
    run_dir = job.output_dir if plan.run.resume is None else resume_dir(plan.run.resume)
    with owner.owned(run_dir) as run_dir:  # nothing of ours is written before this
        outcome = yield from _owned_job(cfg, job, plan, saving, tracking, run_dir, stop,
                                        workers, markets)  # fmt: skip
    if outcome.stopped_by is not None and checkpoint.saved(run_dir):
        outcome = dataclasses.replace(outcome, resume_command=job.resume_command(run_dir))
    return outcome


def _owned_job(cfg: DictConfig, job: Job, plan: Plan, saving: checkpoint.CheckpointConfig,
               tracking: TrackingConfig, run_dir: Path, stop: StopSignals, workers: Workers | None,
               markets: Markets | None) -> Generator[Any, Session | None, Outcome]:  # fmt: skip
    """_job_steps in the run directory it owns."""
    meta = None
    if plan.run.resume is not None:
        meta = checkpoint.read_meta(run_dir)
        check_resumable(meta["config"], cfg)
        checkpoint.check_steps(run_dir, meta, plan.run.steps)
        check_resume_store(run_dir, tracking.uri)
        plan = keep_beta_anneal(plan, cfg, meta["config"])
    else:
        refuse_a_used_dir(run_dir)
    market, scaled = market_and_config(cfg, plan.run.seed, plan.validation, markets)
    plan = with_market(plan, scaled)  # what the ISV is filled from: one route for every number
    digest = market_digest(market.train, market.heldout)
    identity = read_identity(run_dir) if meta is not None else None
    if identity is None:
        if meta is not None:
            log.info("%s has no %s (a directory of an earlier version): recorded now", run_dir,
                     IDENTITY_FILE)  # fmt: skip
        identity = write_identity(run_dir, plan.run.seed, digest)
    session = yield scaled, layout_from_plan(scaled, job.choices, plan)
    if session is None:
        raise RuntimeError("a job's steps are sent the session of its config first")
    log.info("%s", session.isv.layout.table())
    units = money_units(session.cfg)
    log.info("money: %s; rewards: %s", units["units.pnl"], units["units.reward"])
    log_beta_anneal(cfg, plan)
    trainer = Trainer(session, market.train, plan)
    evaluator = Evaluator(session, market.heldout, plan, trainer.learner, trainer.stream,
                          workers and workers.processes)  # fmt: skip
    resume_id = None
    if meta is not None:
        meta = checkpoint.restore(run_dir, trainer)
        resume_id = previous_run_id(run_dir)
        check_identity(run_dir, identity, seed=plan.run.seed, market=digest,
                             run_id=resume_id, checkpoint_id=meta.get("identity"))  # fmt: skip
        keep_diag_until(run_dir / DIAG_FILE, trainer.t, plan.run.log_every)
        log.info("resuming %s at step %d (run %s)", run_dir, trainer.t, resume_id)
    parent = parent_run_for(job.sweep_dir, tracking) if job.sweep_dir else None
    tracker = open_tracker(tracking, run_dir, run_name=run_name(cfg, job.choices),
                           parent_run_id=parent, resume_run_id=resume_id)  # fmt: skip
    owner.set_run_id(run_dir, tracker.run_id)
    set_identity_run(run_dir, identity, tracker.run_id)
    if meta is None:
        describe_run(tracker, session, cfg, job, plan, market, evaluator.probe.digest)
        if cfg.search.trial is not None:
            tracker.set_tags(search_tags(cfg))
    tracker.set_tags({HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid()),
                      RESUME_TAG: job.resume_command(run_dir)})  # fmt: skip
    summary = Summary(str(cfg.market.currency), plan.eval.num_envs, plan.eval.steps,
                      title=curves_title(cfg, job.choices, run_dir))  # fmt: skip
    if meta is not None:  # the run's log points before this start, up to its checkpoint
        summary.read_history(run_dir / DIAG_FILE)
    saver = Saver(run_dir, trainer, plan.run.checkpoint_replay, config_yaml(cfg), saving,
                  identity["id"])  # fmt: skip
    system = SystemMetrics(tracking, tracker.run_id, session.backend.name, meta is not None)
    try:
        outcome = yield from _loop(trainer, evaluator, tracker, plan, summary, saver, stop, system,
                                   workers and workers.threads)  # fmt: skip
    finally:
        system.stop()
        try:
            evaluator.close()
        finally:
            trainer.close()
    set_identity_run(run_dir, identity, outcome.run_id)  # a store that came back late
    return outcome


def keep_beta_anneal(plan: Plan, cfg: DictConfig, saved_yaml: str) -> Plan:
    """A resumed run keeps the β anneal its first start resolved (from that start's `steps`):
    a run extended with more steps holds β at 1 after its first end, never steps it back."""
    if cfg.replay.beta_anneal_updates is not None:
        return plan
    saved = yaml.safe_load(saved_yaml) or {}
    first = dataclasses.replace(plan.run, steps=int(saved.get("steps", plan.run.steps)))
    replay = ReplayConfig.from_cfg(cfg.replay, learner_updates(first, plan.agent))
    if replay != plan.replay:
        log.info("resume: PER's beta keeps the anneal over %d updates of the run's first %d "
                 "steps (beta stays 1 after it); set replay.beta_anneal_updates to choose",
                 replay.beta_anneal_updates, first.steps)  # fmt: skip
    return dataclasses.replace(plan, replay=replay)


def log_beta_anneal(cfg: DictConfig, plan: Plan) -> None:
    """Say over how many updates PER's β reaches 1, and where that number came from."""
    rp, source = plan.replay, "replay.beta_anneal_updates"
    if cfg.replay.beta_anneal_updates is None:
        source = f"the run's own {plan.learner_updates} learner updates"
    log.info("PER importance sampling: beta %.2f -> 1 over %d updates (%s)", rp.beta0,
             rp.beta_anneal_updates, source)  # fmt: skip


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


def _step(
    trainer: Trainer, t: int, audited: bool, judges: Executor | None
) -> Generator[Future, None, tuple[dict[str, float], dict[str, Any]]]:
    """Step t, audited (the GPU's kernels against their oracles, in `judges` when given: it
    yields until they are done) or not; the audit's metrics and its diag block."""
    if not audited:
        trainer.step()
        return {}, {}
    audit = trainer.audited_step(judges)
    while (judging := audit.waiting()) is not None:
        yield judging
    metrics = {"audit/mismatch": float(audit.total)}
    metrics |= {f"audit/{k}": float(v) for k, v in audit.mismatches.items()}
    if audit.total:
        log.warning("audit at step %d: %d mismatches: %s", t, audit.total, ", ".join(audit.first))
    return metrics, {"audit": {"mismatches": audit.mismatches, "first": audit.first}}


def _stopped(trainer: Trainer, tracker: Tracker, saver: Saver,
             stop: StopSignals) -> tuple[str, str]:  # fmt: skip
    """A stop signal's end: a checkpoint of the step reached (unless saved there), and the
    status and reason (KILLED, or REQUEUED when the cluster requeues the job)."""
    if trainer.t > 0 and saver.last_step != trainer.t:
        tracker.flush()
        saver.save()
    if stop.requeued:
        return "REQUEUED", f"requeued by the cluster at step {trainer.t}"
    return "KILLED", f"stopped by {stop.name} at step {trainer.t}"


def _log_point(trainer: Trainer, tracker: Tracker, mark: tuple[float, int],
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


def _loop(trainer: Trainer, evaluator: Evaluator, tracker: Tracker, plan: Plan, summary: Summary,
          saver: Saver, stop: StopSignals, system: SystemMetrics,
          judges: Executor | None = None) -> Generator[Future | None, Any, Outcome]:  # fmt: skip
    """Steps until `steps` (or a stop signal), with log points, evaluations, audits (judged in
    `judges`, a pack's threads, when given) and checkpoints, yielding after each; the system
    metrics stop before the run ends."""
    run, run_dir = plan.run, saver.run_dir
    audit_on = run.audit_every > 0 and trainer.backend.name != "numpy"
    progress = Progress(run.steps, start=trainer.t)
    status, reason, mark = "FINISHED", None, (time.perf_counter(), trainer.t)
    objective, plotted = math.nan, False
    try:
        while trainer.t < run.steps and not stop.requested:
            t = trainer.t + 1
            metrics, diag = yield from _step(trainer, t, audit_on and t % run.audit_every == 0,
                                             judges)  # fmt: skip
            if t % run.log_every == 0 or t == run.steps:
                mark = _log_point(trainer, tracker, mark, metrics, diag)
            if evaluator.due(t, run.steps):  # a step at a time: a pack's other runs go on
                metrics |= yield from evaluator.steps()
                mark = (time.perf_counter(), t)  # evaluation time is not training time
            if t == run.steps and plan.objective is not None:  # with the last point's metrics
                objective = plan.objective.value(run_dir / DIAG_FILE, run.steps, (t, metrics))
                if math.isfinite(objective):
                    metrics[OBJECTIVE_METRIC] = objective
            if metrics:
                tracker.log_point(t, metrics, diag)
                summary.update(t, metrics)
            if t == run.steps or (run.checkpoint_every and t % run.checkpoint_every == 0):
                tracker.flush()
                saver.save()
                if t == run.steps and saver.missing_final():
                    tracker.set_tags(saver.missing_final())
            progress.update(t, metrics)
            yield  # the pack's other runs take their step
        if stop.requested:
            status, reason = _stopped(trainer, tracker, saver, stop)
        if status != "REQUEUED":  # a requeue leaves at once (the cluster's grace is short)
            yield from write_plots(run_dir, tracker, evaluator, summary)
            plotted = True
    except DivergenceError as exc:
        status, reason = "FAILED", str(exc)
        log.error("run stopped: %s (the last checkpoint is kept)", exc)
    except (CheckpointError, WriteError) as exc:  # a checkpoint (on_error=stop) or diag.jsonl
        status, reason = "FAILED", str(exc)  # that could not be written: a full disk, say
        log.error("run stopped: %s", exc)
    except KeyboardInterrupt:
        status, reason = "KILLED", f"interrupted at step {trainer.t}"
        raise
    except BaseException as exc:
        status, reason = "FAILED", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        progress.close()
        if status == "REQUEUED":
            status, reason = _requeue(stop, tracker, reason)
        if not plotted:  # a run that failed: here and now
            for _ in write_plots(run_dir, tracker, evaluator, summary, inline=True):
                pass
        system.stop()
        tracker.finish(status, reason)
        _say_outcome(run_dir, status, trainer.t, reason)
    return Outcome(status, run_dir, tracker.run_id, trainer.t, reason, tuple(summary.lines()),
                   stop.signum, objective=objective,
                   experiment_id=tracker.experiment_id)  # fmt: skip


def search_tags(cfg: DictConfig) -> dict[str, str]:
    """The tags that name a search trial's study and number (cfg.search)."""
    return {"search.study": str(cfg.search.study), "search.trial": str(cfg.search.trial)}


def _requeue(stop: StopSignals, tracker: Tracker, reason: str | None) -> tuple[str, str]:
    """Leave the MLflow run open and let submitit resubmit the job (it exits the process); when
    it may not (timed out max_num_timeout times), the run ends KILLED: (status, reason)."""
    try:
        stop.requeue()
    except SystemExit:
        tracker.suspend()
        raise
    except Exception as exc:  # submitit's UncompletedJobError: no requeue left
        log.error("the job is not requeued again (%s); resume it by hand", exc)
        return "KILLED", f"{reason}, not requeued: {exc}"
    return "KILLED", f"{reason}, not requeued"


def requeued_job(output_dir: Path) -> bool:
    """Whether this is a restart of a submitit job that checkpointed before it was requeued."""
    return under_submitit() and bool(checkpoint.saved(output_dir))


def _say_outcome(run_dir: Path, status: str, steps: int, reason: str | None) -> None:
    """<run dir>/outcome.json, which the sweep's last lines count (a failed write: a warning)."""
    try:
        write_outcome(run_dir, status, steps, reason)
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
    reading = evaluator.last
    if reading is not None and evaluator.cfg.tearsheet:
        plots.append(("tear sheet", tearsheet.write_tearsheet,
                      (run_dir, reading.agent, reading.baselines, evaluator.book,
                       evaluator.costs, title)))  # fmt: skip
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
