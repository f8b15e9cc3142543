"""Where a study lives (`hydra.sweeper.storage`):

- `journal` (the default): Optuna's JournalStorage on one file, appended to under its lock, so
  that searches in several processes, on several GPUs or as SLURM jobs on a shared file system
  write one study at once with no database server. The file is `storage_url`, or
  `optuna.journal` beside the MLflow store (beside the working directory with a tracking server).
- `rdb`: a database through SQLAlchemy: `storage_url` (the tracking server's PostgreSQL,
  `postgresql://...`), or SQLite `optuna.db` beside the MLflow store when it is null.

A study's storage is recorded as one string (the parent run's `search.storage` tag, which
`alpha-rl-confirm` and `make dashboard` read back): the RDB's URL, or `journal://<absolute path>`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alpha_rl.errors import AlphaRlError, ConfigError
from alpha_rl.tracking.store import sqlite_file, sqlite_path

KINDS = ("journal", "rdb")
JOURNAL = "journal://"  # the recorded form of a journal file: journal:///abs/path/optuna.journal
JOURNAL_FILE, SQLITE_FILE = "optuna.journal", "optuna.db"


def storage_url(kind: str, url: str | None, tracking_uri: str) -> str:
    """The recorded string of `kind`'s storage at `url` (null: beside the MLflow store)."""
    if kind not in KINDS:
        raise ConfigError(f"hydra.sweeper.storage={kind!r}: one of {', '.join(KINDS)} "
                          "(the place: hydra.sweeper.storage_url)")  # fmt: skip
    path = sqlite_path(tracking_uri)
    beside = path.resolve().parent if path is not None else Path.cwd()
    if kind == "journal":
        if url is not None and "://" in url:
            raise ConfigError(f"hydra.sweeper.storage_url={url!r}: a journal is a file path; "
                              "for a database give hydra.sweeper.storage=rdb")  # fmt: skip
        return JOURNAL + str(Path(url).resolve() if url else beside / JOURNAL_FILE)
    if url is None:
        return f"sqlite:///{beside / SQLITE_FILE}"
    if "://" not in url:
        raise ConfigError(f"hydra.sweeper.storage_url={url!r}: an RDB's URL (postgresql://..., "
                          "sqlite:///...); for a journal file give "
                          "hydra.sweeper.storage=journal")  # fmt: skip
    return url


def journal_file(recorded: str) -> Path | None:
    """The file of a recorded journal storage; None for an RDB."""
    return Path(recorded[len(JOURNAL) :]) if recorded.startswith(JOURNAL) else None


def stored_file(recorded: str) -> Path | None:
    """The file a recorded storage lives in (a journal or SQLite), None for a database server."""
    return journal_file(recorded) or sqlite_file(recorded)


def existing_storage(recorded: str, remedy: str) -> Any:
    """`open_storage` of a storage a search wrote; AlphaRlError "no study storage at <file>"
    followed by `remedy` when its file is absent (Optuna would create an empty one there)."""
    import optuna

    stored = stored_file(recorded)
    if stored is not None and not stored.is_file():
        raise AlphaRlError(f"no study storage at {stored}{remedy}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return open_storage(recorded)


def open_storage(recorded: str) -> Any:
    """What Optuna takes as `storage` for a recorded storage string (a journal's file made with
    its directory; an RDB's URL as it is)."""
    path = journal_file(recorded)
    if path is None:
        return recorded
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    except OSError as exc:
        raise AlphaRlError(f"study journal {path}: {exc.strerror or exc}: give a writable "
                           "place as hydra.sweeper.storage_url") from exc  # fmt: skip
