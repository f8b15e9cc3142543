"""The store boundary: the one place that calls MLflow, and the outage bookkeeping around it.

`Store.call` runs one client request. Any exception is sorted into one of two kinds:
`Rejected` (the store answered and refused this request for good: a bad key, a changed param)
and `StoreDown` (everything else: no database, no server, a timeout, a full disk). A store that
is down is retried only after `retry_s`; the first failure of an outage logs one warning, the
first success after it one info line.

mlflow is imported on first use, never at import time of alpha_rl.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shlex
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from alpha_rl.commands import script_command
from alpha_rl.masking import hide_password
from alpha_rl.tracking.view import experiment_tags

log = logging.getLogger("alpha_rl.tracking")

T = TypeVar("T")
SQLITE_PREFIX = "sqlite:///"
ARTIFACT_DIR = "mlartifacts"  # created beside a SQLite database file
MIN_PAUSE_S = 1.0  # finish()'s shortest pause between two attempts, whatever retry_s says
# error codes of requests that no retry will ever get through (the store answered)
_REJECTIONS = frozenset({"INVALID_PARAMETER_VALUE", "BAD_REQUEST"})


class StoreDown(Exception):  # noqa: N818 (a state, not an error to report)
    """The store cannot be reached now; whatever was being sent stays buffered."""


class Rejected(Exception):  # noqa: N818
    """The store answered and refused the request; sending it again would not help."""


def mlflow_client_class() -> type:
    """mlflow.tracking.MlflowClient, imported here on first use (telemetry off by default)."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.tracking import MlflowClient

    # its SQL store logs each failed request with a full traceback before raising it; the
    # outage is reported here in one line (Store.call), the request kept for a retry
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    return MlflowClient


def entities() -> Any:
    """The mlflow.entities module (Metric, Param, RunTag)."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    import mlflow.entities

    return mlflow.entities


def resolve_uri(uri: str) -> str:
    """`uri` with a relative SQLite database path made absolute (any other URI unchanged)."""
    path = sqlite_path(uri)
    if path is None or path.is_absolute():
        return uri
    return SQLITE_PREFIX + str(path.resolve()) + _query(uri)


def artifact_location(uri: str) -> str | None:
    """Absolute artifact root for new experiments: `<db dir>/mlartifacts` for SQLite, else None."""
    path = sqlite_path(uri)
    if path is None:
        return None
    return (path.resolve().parent / ARTIFACT_DIR).as_uri()


def sqlite_path(uri: str) -> Path | None:
    if not uri.startswith(SQLITE_PREFIX):
        return None
    path = uri[len(SQLITE_PREFIX) :].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


def sqlite_file(uri: str) -> Path | None:
    """The database file of any SQLite URI, with or without a driver (`sqlite+pysqlite:///`),
    made absolute; None for another store or an in-memory database."""
    scheme, sep, rest = uri.strip().partition(":///")
    if not sep or scheme.split("+", 1)[0].lower() != "sqlite":
        return None
    path = sqlite_path(SQLITE_PREFIX + rest)  # the driver named or not, the file is the same
    return None if path is None else path.resolve()


def new_client(uri: str) -> Any:
    """An MlflowClient of `uri`. Opening a SQLite store creates or migrates its schema, which
    processes opening a new store at once would race through (a sweep's jobs side by side:
    "table ... already exists"); they open it one at a time, under a lock on its directory."""
    path = sqlite_file(uri)
    if path is None:
        return mlflow_client_class()(tracking_uri=uri)
    with store_lock(path):
        return mlflow_client_class()(tracking_uri=uri)


@contextlib.contextmanager
def store_lock(path: Path) -> Iterator[None]:
    """Hold the lock on the directory of the SQLite file `path` under which a store is created:
    a store looked at under it is never one half made (none is taken where the directory is
    missing or takes no flock)."""
    if not path.parent.is_dir():
        yield
        return
    where = os.open(path.parent, os.O_RDONLY)
    try:
        try:
            fcntl.flock(where, fcntl.LOCK_EX)
        except OSError as exc:  # a file system without flock on directories (NFS emulates it
            # with POSIX locks, which need a file open for writing): open unserialised
            log.debug("%s: no lock on its directory (%s); opening it unserialised", path, exc)
        yield
    finally:
        os.close(where)  # and the lock with it


def _query(uri: str) -> str:
    return "?" + uri.split("?", 1)[1] if "?" in uri else ""


def set_http_limits(timeout_s: int, retries: int) -> None:
    """Bound MLflow's HTTP requests (process-wide: every tracker of the process shares them)."""
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(timeout_s)
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = str(retries)


def is_rejection(exc: BaseException) -> bool:
    """True for an MLflow error the store raised on purpose about this request's content."""
    return getattr(exc, "error_code", None) in _REJECTIONS


class Store:
    """One MLflow client for one URI, with the outage state of that store."""

    def __init__(self, uri: str, retry_s: float) -> None:
        self.uri = uri
        self.retry_s = retry_s
        self._client: Any = None
        self._down_since: float | None = None
        self._next_try = 0.0
        self._experiments: dict[str, str] = {}

    @property
    def down(self) -> bool:
        """True from a failed request until the next successful one."""
        return self._down_since is not None

    def ready(self) -> bool:
        """False while a known outage is in its retry backoff (callers then skip the send)."""
        return self._down_since is None or time.monotonic() >= self._next_try

    def call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        """fn(client, *args); raises Rejected or StoreDown (never anything else from the store)."""
        try:
            if self._client is None:
                self._client = new_client(self.uri)
            result = fn(self._client, *args)
        except Exception as exc:  # the store boundary: whatever the client raises
            if is_rejection(exc):
                self._back()
                raise Rejected(f"{what}: {exc}") from exc
            self.mark_down(what, exc)
            raise StoreDown(f"{what}: {type(exc).__name__}: {exc}") from exc
        self._back()
        return result

    def retry_until(self, deadline: float, attempt: Callable[[], bool]) -> bool:
        """Call attempt() until it returns True or time.monotonic() passes deadline."""
        while True:
            if attempt():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(max(self.retry_s, MIN_PAUSE_S), left))

    def experiment_id(self, name: str) -> str:
        """The id of experiment `name`, created if absent (a creation race is tolerated)."""
        if name not in self._experiments:
            self._experiments[name] = self.call(
                f"get experiment {name!r}", _get_or_create, name, self.uri
            )
        return self._experiments[name]

    def mark_down(self, what: str, exc: BaseException) -> None:
        """Record a failed request: warn if it starts an outage, back off retry_s seconds."""
        now = time.monotonic()
        self._next_try = now + self.retry_s
        if self._down_since is None:
            self._down_since = now
            log.warning(
                "MLflow store %s unreachable (%s: %s: %s); buffering everything, retrying every "
                "%.0f s at the next flush",
                self.uri,
                what,
                type(exc).__name__,
                _first_line(exc),
                self.retry_s,
            )
        else:
            log.debug("MLflow store %s still unreachable (%s: %s)", self.uri, what, exc)

    def _back(self) -> None:
        if self._down_since is not None:
            log.info(
                "MLflow store %s is reachable again after %.0f s; sending what was buffered",
                self.uri,
                time.monotonic() - self._down_since,
            )
            self._down_since = None


def _get_or_create(client: Any, name: str, uri: str) -> str:
    """The id of experiment `name`, created with its kind and runs view (alpha_rl.tracking.view),
    or given those it lacks."""
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            location = artifact_location(uri)
            return client.create_experiment(name, artifact_location=location,
                                            tags=experiment_tags({}))  # fmt: skip
        except Exception as exc:
            if getattr(exc, "error_code", None) != "RESOURCE_ALREADY_EXISTS":
                raise
        experiment = client.get_experiment_by_name(name)  # another process created it meanwhile
        if experiment is None:
            raise RuntimeError(f"experiment {name!r} exists and does not: retry later")
    if experiment.lifecycle_stage != "active":
        restore = script_command("mlflow", ["experiments", "restore", "--experiment-id",
                                            str(experiment.experiment_id)])  # fmt: skip
        raise RuntimeError(
            f"experiment {name!r} is deleted; restore it (`MLFLOW_TRACKING_URI="
            f"{shlex.quote(hide_password(uri))} {restore}`) or choose another tracking.experiment"
        )
    label_experiment(client, experiment)
    return experiment.experiment_id


def label_experiment(client: Any, experiment: Any) -> None:
    """Set what `experiment` lacks of its kind and runs view (alpha_rl.tracking.view)."""
    for key, value in experiment_tags(dict(experiment.tags)).items():
        client.set_experiment_tag(experiment.experiment_id, key, value)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
