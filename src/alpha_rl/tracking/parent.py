"""One MLflow parent run per Hydra multirun, its jobs' runs nested under it.

The parent's id lives in `<sweep dir>/mlflow_parent.json` ({uri, experiment, run_id}). The Hydra
callback `ParentRunCallback` writes it before the first job starts and marks the parent FINISHED
after the last — FAILED, tagged `failed_jobs`, when jobs did not start (a config error; the jobs
note themselves in `<sweep dir>/failed_jobs.jsonl` and the sweep goes on without them).
Without the callback, the first job that calls `parent_run_for` creates the parent; an
exclusive lock on `<sweep dir>/mlflow_parent.lock` makes parallel jobs agree on one.
"""

from __future__ import annotations

import fcntl
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from alpha_rl.errors import ConfigError
from alpha_rl.masking import redact, secrets
from alpha_rl.tracking.config import TrackingConfig, check_launcher
from alpha_rl.tracking.delivery import PARENT_TAG
from alpha_rl.tracking.links import open_line, ui_of
from alpha_rl.tracking.records import write_json
from alpha_rl.tracking.store import Rejected, Store, StoreDown, resolve_uri, set_http_limits
from alpha_rl.tracking.stores import TrackingReadError, check_store_to_write
from alpha_rl.tracking.tracker import REASON_TAG

log = logging.getLogger("alpha_rl.tracking")

PARENT_FILE = "mlflow_parent.json"
FAILED_JOBS_FILE = "failed_jobs.jsonl"  # jobs of the sweep that did not start (a config error)
OUTCOME_FILE = "outcome.json"  # in each job's directory: how its run ended
LOCK_FILE = "mlflow_parent.lock"
SWEEP_TAG = "alpha_rl.sweep_dir"


def parent_name(preset: str | None = None) -> str:
    """The parent run's name: the sweep's preset (experiment= or hparams_search=, else `sweep`)
    and its start, `her_ablation__2026-12-02_01-43-03`."""
    return f"{preset or 'sweep'}__{time.strftime('%Y-%m-%d_%H-%M-%S')}"


def preset_of(config: DictConfig) -> str | None:
    """The experiment= or hparams_search= preset a multirun was started with, if any."""
    choices = OmegaConf.select(config, "hydra.runtime.choices", default=None) or {}
    return choices.get("experiment") or choices.get("hparams_search")


def parent_run_for(sweep_dir: Path, cfg: TrackingConfig, *, create: bool = True) -> str | None:
    """The parent run id of a multirun: read from the sweep dir, or (create=True) created there.

    None when the file is absent and create is False, when the file names another store or
    experiment, or when the store is unreachable (the job's run is then not nested).
    """
    sweep_dir = Path(sweep_dir)
    found, run_id = _read(sweep_dir, cfg)
    if found or not create:
        return run_id
    with _locked(sweep_dir):
        found, run_id = _read(sweep_dir, cfg)
        return run_id if found else _create(sweep_dir, cfg, parent_name())


class ParentRunCallback(Callback):
    """Hydra callback: one parent run per multirun (config from `config.tracking`)."""

    def __init__(self, parent_name: str | None = None) -> None:
        self.parent_name = parent_name

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Refuse a store the launcher would lose runs in, or that is damaged or another
        program's (exit 2), then create the parent run and write <sweep dir>/mlflow_parent.json."""
        try:
            cfg = TrackingConfig.from_cfg(config.tracking)
            check_store_to_write(cfg.uri)
            launcher = str(OmegaConf.select(config, "hydra.launcher._target_", default="") or "")
            warning = check_launcher(cfg, launcher)
        except (ConfigError, TrackingReadError) as exc:  # before any job: stop the sweep
            log.error("%s", exc)
            raise SystemExit(2) from None
        if warning:
            log.warning("%s", warning)
        sweep_dir = Path(config.hydra.sweep.dir)
        with _locked(sweep_dir):
            found, _ = _read(sweep_dir, cfg)
            if not found:
                _create(sweep_dir, cfg, self.parent_name or parent_name(preset_of(config)))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Mark the parent run FINISHED, or FAILED with a `failed_jobs` tag when jobs did not
        start, or KILLED when a signal stopped a job's run (a cluster's other jobs went on)
        (retrying up to tracking.final_retry_s); then exit 2 if any job did not start."""
        cfg = TrackingConfig.from_cfg(config.tracking)
        sweep_dir = Path(config.hydra.sweep.dir)
        failed, stopped = failed_jobs(sweep_dir), stopped_jobs(sweep_dir)
        _, run_id = _read(sweep_dir, cfg)
        if run_id and stopped:  # as its jobs' stop made it; a later FINISHED would hide them
            _close_parent(cfg, run_id, failed, status="KILLED",
                          reason=f"job(s) {', '.join(stopped)} stopped by a signal")  # fmt: skip
        elif run_id:
            _close_parent(cfg, run_id, failed)
        if failed:
            for f in failed:
                log.error("job %s did not start: %s", f["job"], f["error"])
            log.error("%d job(s) of the sweep did not start (%s)", len(failed),
                      sweep_dir / FAILED_JOBS_FILE)  # fmt: skip
            raise SystemExit(2)


def record_failed_job(sweep_dir: Path, job_dir: Path, overrides: list[str], exc: Exception) -> None:
    """Note in <sweep dir>/failed_jobs.jsonl a job that did not start (one line, appended)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"job": job_dir.name, "overrides": overrides, "error": str(exc)})
    with _locked(sweep_dir), open(sweep_dir / FAILED_JOBS_FILE, "a") as fh:
        fh.write(line + "\n")


def record_failed_run(sweep_dir: Path, cfg: TrackingConfig, name: str, overrides: list[str],
                      tags: dict[str, str], exc: Exception) -> str | None:  # fmt: skip
    """A FAILED run, nested under the sweep's parent, for a job that did not start (a search
    trial with a bad config: the trial is a result of the search, failed, in MLflow as in its
    study). Its params are the job's overrides; None (and a warning) while the store is down."""
    parent = parent_run_for(sweep_dir, cfg, create=False)
    hidden = secrets()
    reason = redact(str(exc), hidden)[:5000]
    labels = {key: redact(value, hidden) for key, value in tags.items()}
    labels |= {REASON_TAG: reason} | ({PARENT_TAG: parent} if parent else {})

    def create(client: Any, experiment_id: str) -> str:
        run = client.create_run(experiment_id, tags=labels, run_name=redact(name, hidden))
        for line in overrides:
            key, _, value = line.lstrip("+~").partition("=")
            client.log_param(run.info.run_id, key, redact(value, hidden)[:6000])
        client.set_terminated(run.info.run_id, "FAILED")
        return run.info.run_id

    store = _store(cfg)
    try:
        return store.call("record the failed job", create, store.experiment_id(cfg.experiment))
    except (StoreDown, Rejected) as exc2:
        log.warning("the failed job %s is not in the store (%s)", name, exc2)
        return None


def failed_jobs(sweep_dir: Path) -> list[dict]:
    """The jobs record_failed_job noted for this sweep."""
    path = sweep_dir / FAILED_JOBS_FILE
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def stopped_jobs(sweep_dir: Path) -> list[str]:
    """The sweep's jobs whose run a signal stopped (KILLED in their outcome.json): under a
    cluster's launcher (scancel) the other jobs went on to their end, and the sweep is not whole."""
    stopped = []
    for outcome in sorted(sweep_dir.glob("*/" + OUTCOME_FILE)):
        try:
            if json.loads(outcome.read_text()).get("status") == "KILLED":
                stopped.append(outcome.parent.name)
        except (OSError, ValueError, AttributeError):
            continue
    return stopped


def stop_parent(sweep_dir: Path, cfg: TrackingConfig, reason: str, status: str = "KILLED") -> None:
    """End a sweep's parent run KILLED with `reason` (a job of it was stopped by a signal, which
    stops the sweep), or with another `status` (a search that could not go on: FAILED)."""
    _, run_id = _read(sweep_dir, cfg)
    if run_id:
        _close_parent(cfg, run_id, [], status=status, reason=reason)


def set_parent_tags(cfg: TrackingConfig, run_id: str, tags: dict[str, str]) -> None:
    """Tags on a sweep's parent run (a warning, never an error, while its store is down)."""
    try:
        _store(cfg).call("tag the parent run",
                         lambda c: [c.set_tag(run_id, k, v) for k, v in tags.items()])  # fmt: skip
    except (StoreDown, Rejected) as exc:
        log.warning("the parent run %s is not tagged (%s)", run_id, exc)


def _close_parent(cfg: TrackingConfig, run_id: str, failed: list[dict], status: str | None = None,
                  reason: str | None = None) -> None:  # fmt: skip
    store = _store(cfg)
    status = status or ("FAILED" if failed else "FINISHED")

    def close(client: Any) -> None:
        if failed:
            jobs = ", ".join(str(f["job"]) for f in failed)
            client.set_tag(run_id, "failed_jobs", f"{len(failed)}: {jobs} ({FAILED_JOBS_FILE})")
        if reason:
            client.set_tag(run_id, REASON_TAG, reason)
        client.set_terminated(run_id, status)

    def attempt() -> bool:
        try:
            store.call("close the parent run", close)
        except (StoreDown, Rejected):
            return False
        return True

    if not store.retry_until(time.monotonic() + cfg.final_retry_s, attempt):
        log.warning("the parent run %s stays RUNNING: its store %s is down", run_id, store.uri)


def ui_opening(cfg: TrackingConfig) -> str | None:
    """How to open the experiment's runs in the UI (None while the store is down, or for a
    store no UI of ours serves, which is not asked)."""
    if ui_of(cfg.uri) is None:
        return None
    try:
        experiment_id = _store(cfg).experiment_id(cfg.experiment)
    except (StoreDown, Rejected):
        return None
    return open_line(cfg.uri, experiment_id)


def recorded_parent(sweep_dir: Path) -> str | None:
    """The parent run id a multirun directory recorded (PARENT_FILE); None where there is none;
    ConfigError naming the file where it cannot be read."""
    path = Path(sweep_dir) / PARENT_FILE
    if not path.is_file():
        return None
    try:
        return str(json.loads(path.read_text())["run_id"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path} cannot be read ({type(exc).__name__}: {exc}): it should be "
                          "a multirun's record of its parent run") from None  # fmt: skip


def _store(cfg: TrackingConfig) -> Store:
    set_http_limits(cfg.http_timeout_s, cfg.http_retries)
    return Store(resolve_uri(cfg.uri), cfg.retry_s)


def _read(sweep_dir: Path, cfg: TrackingConfig) -> tuple[bool, str | None]:
    """(file present, parent run id if it belongs to cfg's store and experiment)."""
    path = sweep_dir / PARENT_FILE
    if not path.is_file():
        return False, None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        log.warning("cannot read %s (%s): the run is not nested", path, exc)
        return True, None
    if (data.get("uri"), data.get("experiment")) != (resolve_uri(cfg.uri), cfg.experiment):
        log.warning(
            "%s names run %s of %s / %s, not this job's store %s / %s: the run is not nested",
            path,
            data.get("run_id"),
            data.get("uri"),
            data.get("experiment"),
            cfg.uri,
            cfg.experiment,
        )
        return True, None
    return True, data.get("run_id")


def nested_parent(sweep_dir: Path, cfg: TrackingConfig, name: str,
                  tags: dict[str, str]) -> str | None:  # fmt: skip
    """Create a multirun's parent run before the multirun starts, with `tags` (a study's stage:
    nested under the study's run), and write its file, which the multirun then takes as its
    own; None (and a warning) if the store is down."""
    with _locked(sweep_dir):
        return _create(sweep_dir, cfg, name, tags)


def _create(sweep_dir: Path, cfg: TrackingConfig, name: str,
            more: dict[str, str] | None = None) -> str | None:  # fmt: skip
    """Create the parent run and write its file; None (and a warning) if the store is down."""
    store = _store(cfg)
    tags = {SWEEP_TAG: str(sweep_dir.resolve())} | (more or {})
    try:
        experiment_id = store.experiment_id(cfg.experiment)
        run = store.call(
            "create the parent run",
            lambda c: c.create_run(experiment_id, tags=tags, run_name=name),
        )
    except (StoreDown, Rejected) as exc:
        log.warning(
            "no parent run for sweep %s (%s): its jobs' runs are not nested", sweep_dir, exc
        )
        return None
    run_id = run.info.run_id
    data = {"uri": store.uri, "experiment": cfg.experiment, "run_id": run_id}
    write_json(sweep_dir / PARENT_FILE, data)
    return run_id


@contextmanager
def _locked(sweep_dir: Path) -> Iterator[None]:
    """Hold an exclusive flock on <sweep_dir>/mlflow_parent.lock (creating the dir)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with (sweep_dir / LOCK_FILE).open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
