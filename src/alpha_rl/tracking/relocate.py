"""Point a SQLite tracking store copied from another machine at its artifacts here.

A store made by the tracker keeps its artifacts in `mlartifacts/` beside the database file and
records that folder as an absolute path of the machine it ran on. After copying the database and
its `mlartifacts/` folder (say, back from a GPU host), `relocate` rewrites those paths — every
experiment whose artifact root ends in `mlartifacts` and the artifact URI of each of its runs —
to the `mlartifacts/` beside the database's new place, so `make ui STORE=<file>` serves the
runs' artifacts (config, ISV table, diagnostics, kill-check report) again. A file that is not
an MLflow store, or that cannot be read or written, is refused in one line (TrackingReadError).

A resumed run continues its MLflow run in the store that holds it: `check_continued_store`
refuses a resume whose `tracking.uri` is another store, unless that store is an SQLite copy of
it that holds the run and that `relocate` has pointed at artifacts of its own.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from alpha_rl.commands import module_command
from alpha_rl.masking import hide_password
from alpha_rl.tracking.store import ARTIFACT_DIR, artifact_location, resolve_uri, sqlite_file
from alpha_rl.tracking.stores import TrackingReadError, check_sqlite, sqlite_failure, store_name

log = logging.getLogger("alpha_rl.tracking")

REMEDY = "give the SQLite tracking store (e.g. mlflow.db)"


@dataclass(frozen=True)
class Relocation:
    """One experiment's artifact root moved, with the number of its runs rewritten."""

    experiment: str
    old: str
    new: str
    runs: int


def relocate_artifacts(db: Path, root: Path | None = None) -> list[Relocation]:
    """Rewrite artifact roots under `root` (default: `mlartifacts/` beside `db`); any MLflow
    schema revision will do (only the artifact columns change)."""
    db = Path(db).resolve()
    check_sqlite(db, REMEDY, schema=False)
    new_root = (Path(root) if root is not None else db.parent / ARTIFACT_DIR).resolve().as_uri()
    try:
        return _rewrite(db, new_root)
    except sqlite3.Error as exc:  # damaged further in, read-only, locked
        raise sqlite_failure(db, exc, REMEDY) from None


def _rewrite(db: Path, new_root: str) -> list[Relocation]:
    con = sqlite3.connect(db)
    try:
        moved = []
        rows = con.execute("SELECT experiment_id, name, artifact_location FROM experiments")
        for exp_id, name, old in rows.fetchall():
            old_root = (old or "").rstrip("/")
            if not old_root.endswith("/" + ARTIFACT_DIR) or old_root == new_root:
                continue
            runs = con.execute(
                "UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) "
                "WHERE experiment_id = ? AND substr(artifact_uri, 1, ?) = ?",
                (new_root, len(old_root) + 1, exp_id, len(old_root), old_root),
            ).rowcount
            con.execute(
                "UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?",
                (new_root, exp_id),
            )
            moved.append(Relocation(name, old_root, new_root, runs))
        con.commit()
        return moved
    finally:
        con.close()


def check_continued_store(run_dir: Path, run_id: str, recorded: str, uri: str) -> None:
    """Refuse (TrackingReadError, one line naming both stores) a resume of `run_dir` whose
    MLflow run `run_id` is in store `recorded` (its tracking.json) in another store `uri`,
    unless `uri` is an SQLite copy of `recorded` that holds the run, its artifacts moved off the
    original's folder by `relocate`."""
    recorded, uri = resolve_uri(recorded), resolve_uri(uri)
    old, new = sqlite_file(recorded), sqlite_file(uri)
    same = old == new if (old, new) != (None, None) else recorded.rstrip("/") == uri.rstrip("/")
    if same:
        return
    head = (f"resume={run_dir}: its MLflow run {run_id} is in tracking store "
            f"{store_name(recorded)} (its tracking.json), but tracking.uri is "
            f"{store_name(uri)}")  # fmt: skip
    back = f"resume with tracking.uri={hide_password(recorded)}"
    if old is None or new is None:  # a server or database: it continues where it is
        raise TrackingReadError(f"{head}; a run continues in the store that holds it: {back}")
    relocate = f"`{module_command('alpha_rl.tracking', ['relocate', str(new)])}`"
    artifacts = _artifact_uri(new, run_id) if new.is_file() else None
    if artifacts is None:
        raise TrackingReadError(
            f"{head}, which does not hold it; {back}, or copy that store (with its "
            f"{ARTIFACT_DIR}/) to {new} and run {relocate} first"
        )
    old_root = str(artifact_location(recorded))
    if artifacts == old_root or artifacts.startswith(old_root + "/"):
        raise TrackingReadError(
            f"{head}, a copy whose artifacts are still those of {old.parent / ARTIFACT_DIR}; "
            f"run {relocate} first, or {back}"
        )
    log.info("MLflow run %s continues in %s, a relocated copy of %s", run_id, new, old)


def _artifact_uri(db: Path, run_id: str) -> str | None:
    """The artifact URI of run `run_id` in the SQLite store `db` (read only); None when it holds
    no such run, or no runs table."""
    try:
        con = sqlite3.connect(db.as_uri() + "?mode=ro", uri=True)
        try:
            named = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'"
            if con.execute(named).fetchone() is None:
                return None
            row = con.execute("SELECT artifact_uri FROM runs WHERE run_uuid = ?", (run_id,))
            found = row.fetchone()
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise sqlite_failure(db, exc, REMEDY) from None
    return None if found is None else str(found[0] or "")
