"""Point a SQLite tracking store copied from another machine at its artifacts here.

A store made by the tracker keeps its artifacts in `mlartifacts/` beside the database file and
records that folder as an absolute path of the machine it ran on. After copying the database and
its `mlartifacts/` folder (say, back from a GPU host), `relocate` rewrites those paths — every
experiment whose artifact root ends in `mlartifacts` and the artifact URI of each of its runs —
to the `mlartifacts/` beside the database's new place, so `make ui STORE=<file>` serves the
runs' artifacts (config, ISV table, diagnostics, kill-check report) again.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from alpha_rl.tracking.store import ARTIFACT_DIR


@dataclass(frozen=True)
class Relocation:
    """One experiment's artifact root moved, with the number of its runs rewritten."""

    experiment: str
    old: str
    new: str
    runs: int


def relocate_artifacts(db: Path, root: Path | None = None) -> list[Relocation]:
    """Rewrite artifact roots under `root` (default: `mlartifacts/` beside `db`)."""
    db = Path(db)
    if not db.is_file():
        raise ValueError(f"{db}: no such file (pass the SQLite tracking store, e.g. mlflow.db)")
    new_root = (Path(root) if root is not None else db.parent / ARTIFACT_DIR).resolve().as_uri()
    con = sqlite3.connect(db)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"experiments", "runs"} <= tables:
            raise ValueError(f"{db}: not an MLflow tracking store (no experiments/runs tables)")
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
