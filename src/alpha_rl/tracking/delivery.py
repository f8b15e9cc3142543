"""Delivery: moves an Outbox into one MLflow run, first creating (or reopening) that run.

Shared by the live Tracker and by `sync_run`. Items leave the Outbox only once the store has
accepted them, so a `StoreDown` part-way leaves exactly the unsent rest queued, in order. A chunk
the store refuses (`Rejected`: a bad key, a param whose value changed on resume) is retried item
by item; the items refused alone go to `rejected.jsonl` beside the run, with the store's reason.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alpha_rl.tracking.records import (
    PARAMS_TAGS_PER_REQUEST,
    Outbox,
    RunSpec,
    dumps,
    write_json,
)
from alpha_rl.tracking.store import Rejected, Store, StoreDown, entities, label_experiment

log = logging.getLogger("alpha_rl.tracking")

TRACKING_FILE = "tracking.json"
REJECTED_FILE = "rejected.jsonl"
PARENT_TAG = "mlflow.parentRunId"
RUN_DIR_TAG = "alpha_rl.run_dir"


def now_ms() -> int:
    """Wall-clock time in ms since the epoch (MLflow's timestamps)."""
    return int(time.time() * 1000)


class Delivery:
    """Sends Outboxes to the run described by a RunSpec through a Store."""

    def __init__(self, spec: RunSpec, store: Store, run_dir: Path, batch_size: int) -> None:
        self.spec = spec
        self.store = store
        self.run_dir = run_dir
        self.batch_size = batch_size
        self.connected = False  # the run exists in the store and we have spoken to it
        self.experiment_id: str | None = None  # the run's, once connected (a reopened run's too)
        self.terminated = False
        self.last_steps: dict[str, int] = {}  # on resume: per key, the largest step stored before
        self.sent_metrics = 0
        self.bad_keys: set[str] = set()  # metric keys the store refused (a metric's key is all
        self._warned_reject = False  # that can be wrong with it: values are floats, steps ints)

    def send(self, box: Outbox) -> bool:
        """Send everything in box (then the terminal status, if set); False if the store is down."""
        try:
            self._connect()
            self._screen(box)
            self._drain(box.tags, PARAMS_TAGS_PER_REQUEST, self._log_tags, "tag")
            self._drain(box.params, PARAMS_TAGS_PER_REQUEST, self._log_params, "param")
            self._drain(box.metrics, self.batch_size, self._log_metrics, "metric")
            self._drain(box.files, 1, self._log_file, "artifact")
            if self.spec.status and not self.terminated:
                self.store.call("set the run's status", self._terminate)
                self.terminated = True
        except StoreDown:
            return False
        return True

    def _screen(self, box: Outbox) -> None:
        """Drop steps a resumed run holds; set aside points of keys the store refused before."""
        if not (self.last_steps or self.bad_keys):
            return
        kept: deque = deque()
        refused = []
        for point in box.metrics:
            if point[0] in self.bad_keys:
                refused.append(point)
            elif point[3] > self.last_steps.get(point[0], -1):
                kept.append(point)
        box.metrics = kept
        if refused:
            self._reject("metric", refused, "its key was refused before")

    # --- the run ---

    def _connect(self) -> None:
        if self.connected:
            return
        try:
            if self.spec.run_id is None:
                self.experiment_id = self.store.experiment_id(self.spec.experiment)
                run = self.store.call("create the run", self._create, self.experiment_id)
                self.spec.run_id = run.info.run_id
            elif self.spec.resume:
                self.last_steps = self.store.call("reopen the run", self._reopen)
        except Rejected as exc:  # nothing can be sent without the run: keep it all, as in an outage
            self.store.mark_down("open the run", exc)
            raise StoreDown(str(exc)) from exc
        self.connected = True
        names = ("uri", "experiment", "run_id", "parent_run_id", "run_name")
        try:
            write_json(self.run_dir / TRACKING_FILE, {k: getattr(self.spec, k) for k in names})
        except OSError as exc:  # a local disk problem must not stop the run either
            log.warning("cannot write %s: %s", self.run_dir / TRACKING_FILE, exc)

    def _create(self, client: Any, experiment_id: str) -> Any:
        tags = {RUN_DIR_TAG: self.spec.run_dir}
        if self.spec.parent_run_id:
            tags[PARENT_TAG] = self.spec.parent_run_id
        return client.create_run(
            experiment_id, start_time=self.spec.start_time, tags=tags, run_name=self.spec.run_name
        )

    def _reopen(self, client: Any) -> dict[str, int]:
        """Mark the resumed run RUNNING (its experiment given what it lacks of its kind and runs
        view); per metric key, the largest step it holds."""
        run_id = self.spec.run_id
        run = client.get_run(run_id)
        client.update_run(run_id, status="RUNNING")
        self.experiment_id = run.info.experiment_id
        label_experiment(client, client.get_experiment(self.experiment_id))
        last = {}
        for key in run.data.metrics:
            steps = [m.step for m in client.get_metric_history(run_id, key)]
            last[key] = max(steps, default=-1)
        return last

    def _terminate(self, client: Any) -> None:
        client.set_terminated(self.spec.run_id, self.spec.status, self.spec.end_time)

    # --- the data ---

    def _drain(
        self, queue: dict | deque, size: int, send: Callable[[Any, list], None], kind: str
    ) -> None:
        """Send queue's items in chunks of size, dropping each chunk once the store took it."""
        while queue:
            chunk = _peek(queue, size)
            try:
                self.store.call(f"log {kind}s", send, chunk)
            except Rejected as exc:
                if len(chunk) > 1:  # find the refused items: send this chunk's items one by one
                    for _ in chunk:
                        self._drain_one(queue, send, kind)
                    continue
                self._reject(kind, chunk, str(exc))
            _drop(queue, len(chunk))

    def _drain_one(self, queue: dict | deque, send: Callable[[Any, list], None], kind: str) -> None:
        chunk = _peek(queue, 1)
        try:
            self.store.call(f"log a {kind}", send, chunk)
        except Rejected as exc:
            self._reject(kind, chunk, str(exc))
        _drop(queue, 1)

    def _reject(self, kind: str, items: list, error: str) -> None:
        """Append refused items to rejected.jsonl; warn the first time."""
        path = self.run_dir / REJECTED_FILE
        try:
            with path.open("a", encoding="utf-8") as f:
                for item in items:
                    f.write(dumps({"kind": kind, "item": item, "error": error}) + "\n")
        except OSError as exc:
            log.warning(
                "cannot write %s (%s): %d refused %s(s) are lost", path, exc, len(items), kind
            )
        if kind == "metric":
            self.bad_keys.update(point[0] for point in items)
        level = logging.DEBUG if self._warned_reject else logging.WARNING
        log.log(level, "the MLflow store refused a %s (kept in %s): %s", kind, path, error)
        self._warned_reject = True

    def _log_tags(self, client: Any, chunk: list[tuple[str, str]]) -> None:
        tags = [entities().RunTag(k, v) for k, v in chunk]
        client.log_batch(self.spec.run_id, tags=tags, synchronous=True)

    def _log_params(self, client: Any, chunk: list[tuple[str, str]]) -> None:
        params = [entities().Param(k, v) for k, v in chunk]
        client.log_batch(self.spec.run_id, params=params, synchronous=True)

    def _log_metrics(self, client: Any, chunk: list[tuple[str, float, int, int]]) -> None:
        metrics = [entities().Metric(k, v, ts, step) for k, v, ts, step in chunk]
        client.log_batch(self.spec.run_id, metrics=metrics, synchronous=True)
        self.sent_metrics += len(chunk)

    def _log_file(self, client: Any, chunk: list[dict[str, Any]]) -> None:
        (item,) = chunk
        if item["kind"] == "text":
            client.log_text(self.spec.run_id, item["text"], item["name"])
            return
        path = Path(item["path"])
        if not path.exists():  # a local problem no retry can fix: refuse the item
            raise _LocalRejection(f"{path} does not exist")
        log_fn = client.log_artifacts if path.is_dir() else client.log_artifact
        log_fn(self.spec.run_id, str(path), item.get("artifact_path"))


class _LocalRejection(Exception):  # noqa: N818
    """An item that cannot be sent for a local reason (classified like a store rejection)."""

    error_code = "BAD_REQUEST"


def _peek(queue: dict | deque, n: int) -> list:
    items = queue.items() if isinstance(queue, dict) else queue
    return list(itertools.islice(items, n))


def _drop(queue: dict | deque, n: int) -> None:
    for _ in range(n):
        if isinstance(queue, dict):
            del queue[next(iter(queue))]
        else:
            queue.popleft()
