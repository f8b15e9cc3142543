"""Reading runs back from MLflow (for the kill-criteria check) and writing verdicts onto them.

`RunReader(uri)` lists an experiment's runs (optionally only the children of one parent run,
optionally narrowed by an MLflow filter string) as `RunRecord`s: params, tags, status and the full
history of the metrics asked for. Unlike the Tracker, which must never stop a training run, a
reader that cannot read its store raises TrackingReadError in one line: there is nothing to judge
without it. It never creates a store, nor writes MLflow's schema into one (alpha_rl.tracking.stores
looks first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from alpha_rl.errors import AlphaRlError
from alpha_rl.tracking.records import PARAMS_TAGS_PER_REQUEST
from alpha_rl.tracking.store import label_experiment, new_client, resolve_uri
from alpha_rl.tracking.stores import (
    NotInStoreError,
    TrackingReadError,
    check_store,
    failure,
    store_name,
)

PARENT_TAG = "mlflow.parentRunId"
PAGE = 1000
REMEDY = "give the URI of an existing MLflow store"
__all__ = ["NotInStoreError", "RunReader", "RunRecord", "TrackingReadError"]


@dataclass(frozen=True)
class RunRecord:
    """One MLflow run as the check sees it; metrics[key] = [(step, value), ...] sorted by step;
    start_time in ms since the epoch."""

    run_id: str
    name: str
    status: str
    params: dict[str, str]
    tags: dict[str, str]
    metrics: dict[str, list[tuple[int, float]]]
    start_time: int = 0
    # what was computed from the record, by key (a record is read once and never changes)
    cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps int64, values float64) of one metric, read-only; empty arrays when the run
        lacks it."""
        found = self.cache.get(("series", key))
        if found is None:
            points = self.metrics.get(key, [])
            steps = np.array([s for s, _ in points], np.int64)
            values = np.array([v for _, v in points], np.float64)
            steps.setflags(write=False)
            values.setflags(write=False)
            found = self.cache[("series", key)] = (steps, values)
        return found

    @property
    def last_step(self) -> int:
        """The largest step any of its loaded metrics reached (0 when none)."""
        found = self.cache.get("last_step")
        if found is None:
            found = max((pts[-1][0] for pts in self.metrics.values() if pts), default=0)
            self.cache["last_step"] = found
        return found


class RunReader:
    """Runs of one tracking store; `remedy` ends a refusal where another store is the way out
    (a command names its option: "give --tracking-uri of an existing MLflow store")."""

    def __init__(self, uri: str, remedy: str = REMEDY) -> None:
        self.uri = resolve_uri(uri)
        self.name = store_name(self.uri)  # the file of an SQLite store, else the URI, masked
        self.remedy = remedy
        check_store(self.uri, remedy)
        self.client = self._call("open it", lambda: new_client(self.uri))

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except AlphaRlError:
            raise
        except Exception as exc:  # the store boundary: any client failure
            raise failure(self.uri, what, exc, self.remedy) from exc

    def ping(self) -> None:
        """One small request (an experiment listed): a store that does not answer is told now."""
        self._call("list experiments", lambda: self.client.search_experiments(max_results=1))

    def experiment(self, name: str) -> Any:
        """Experiment `name` (TrackingReadError naming the store when it is absent)."""
        found = self._call(f"read experiment {name!r}",
                           lambda: self.client.get_experiment_by_name(name))  # fmt: skip
        if found is None:
            raise NotInStoreError(
                f"tracking store {self.name} has no experiment {name!r}; pass the one the runs "
                "were logged to (tracking.experiment)"
            )
        return found

    def experiment_id(self, name: str) -> str:
        """The id of experiment `name` (TrackingReadError naming the store when it is absent)."""
        return self.experiment(name).experiment_id

    def label_experiment(self, experiment: Any) -> None:
        """Give `experiment` what it lacks of its kind and runs view (alpha_rl.tracking.view)."""
        self._call(f"tag experiment {experiment.name!r}",
                   lambda: label_experiment(self.client, experiment))  # fmt: skip

    def runs(
        self,
        experiment: str,
        keys: Callable[[str], bool],
        *,
        parent_run_id: str | None = None,
        filter_string: str = "",
    ) -> list[RunRecord]:
        """Every run of `experiment` (children of `parent_run_id` only, if given, and matching
        `filter_string`), with the history of each metric whose key satisfies `keys`."""
        clauses = [f"tags.`{PARENT_TAG}` = '{parent_run_id}'"] if parent_run_id else []
        clauses += [filter_string] if filter_string else []
        query, eid = " and ".join(clauses), self.experiment_id(experiment)
        found, token = [], None
        while True:
            page = self._call("search runs", lambda t=token: self.client.search_runs(
                [eid], filter_string=query, max_results=PAGE, page_token=t))  # fmt: skip
            found.extend(page)
            token = page.token
            if not token:
                break
        return [self._record(run, keys) for run in found]

    def run(self, run_id: str, keys: Callable[[str], bool]) -> RunRecord:
        """One run by id."""
        return self._record(self._call(f"read run {run_id}", lambda: self.client.get_run(run_id)),
                            keys)  # fmt: skip

    def _record(self, run: Any, keys: Callable[[str], bool]) -> RunRecord:
        metrics, rid = {}, run.info.run_id
        for key in sorted(k for k in run.data.metrics if keys(k)):
            history = self._call(
                f"read {key} of run {rid}", lambda k=key: self.client.get_metric_history(rid, k)
            )
            metrics[key] = sorted((int(m.step), float(m.value)) for m in history)
        return RunRecord(
            run.info.run_id,
            run.info.run_name or run.info.run_id,
            run.info.status,
            dict(run.data.params),
            dict(run.data.tags),
            metrics,
            run.info.start_time or 0,
        )

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        """Set `tags` on a run: one request per PARAMS_TAGS_PER_REQUEST of them (a tag a request
        made a kill check of a 40-run sweep some 600 requests)."""
        from mlflow.entities import RunTag

        batch = [RunTag(key, value) for key, value in tags.items()]
        for i in range(0, len(batch), PARAMS_TAGS_PER_REQUEST):
            part = batch[i : i + PARAMS_TAGS_PER_REQUEST]
            self._call(f"tag run {run_id}", lambda p=part: self.client.log_batch(run_id, tags=p))

    def log_artifacts(self, run_id: str, paths: Iterable[Path], artifact_path: str) -> None:
        """Upload local files to a run under `artifact_path`."""
        upload = self.client.log_artifact
        for path in paths:
            self._call(
                f"upload {path} to {run_id}", lambda p=path: upload(run_id, str(p), artifact_path)
            )
