"""Tracking stores that cannot be read, made from a valid MLflow store, each with a piece of the
one line that refuses it. Every command that reads a store is run on them: exit 2, that line, no
traceback, and nothing created or changed (`fingerprint` before and after)."""

from __future__ import annotations

import hashlib
import random
import shutil
import socket
import sqlite3
from pathlib import Path

from alpha_rl.tracking.stores import schema_revisions

PASSWORD = "pw-not-to-be-shown"
# a store of every kind a reader must refuse: corrupted, not a database, not MLflow's, a schema
# it cannot use, not there, a server that does not answer
KINDS = ("random bytes", "truncated", "text file", "empty file", "foreign database",
         "older schema", "newer schema", "directory", "missing", "server down",
         "database down")  # fmt: skip
# the kinds that are SQLite files but not usable MLflow stores, whatever MLflow reads them
FILE_KINDS = ("random bytes", "truncated", "text file", "empty file", "foreign database",
              "directory", "missing")  # fmt: skip


def free_port() -> int:
    """A loopback TCP port nothing listens on (just now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make(kind: str, template: Path, where: Path) -> tuple[str, str]:
    """(URI, a piece of its refusal) of a store of `kind` made in the folder `where` from the
    valid MLflow SQLite store `template` (read by the truncated and schema kinds only)."""
    path = where / "mlflow.db"
    if kind == "server down":
        return f"http://127.0.0.1:{free_port()}", "does not answer (Connection refused)"
    if kind == "database down":
        uri = f"postgresql+psycopg://lab:{PASSWORD}@127.0.0.1:{free_port()}/mlflow"
        return uri, "database server postgresql+psycopg://lab:***@127.0.0.1:"
    if kind == "missing":
        return f"sqlite:///{where}/typo/mlflow.db", f"no tracking store at {where}/typo/mlflow.db"
    if kind == "directory":
        path.mkdir()
        return f"sqlite:///{path}", f"no tracking store at {path}: it is not a file"
    if kind == "random bytes":
        path.write_bytes(random.Random(0).randbytes(64 * 1024))
    elif kind == "truncated":  # a copy that stopped half-way
        data = template.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "text file":
        path.write_text("experiment,run\nalpha_rl,1\n")
    elif kind == "empty file":
        path.touch()
    elif kind == "foreign database":
        with sqlite3.connect(path) as con:
            con.execute("CREATE TABLE prices (t INTEGER, p REAL)")
        con.close()
    else:
        shutil.copyfile(template, path)
        head, known = schema_revisions()
        version = sorted(known - {head})[0] if kind == "older schema" else "ffffffffffff"
        with sqlite3.connect(path) as con:
            con.execute("UPDATE alembic_version SET version_num = ?", (version,))
        con.close()
    return f"sqlite:///{path}", REFUSALS[kind].format(path=path)


REFUSALS = {
    "random bytes": "tracking store {path} is not an SQLite database",
    "truncated": "tracking store {path} is damaged (SQLite: database disk image is malformed)",
    "text file": "tracking store {path} is not an SQLite database",
    "empty file": "tracking store {path} is an empty database, not an MLflow store",
    "foreign database": "tracking store {path} is a database but not an MLflow store",
    "older schema": "has the older MLflow schema",
    "newer schema": "unknown to MLflow",
}


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file and folder under `folder`: a file by the hash of its bytes."""
    return {
        str(p.relative_to(folder)): "dir"
        if p.is_dir()
        else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
    }
