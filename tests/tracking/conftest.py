"""Fixtures of the tracking tests: a config on a fresh SQLite store, a client, store outages, a
guard that nothing starts a process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from alpha_rl import paths
from alpha_rl.tracking import TrackingConfig
from tests import helpers

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import TEMPORARILY_UNAVAILABLE
from mlflow.tracking import MlflowClient


def make_cfg(uri: str, **overrides: Any) -> TrackingConfig:
    """conf/tracking/local.yaml with the store at `uri` and `overrides` applied."""
    node = OmegaConf.load(paths.conf_dir() / "tracking" / "local.yaml")
    node.uri = uri
    for key, value in overrides.items():
        node[key] = value
    return TrackingConfig.from_cfg(node)


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test should anything try to start a process."""

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", started)
    monkeypatch.setattr(os, "execve", started)


@pytest.fixture(scope="session")
def empty_store() -> Path:
    """A SQLite database with MLflow's schema and nothing else (tests/helpers.py: one a process)."""
    return helpers.empty_store()


@pytest.fixture
def uri(tmp_path: Path, empty_store: Path) -> str:
    """A fresh SQLite store in the test's directory."""
    shutil.copyfile(empty_store, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path}/mlflow.db"


@pytest.fixture
def cfg(uri: str) -> TrackingConfig:
    """The shipped config on the test's store, retrying at every flush and not waiting in finish."""
    return make_cfg(uri, retry_s=0.0, final_retry_s=0.0)


@pytest.fixture
def client(uri: str) -> MlflowClient:
    """A client of the test's store (for reading back what the tracker sent)."""
    return MlflowClient(tracking_uri=uri)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A job output directory."""
    path = tmp_path / "run"
    path.mkdir()
    return path


def store_error() -> Exception:
    """What a SQLite store raises when its database cannot be written."""
    return MlflowException("database is locked (test outage)", error_code=TEMPORARILY_UNAVAILABLE)


class Outage:
    """Makes MlflowClient methods raise: while `down`, or for their calls numbered in `window`."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        methods: list[str],
        error: Callable[[], Exception] = store_error,
    ) -> None:
        self.down = False
        self.window: dict[str, range] = {}
        self.calls: Counter[str] = Counter()
        self.failures = 0
        self.batches: list[tuple[int, int, int]] = []  # (metrics, params, tags) of each log_batch
        for name in methods:
            monkeypatch.setattr(MlflowClient, name, self._wrap(name, getattr(MlflowClient, name)))
        self._error = error

    def _wrap(self, name: str, original: Callable) -> Callable:
        def method(client: MlflowClient, *args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            if self.down or self.calls[name] in self.window.get(name, range(0)):
                self.failures += 1
                raise self._error()
            if name == "log_batch":
                sizes = (len(kwargs.get(k, ())) for k in ("metrics", "params", "tags"))
                self.batches.append(tuple(sizes))
            return original(client, *args, **kwargs)

        return method


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    """(step, value) of every stored point of key, by step."""
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def diag_lines(run_dir: Path) -> list[dict]:
    """diag.jsonl parsed strictly (a NaN literal would be an error)."""

    def refuse(name: str) -> None:
        raise ValueError(f"non-JSON constant {name} in diag.jsonl")

    text = (run_dir / "diag.jsonl").read_text()
    assert text.endswith("\n")
    return [json.loads(line, parse_constant=refuse) for line in text.splitlines()]


class BlockedStore:
    """A SQLite store that cannot be reached (a file where its directory should be) until
    `restore()` puts the directory back. `config(**kw)` is the TrackingConfig for it, made while
    the directory is there (the config refuses an SQLite URI whose directory is missing), as a
    job's is before its store goes down."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "store"
        self.uri = f"sqlite:///{self.path}/mlflow.db"
        self.path.mkdir()

    def config(self, **kwargs) -> TrackingConfig:
        """make_cfg(self.uri, **kwargs), checked with the store's directory present."""
        return make_cfg(self.uri, **kwargs)

    def block(self) -> None:
        self.path.rmdir()
        self.path.write_text("a file where the database directory should be")

    def restore(self) -> None:
        self.path.unlink()
        self.path.mkdir()
