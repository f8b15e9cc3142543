"""One training job from a composed config: check, build, step, log, evaluate, checkpoint, report.

Order of failure: a bad config raises before the market is built or a device is touched; a
run that diverges (NaN/inf in l_q or the parameters) stops, keeps its last checkpoint and ends as
FAILED in MLflow with the reason as a tag; any other error ends it as FAILED too and is re-raised.
SIGTERM or SIGINT stops it after the current step with a checkpoint at that step, KILLED, the
resume command in the log and as a tag (pipeline/life/stop.py). The tracker writes the diag JSONL
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
from collections.abc import Generator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, open_dict

from alpha_rl.errors import CheckpointError, DivergenceError, WriteError
from alpha_rl.market.calendar import calendar_of
from alpha_rl.pipeline.configure.config import (
    keep_beta_anneal,
    log_beta_anneal,
    plan_run,
    with_market,
)
from alpha_rl.pipeline.configure.objective import METRIC as OBJECTIVE_METRIC
from alpha_rl.pipeline.configure.parts import layout_from_plan
from alpha_rl.pipeline.configure.plan import Plan
from alpha_rl.pipeline.configure.scale import Markets, market_and_config
from alpha_rl.pipeline.evaluation.evaluate import Evaluator
from alpha_rl.pipeline.life import checkpoint, owner
from alpha_rl.pipeline.life.identity import (
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
from alpha_rl.pipeline.life.job import Job, Outcome
from alpha_rl.pipeline.life.labels import (
    check_resumable,
    config_yaml,
    curves_title,
    money_units,
    run_name,
)
from alpha_rl.pipeline.life.record import (
    Point,
    describe_run,
    log_point,
    say_outcome,
    search_tags,
    write_plots,
)
from alpha_rl.pipeline.life.saver import Saver, requeued_job, resume_dir
from alpha_rl.pipeline.life.stop import StopSignals
from alpha_rl.pipeline.report.progress import Progress
from alpha_rl.pipeline.report.summary import Summary
from alpha_rl.pipeline.step.lockstep import Seat, group_key, locksteps, seats
from alpha_rl.pipeline.step.trainer import Trainer
from alpha_rl.pipeline.step.workers import Workers, open_workers
from alpha_rl.session import Session, open_sessions
from alpha_rl.tracking import Tracker, TrackingConfig, open_tracker, parent_run_for
from alpha_rl.tracking.reap import HOST_TAG, PID_TAG, RESUME_TAG
from alpha_rl.tracking.stores import check_store_to_write
from alpha_rl.tracking.system import SystemMetrics
from alpha_rl.tracking.tracker import DIAG_FILE

log = logging.getLogger("alpha_rl")


def run_job(cfg: DictConfig, job: Job) -> Outcome:
    """Run the job `cfg` describes; see the module docstring for what happens on failure."""
    (result,) = run_jobs([(cfg, job)])
    if isinstance(result, BaseException):
        raise result
    return result


def run_jobs(jobs: Sequence[tuple[DictConfig, Job]],
             cpus: int | None = None) -> list[Outcome | Exception]:  # fmt: skip
    """Run `jobs` in this process as one pack: every job's run on one backend (one CUDA
    context), each its own trainer, run directory, MLflow run, checkpoints and outcome. The
    pack steps every run once, then again. Runs whose shapes agree (lockstep.group_key) are
    agents of one Lockstep: each kernel of their step is launched once for all of them (the
    agent axis); groups of other shapes queue on streams of their own, so the device runs them
    side by side. Each run is bit for bit what it is alone.

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
                asked = [asks[i] for i in live]
                groups = [group_key(cfg) for cfg, _ in asked] if len(asked) > 1 else None
                with open_sessions(asked, groups) as sessions:
                    places = seats(list(live), groups)
                    try:
                        _drive(live, dict(zip(live, sessions, strict=True)), results, places)
                    finally:
                        for run in live.values():  # any still open: ended before the backend
                            run.close()
                        for lockstep in locksteps(places):
                            lockstep.close()
        finally:
            for run in live.values():
                run.close()
            if workers is not None:
                workers.shutdown()
    return results  # type: ignore[return-value]


def _drive(live: dict[int, Generator], sessions: dict[int, Session],
           results: list[Outcome | Exception | None],
           places: dict[int, Seat] | None = None) -> None:  # fmt: skip
    """Advance every live run a step at a time, round robin, until each has returned its
    Outcome or raised; a run that raises leaves the pack with its exception as its result. A run
    waiting on a helper yields that work's Future: when every live run waits, the pack sleeps
    until one of them is done rather than spin. `places`: each run's Seat in its group's
    Lockstep (pipeline/step/lockstep.py), sent with its session."""
    places = places or {}

    def advance(i: int, sent: Any = None) -> Any:
        try:
            return live[i].send(sent)
        except StopIteration as done:
            results[i] = done.value
        except Exception as exc:
            if len(results) > 1:
                log.error("run %d of the pack stopped: %s; the others go on", i, exc)
            results[i] = exc
        del live[i]
        if i in places:  # the others no longer wait for it
            places[i].leave()
        return None

    for i, session in sessions.items():
        advance(i, (session, places.get(i)))  # builds its trainer and takes its first step
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
    for the evaluations' ledgers (pipeline/step/workers.py); `markets`: the markets its runs
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
    sent = yield scaled, layout_from_plan(scaled, job.choices, plan)
    if sent is None:
        raise RuntimeError("a job's steps are sent the session of its config first")
    session, seat = sent
    log.info("%s", session.isv.layout.table())
    units = money_units(session.cfg)
    log.info("money: %s; rewards: %s", units["units.pnl"], units["units.reward"])
    log_beta_anneal(cfg, plan)
    trainer = Trainer(session, market.train, plan)
    if seat is not None:  # an agent of its group's lockstep
        seat.join(trainer)
    evaluator = Evaluator(session, market.heldout, plan, trainer.learner, trainer.stream,
                          workers and workers.processes, calendar_of(market.book))  # fmt: skip
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
                      plan.eval.sharpe_window,
                      title=curves_title(cfg, job.choices, run_dir))  # fmt: skip
    if meta is not None:  # the run's log points before this start, up to its checkpoint
        summary.read_history(run_dir / DIAG_FILE)
    saver = Saver(run_dir, trainer, plan.run.checkpoint_replay, config_yaml(cfg), saving,
                  identity["id"])  # fmt: skip
    system = SystemMetrics(tracking, tracker.run_id, session.backend.name, meta is not None)
    try:
        outcome = yield from _loop(trainer, evaluator, tracker, plan, summary, saver, stop, system,
                                   workers and workers.threads, seat)  # fmt: skip
    finally:
        system.stop()
        try:
            evaluator.close()
        finally:
            trainer.close()
    set_identity_run(run_dir, identity, outcome.run_id)  # a store that came back late
    return outcome


def _step(
    trainer: Trainer, t: int, audited: bool, judges: Executor | None, seat: Seat | None = None
) -> Generator[Future, None, tuple[dict[str, float], dict[str, Any]]]:
    """Step t, audited (the GPU's kernels against their oracles, in `judges` when given: it
    yields until they are done) or not; with its lockstep's agents when it has a `seat` (it
    yields until the last of them arrives: an audited kernel is then read and launched once for
    all the agents auditing that step); the audit's metrics and its diag block."""
    if not audited:
        if seat is None:
            trainer.step()
        else:
            yield from seat.arrive()
        return {}, {}
    if seat is None:
        audit = trainer.audited_step(judges)
    else:
        with trainer.auditing(judges) as audit:
            yield from seat.arrive(audited=True)
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


def _loop(trainer: Trainer, evaluator: Evaluator, tracker: Tracker, plan: Plan, summary: Summary,
          saver: Saver, stop: StopSignals, system: SystemMetrics, judges: Executor | None = None,
          seat: Seat | None = None) -> Generator[Future | None, Any, Outcome]:  # fmt: skip
    """Steps until `steps` (or a stop signal), with log points, evaluations, audits (judged in
    `judges`, a pack's threads, when given) and checkpoints, yielding after each; the system
    metrics stop before the run ends."""
    run, run_dir = plan.run, saver.run_dir
    audit_on = run.audit_every > 0 and trainer.backend.name != "numpy"
    progress = Progress(run.steps, start=trainer.t)
    status, reason, mark = "FINISHED", None, (time.perf_counter(), trainer.t)
    objective, plotted = math.nan, False
    pending: Point | None = None  # a log point whose evaluation's ledgers are being computed
    try:
        while trainer.t < run.steps and not stop.requested:
            t, shown = trainer.t + 1, {}
            metrics, diag = yield from _step(trainer, t, audit_on and t % run.audit_every == 0,
                                             judges, seat)  # fmt: skip
            logs, evaluates = t % run.log_every == 0 or t == run.steps, evaluator.due(t, run.steps)
            saves = t == run.steps or bool(run.checkpoint_every and t % run.checkpoint_every == 0)
            if pending is not None and (metrics or logs or evaluates or saves or pending.ready()):
                point, pending, began = pending, None, time.perf_counter()  # written once
                yield from point.write(tracker, summary, progress)  # in step order
                mark = (mark[0] + time.perf_counter() - began, mark[1])  # not training time
            if logs:
                mark = log_point(trainer, tracker, mark, metrics, diag)
            if evaluates:  # a step at a time: a pack's other runs go on
                reading = yield from evaluator.start(final=t == run.steps)
                held = not saves and reading.waiting() is not None  # (a checkpoint's: not)
                if not held:  # done (a run without workers), or due with this step's checkpoint
                    metrics |= yield from reading.wait()
                mark = (time.perf_counter(), t)  # evaluation time is not training time
                if held:  # the run steps on while its ledgers are computed; the point waits
                    pending, shown, metrics = Point(t, metrics, diag, reading), metrics, {}
            if t == run.steps and plan.objective is not None:  # with the last point's metrics
                objective = plan.objective.value(run_dir / DIAG_FILE, run.steps, (t, metrics))
                if math.isfinite(objective):
                    metrics[OBJECTIVE_METRIC] = objective
            if metrics:
                tracker.log_point(t, metrics, diag)
                summary.update(t, metrics)
            if saves:
                tracker.flush()
                saver.save()
                if t == run.steps and saver.missing_final():
                    tracker.set_tags(saver.missing_final())
            progress.update(t, metrics or shown)  # a held point's figures so far
            yield  # the pack's other runs take their step
        if pending is not None:  # a stop signal's step: its point before the checkpoint
            point, pending = pending, None
            yield from point.write(tracker, summary, progress)
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
        if pending is not None:  # a run that failed: the evaluation it made is still recorded
            pending.write_now(tracker, summary)
        progress.close()
        if status == "REQUEUED":
            status, reason = stop.requeue_or_end(tracker, reason)
        if not plotted:  # a run that failed: here and now
            for _ in write_plots(run_dir, tracker, evaluator, summary, inline=True):
                pass
        system.stop()
        tracker.finish(status, reason)
        say_outcome(run_dir, status, trainer.t, reason, seat and seat.group())
    return Outcome(status, run_dir, tracker.run_id, trainer.t, reason, tuple(summary.lines()),
                   stop.signum, objective=objective,
                   experiment_id=tracker.experiment_id)  # fmt: skip
