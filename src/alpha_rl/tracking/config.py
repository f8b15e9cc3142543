"""The typed `tracking` config: conf/tracking/*.yaml checked and turned into a frozen dataclass.

Every error names the key (`tracking.batch_size`), the value found and what would be accepted.
Defaults live in conf/tracking/local.yaml, never here.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from alpha_rl.convert import to_float, to_int, to_str
from alpha_rl.errors import ConfigError, require
from alpha_rl.masking import hide_password, secret_in, uri_has_password
from alpha_rl.tracking.mounts import MOUNTINFO, network_filesystem
from alpha_rl.tracking.store import sqlite_file

WHERE = "conf/tracking/"
MAX_METRICS_PER_REQUEST = 1000  # MLflow's limit on metrics in one log_batch request
MAX_HTTP_RETRIES = 10  # MLflow refuses MLFLOW_HTTP_REQUEST_MAX_RETRIES above this
# the URI schemes of MLflow's tracking stores (its database engines take a +driver suffix);
# its file store ("file:", a plain path) is deliberately not among them
DATABASES = ("sqlite", "postgresql", "mysql", "mssql")
SERVERS = ("http", "https")
# Hydra launchers whose jobs run on other machines than the sweep (hydra/launcher=slurm)
MULTI_NODE_LAUNCHERS = frozenset({
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
    "hydra_plugins.alpha_rl_launcher.slurm.SlurmLauncher",
})  # fmt: skip
ACCEPTED_URIS = (
    "a database (sqlite:///mlflow.db, postgresql://, mysql:// or mssql://, each also as "
    "<database>+<driver>://), a server (http://127.0.0.1:5000, https://...) or databricks "
    "(databricks://<profile>)"
)


@dataclass(frozen=True)
class TrackingConfig:
    """Where runs go and how the tracker batches and retries (units in conf/tracking/local.yaml)."""

    uri: str
    experiment: str
    batch_size: int
    flush_every_s: float
    retry_s: float
    final_retry_s: float
    http_timeout_s: int
    http_retries: int
    system_metrics: bool | None  # None: on for cuda runs, off for numpy ones
    system_metrics_interval_s: float

    def system_metrics_for(self, backend: str) -> bool:
        """Whether a run on `backend` logs MLflow's system metrics."""
        return backend == "cuda" if self.system_metrics is None else self.system_metrics

    def __post_init__(self) -> None:
        uri = self.uri.strip()
        store, shown = store_of(uri), hide_password(self.uri)
        require(
            [
                (bool(uri), "tracking.uri is empty: give an MLflow tracking URI"),
                (
                    not uri_has_password(uri),
                    f"tracking.uri={shown!r} holds a password, which would be logged with the "
                    "run's config: give a server's account in MLFLOW_TRACKING_USERNAME / "
                    "MLFLOW_TRACKING_PASSWORD, a database's password in PGPASSWORD or ~/.pgpass",
                ),
                _no_secret("tracking.uri", uri, "the store's address without it"),
                (
                    store != "file",
                    f"tracking.uri={shown!r}: MLflow file stores are not supported; use "
                    f"{ACCEPTED_URIS}",
                ),
                (
                    store is not None,
                    f"tracking.uri={shown!r} is not a tracking URI MLflow can store runs "
                    f"in; use {ACCEPTED_URIS}",
                ),
                sqlite_directory_exists(uri, shown),
                _no_secret("tracking.experiment", self.experiment, "a name of its own"),
                (
                    bool(self.experiment.strip()) and len(self.experiment) <= 500,
                    f"tracking.experiment={self.experiment!r}: needs 1..500 characters",
                ),
                (
                    1 <= self.batch_size <= MAX_METRICS_PER_REQUEST,
                    f"tracking.batch_size={self.batch_size}: must be in "
                    f"1..{MAX_METRICS_PER_REQUEST} (metric values per request)",
                ),
                (
                    self.flush_every_s > 0,
                    f"tracking.flush_every_s={self.flush_every_s}: must be > 0 (seconds)",
                ),
                (self.retry_s >= 0, f"tracking.retry_s={self.retry_s}: must be >= 0 (seconds)"),
                (
                    self.final_retry_s >= 0,
                    f"tracking.final_retry_s={self.final_retry_s}: must be >= 0 (seconds)",
                ),
                (
                    self.http_timeout_s >= 1,
                    f"tracking.http_timeout_s={self.http_timeout_s}: must be >= 1 (seconds)",
                ),
                (
                    0 <= self.http_retries <= MAX_HTTP_RETRIES,
                    f"tracking.http_retries={self.http_retries}: must be in 0..{MAX_HTTP_RETRIES}",
                ),
                (
                    self.system_metrics_interval_s >= 0.1,
                    f"tracking.system_metrics_interval_s={self.system_metrics_interval_s}: must "
                    "be >= 0.1 (seconds between samples)",
                ),
            ],
            WHERE,
        )

    @classmethod
    def from_cfg(cls, node: DictConfig | Mapping[str, Any]) -> TrackingConfig:
        """The typed config of a composed `tracking` node; ConfigError names any bad key."""
        try:
            data = (
                OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
                if isinstance(node, DictConfig)
                else dict(node)
            )
        except OmegaConfBaseException as exc:
            raise ConfigError(
                f"the tracking config cannot be resolved: {exc} (see {WHERE})"
            ) from exc
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(names))
        missing = [name for name in names if name not in data]
        require(
            [
                (not unknown, f"unknown key(s) tracking.{', tracking.'.join(unknown)}"),
                (not missing, f"missing key(s) tracking.{', tracking.'.join(missing)}"),
            ],
            WHERE,
        )
        return cls(**{name: _CONVERT[name](name, data[name]) for name in names})


def _no_secret(key: str, value: str, instead: str) -> tuple[bool, str]:
    """(ok, message): `value` holds no secret of the environment. A name that runs are filed and
    shown under (the store, tracking.json, the log, the UI) is refused rather than masked: a
    masked one would file them under `***`."""
    name = secret_in(value)
    return name is None, (
        f"{key} holds the value of {name}, a secret of the environment: it would be shown in "
        f"the store, the run directory and its log; give {instead}"
    )


def sqlite_directory_exists(uri: str, shown: str) -> tuple[bool, str]:
    """(ok, message): an SQLite store's directory must exist (a relative path is taken from the
    working directory), so that a mistyped path is refused instead of made."""
    path = sqlite_file(uri)
    if path is None or path.parent.is_dir():
        return True, ""
    return False, (
        f"tracking.uri={shown!r}: the SQLite store's directory {path.parent} does not exist "
        "(a relative path is taken from the working directory); create it or fix the path"
    )


def check_launcher(cfg: TrackingConfig, launcher: str, mountinfo: Path = MOUNTINFO) -> str | None:
    """Refuse (ConfigError) a store a sweep under `launcher` (its _target_) would lose runs in:
    under a multi-node launcher an SQLite file or a server on this machine's loopback. Returns a
    warning for an SQLite file on a network file system under a single-machine launcher."""
    name = launcher.rsplit(".", 1)[-1] or "the launcher"
    multi_node = launcher in MULTI_NODE_LAUNCHERS
    fix = ("Use tracking=server with an MLflow server on PostgreSQL (`make tracking-server "
           "DB=postgresql://...`, MLFLOW_TRACKING_URI=http://<host>:<port>; docs/cluster.md, "
           f"\"A tracking server for a cluster\") (see {WHERE})")  # fmt: skip
    host = urlparse(cfg.uri).hostname or ""
    if multi_node and store_of(cfg.uri) == "server" and is_loopback(host):
        raise ConfigError(
            f"tracking.uri={hide_password(cfg.uri)!r} is this machine's loopback and {name} runs "
            "jobs on other nodes: each would send to itself and keep its runs in unsent.jsonl. "
            "Export MLFLOW_TRACKING_URI=http://<the server's host>:<port> before the sweep. " + fix
        )
    path = sqlite_file(cfg.uri)
    if path is None:
        return None
    fs = network_filesystem(path.parent, mountinfo)
    if multi_node:
        why = (f"it is on {fs}, a network file system whose file locks do not hold across "
               "machines: nodes writing at once corrupt it or lose writes" if fs else
               "it is on a local disk: each node would write its own copy, and the runs would "
               "not reach the one you read")  # fmt: skip
        raise ConfigError(f"tracking.uri={cfg.uri!r} is an SQLite file and {name} runs jobs on "
                          f"many nodes: {why}. " + fix)  # fmt: skip
    if fs:
        return (f"tracking.uri={cfg.uri!r} is an SQLite file on {fs}, a network file system: "
                "parallel jobs of one machine may still wait on its locks; a tracking server "
                "(tracking=server) is the safer store")  # fmt: skip
    return None


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any interface


def store_of(uri: str) -> str | None:
    """The kind of store MLflow would track into at `uri` ("database", "server", "databricks",
    or "file": a file: URI or a plain path), None for a scheme it has no tracking store for."""
    if uri == "databricks":
        return "databricks"
    scheme = urlparse(uri).scheme.lower()
    if len(scheme) <= 1 or scheme == "file":  # as MLflow reads it: a Windows drive is a path
        return "file"
    if not uri[len(scheme) :].startswith("://"):
        return None
    if scheme.split("+", 1)[0] in DATABASES and scheme.count("+") <= 1:
        return "database"
    if scheme in SERVERS:
        return "server"
    return "databricks" if scheme == "databricks" else None


def _fail(key: str, value: object, what: str) -> ConfigError:
    return ConfigError(f"tracking.{key}={value!r}: expected {what} (see {WHERE})")


def _str(key: str, value: object) -> str:
    return to_str(key, value, _fail)


def _int(key: str, value: object) -> int:
    return to_int(key, value, _fail)


def _float(key: str, value: object) -> float:
    return to_float(key, value, _fail)


def _auto_bool(key: str, value: object) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise _fail(key, value, "true, false or null (null: on for cuda runs, off for numpy ones)")


_CONVERT = {
    "uri": _str,
    "experiment": _str,
    "batch_size": _int,
    "flush_every_s": _float,
    "retry_s": _float,
    "final_retry_s": _float,
    "http_timeout_s": _int,
    "http_retries": _int,
    "system_metrics": _auto_bool,
    "system_metrics_interval_s": _float,
}
