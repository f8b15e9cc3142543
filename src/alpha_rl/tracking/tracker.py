"""Tracker: one MLflow run per job, fed by the training loop, never stopped by the store.

log_point first appends to run_dir/diag.jsonl (the local record, always complete), then buffers
the metrics. Buffered data goes out at flush(), which log_point calls itself when batch_size
values are waiting or flush_every_s has passed, and the pipeline calls at checkpoints. A store
that fails is retried at the first flush after retry_s; only finish() waits for it (up to
final_retry_s), and what it still cannot send it leaves in run_dir/unsent.jsonl for `sync`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from alpha_rl.commands import module_command
from alpha_rl.masking import redact, redact_key, secrets
from alpha_rl.tracking.config import TrackingConfig
from alpha_rl.tracking.delivery import Delivery, now_ms
from alpha_rl.tracking.records import (
    MAX_TAG_LEN,
    DiagWriter,
    Outbox,
    RunSpec,
    clip,
    why,
    write_unsent,
)
from alpha_rl.tracking.store import Store, resolve_uri, set_http_limits
from alpha_rl.tracking.sync import StoreUnreachableError, sync_run, unsent_files

log = logging.getLogger("alpha_rl.tracking")

DIAG_FILE = "diag.jsonl"
UNSENT_FILE = "unsent.jsonl"
REASON_TAG = "alpha_rl.failure_reason"
STATUSES = ("FINISHED", "FAILED", "KILLED")


class Tracker:
    """The tracking handle of one job (create it with open_tracker)."""

    def __init__(self, cfg: TrackingConfig, run_dir: Path, delivery: Delivery) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self._delivery = delivery
        self._box = Outbox()
        self._diag = DiagWriter(run_dir / DIAG_FILE)
        self._last_send = time.monotonic()
        self._finished = False
        self._bad_keys: set[str] = set()
        self._secrets = secrets()  # values of the environment's credentials, masked if logged

    @property
    def run_id(self) -> str | None:
        """The MLflow run id; None while the store has been unreachable since the start."""
        return self._delivery.spec.run_id if self._delivery.connected else None

    @property
    def experiment_id(self) -> str | None:
        """The MLflow experiment's id; None while the store has been unreachable since the start."""
        return self._delivery.experiment_id if self._delivery.connected else None

    @property
    def last_step(self) -> int:
        """On resume: the largest step the store held for this run when reopened; else -1."""
        return max(self._delivery.last_steps.values(), default=-1)

    def log_params(self, params: dict[str, Any]) -> None:
        """Queue and send params (a flattened config); over-long values are truncated, secrets
        of the environment masked (alpha_rl.masking)."""
        if self._open("log_params"):
            self._box.add_params({self._key(k): self._redact(v) for k, v in params.items()})
            self.flush()

    def set_tags(self, tags: dict[str, str]) -> None:
        """Queue and send tags; over-long values are truncated, secrets masked."""
        if self._open("set_tags"):
            self._box.add_tags({self._key(k): self._redact(v) for k, v in tags.items()})
            self.flush()

    def log_point(self, step: int, metrics: dict[str, float], diag: dict | None = None) -> None:
        """Record one log interval: a diag.jsonl line, then the metrics buffered at `step`."""
        if not self._open("log_point"):
            return
        now = time.time()
        record: dict[str, Any] = {"step": step, "time": now, "metrics": metrics}
        for key, value in (diag or {}).items():
            record.setdefault(key, value)  # a diag key named step, time or metrics yields to ours
        timestamp = int(now * 1000)
        for key, value in metrics.items():
            number = self._number(key, value)
            if number is not None:
                self._box.metrics.append((key, number, timestamp, int(step)))
        self._diag.write(record)  # WriteError: the metrics above still go to the store
        waited = time.monotonic() - self._last_send
        if len(self._box.metrics) >= self.cfg.batch_size or waited >= self.cfg.flush_every_s:
            self.flush()

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        """Queue a local file or directory as an artifact (sent now, or once the store is back)."""
        if self._open("log_artifact"):
            item = {"kind": "artifact", "path": str(Path(path).resolve())}
            self._box.files.append({**item, "artifact_path": artifact_path})
            self.flush()

    def log_text(self, text: str, name: str) -> None:
        """Queue text as the artifact file `name` (e.g. "config.yaml"), secrets masked."""
        if self._open("log_text"):
            self._box.files.append({"kind": "text", "name": name, "text": self._redact(text)})
            self.flush()

    @property
    def sent_metrics(self) -> int:
        """Metric values the store has accepted from this tracker so far."""
        return self._delivery.sent_metrics

    def _redact(self, value: Any) -> str:
        return redact(str(value), self._secrets)

    def _key(self, key: Any) -> str:
        return redact_key(str(key), self._secrets)

    def flush(self) -> bool:
        """Send what is buffered unless the store is in its retry backoff; True if all went."""
        self._last_send = time.monotonic()
        if not self._delivery.store.ready():
            return False
        return self._delivery.send(self._box)

    def finish(self, status: str = "FINISHED", reason: str | None = None) -> None:
        """End the run: upload diag.jsonl, send everything, set status; else write unsent.jsonl."""
        if status not in STATUSES:
            raise ValueError(f"status={status!r}: expected one of {', '.join(STATUSES)}")
        if self._finished:
            return
        self._finished = True
        if reason:
            self._box.add_tags({REASON_TAG: clip(self._redact(reason), MAX_TAG_LEN)})
        self._diag.close()
        if self._diag.path.exists():
            self._box.files.append(
                {"kind": "artifact", "path": str(self._diag.path), "artifact_path": None}
            )
        spec = self._delivery.spec
        spec.status, spec.end_time = status, now_ms()
        deadline = time.monotonic() + self.cfg.final_retry_s
        try:
            if self._delivery.store.retry_until(deadline, lambda: self._delivery.send(self._box)):
                return
        except KeyboardInterrupt:  # a second Ctrl-C while waiting for the store: keep the rest
            self._keep_unsent()
            raise
        self._keep_unsent()

    def suspend(self) -> None:
        """Send what is buffered and close diag.jsonl, leaving the run RUNNING: the job is being
        requeued, and its next start continues the run (sending first whatever could not be
        sent now, kept in unsent.jsonl)."""
        if self._finished:
            return
        self._finished = True
        self._diag.close()
        if not self._delivery.send(self._box):
            self._keep_unsent()

    def _keep_unsent(self) -> None:
        """Write what is still buffered to unsent.jsonl (the run directory's, else one in a
        fallback directory when the run's disk is full) and say how to send it later."""
        path = self._write_unsent()
        if path is None:
            return
        command = module_command("alpha_rl.tracking", ["sync", str(path.parent)])
        log.warning(
            "MLflow store %s still unreachable after %.0f s; %d unsent item(s) kept in %s. "
            "Send them later with: %s",
            self._delivery.store.uri,
            self.cfg.final_retry_s,
            len(self._box),
            path,
            command,
        )

    def _write_unsent(self) -> Path | None:
        """The unsent file written: in the run directory, else in the first fallback directory
        that takes it; None (logged, with the count) when no place could hold it."""
        places = [self.run_dir, *fallback_dirs(self.run_dir, self._delivery.spec.run_id)]
        problems: list[tuple[Path, str]] = []
        for place in places:
            try:
                if place != self.run_dir:
                    private_dir(place)
                path = _free_name(place, UNSENT_FILE)
                write_unsent(path, self._delivery.spec, self._box)
            except OSError as exc:
                problems.append((place, why(exc)))
                continue
            if place != self.run_dir:
                log.warning("cannot write unsent.jsonl into %s (%s); kept in %s instead",
                            self.run_dir, problems[0][1], path)  # fmt: skip
            return path
        tried = "; ".join(f"{place}: {reason}" for place, reason in problems)
        log.error("%d unsent item(s) of run %s are lost: no place could hold them (%s)",
                  len(self._box), self.run_id, tried)  # fmt: skip
        return None

    def _open(self, what: str) -> bool:
        if self._finished:
            log.warning("%s after finish() is ignored (run %s)", what, self.run_id)
        return not self._finished

    def _number(self, key: str, value: Any) -> float | None:
        try:
            number = float(value)
        except (TypeError, ValueError):
            if key not in self._bad_keys:
                log.warning("metric %s=%r is not a number; it goes to diag.jsonl only", key, value)
                self._bad_keys.add(key)
            return None
        return number


def open_tracker(
    cfg: TrackingConfig,
    run_dir: Path,
    *,
    run_name: str,
    parent_run_id: str | None = None,
    resume_run_id: str | None = None,
) -> Tracker:
    """A Tracker writing into run_dir; the MLflow run is created (or reopened) now if it can be.
    The run's name has the environment's secrets masked (it is shown in the store, tracking.json
    and unsent.jsonl); cfg has none in its store or experiment (TrackingConfig refuses them)."""
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    set_http_limits(cfg.http_timeout_s, cfg.http_retries)
    _send_leftovers(run_dir)
    store = Store(resolve_uri(cfg.uri), cfg.retry_s)
    spec = RunSpec(
        uri=store.uri,
        experiment=cfg.experiment,
        run_name=redact(run_name, secrets()),
        run_dir=str(run_dir),
        parent_run_id=parent_run_id,
        run_id=resume_run_id,
        resume=resume_run_id is not None,
        start_time=now_ms(),
    )
    tracker = Tracker(cfg, run_dir, Delivery(spec, store, run_dir, cfg.batch_size))
    tracker.flush()
    return tracker


def _send_leftovers(run_dir: Path) -> None:
    """Send what an earlier attempt in run_dir left unsent, before a resume reads the run back."""
    if not unsent_files(run_dir):
        return
    log.info("%s holds unsent data of an earlier attempt; sending it first", run_dir)
    try:
        sync_run(run_dir)
    except (StoreUnreachableError, ValueError, OSError) as exc:
        log.warning("%s (a resume may then send steps twice)", exc)


def fallback_dirs(run_dir: Path, run_id: str | None) -> list[Path]:
    """Where unsent data goes when the run directory cannot take it (its disk full, read-only):
    $ALPHA_RL_UNSENT_DIR if set, else ~/.cache/alpha_rl/unsent and <tmp>/alpha_rl_unsent-<uid>;
    one directory per run inside each, made private (mode 700, this user's) before use."""
    name = f"{run_dir.name}-{run_id or 'no-run-id'}"
    roots: list[Path] = []
    if os.environ.get("ALPHA_RL_UNSENT_DIR"):
        roots.append(Path(os.environ["ALPHA_RL_UNSENT_DIR"]))
    with contextlib.suppress(RuntimeError, KeyError):  # no HOME and no passwd entry
        roots.append(Path.home() / ".cache" / "alpha_rl" / "unsent")
    roots.append(Path(tempfile.gettempdir()) / f"alpha_rl_unsent-{os.geteuid()}")
    return [root / name for root in roots]


def private_dir(path: Path) -> Path:
    """`path` made (mode 700) and checked to be this user's and closed to others, with its parent
    when that is in a shared place (the temporary directory): OSError otherwise, so that no other
    user can read, swap or plant the unsent data that a later sync uploads."""
    checked = [path]
    if path.parent.parent == Path(tempfile.gettempdir()):
        path.parent.mkdir(mode=0o700, exist_ok=True)
        checked.append(path.parent)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    for directory in checked:
        info = directory.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise OSError(errno.EACCES, f"{directory} is not a directory of this user's alone")
    return path


def _free_name(run_dir: Path, name: str) -> Path:
    """run_dir/name, or name.<n>.jsonl when an earlier attempt left one there."""
    path = run_dir / name
    n = 1
    while path.exists():
        path = run_dir / f"{Path(name).stem}.{n}.jsonl"
        n += 1
    return path
