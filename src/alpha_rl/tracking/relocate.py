"""Point a SQLite tracking store copied from another machine at its artifacts here.

A store made by the tracker keeps its artifacts in `mlartifacts/` beside the database file and
records that folder as an absolute path of the machine it ran on. After copying the database and
its `mlartifacts/` folder (say, back from a GPU host), `relocate` rewrites those paths — every
experiment whose artifact root ends in `mlartifacts` and the artifact URI of each of its runs —
to the `mlartifacts/` beside the database's new place, so `make ui STORE=<file>` serves the
runs' artifacts (config, ISV table, diagnostics, kill-check report) again. A file that is not
an MLflow store, or that cannot be read or written, is refused in one line (TrackingReadError).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from alpha_rl.tracking.store import ARTIFACT_DIR
from alpha_rl.tracking.stores import check_sqlite, sqlite_failure

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
