"""Load: many writer processes at once into one store, the kill check's read going on beside them,
every value checked afterwards (alpha_rl.tracking.load) — into one SQLite file, and through a
tracking server on PostgreSQL that is killed and restarted in the middle.

`benchmarks/tracking_load.py` runs the same at 64 writers x 5,000 steps x 4 metrics for the figures
in docs/results.md; the tests use fewer values to stay within CI's time."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from alpha_rl.tracking.load import LoadSpec, run_load
from tests.mlflow_server import started_server

pytestmark = pytest.mark.slow


def test_eight_writers_and_a_reader_into_one_sqlite_file(tmp_path: Path, empty_store: Path) -> None:
    shutil.copyfile(empty_store, tmp_path / "mlflow.db")
    report = run_load(LoadSpec(uri=f"sqlite:///{tmp_path}/mlflow.db", root=tmp_path / "runs",
                               writers=8, steps=2000, keys=4))  # fmt: skip
    assert report.problems == [], report.lines()  # every value once, FINISHED, nothing unsent
    assert len(report.run_ids) == 8 and report.batches >= 1
    assert report.reads >= 1  # read while they wrote; a count that dropped would be a problem


def test_writers_through_a_server_on_postgresql_survive_its_restart_in_the_middle(
    tmp_path: Path, postgres
) -> None:
    """The server is SIGKILLed (every process of it, requests in flight unanswered) once a third
    of the values arrived, and started again 3 s later: the writers buffer, resend and finish;
    every value is there once, every run FINISHED, no unsent.jsonl."""
    db = postgres.new_database("load_restart")
    with started_server(db, tmp_path, workers=2) as server:
        restart, events = server.restart_at(1 / 3, 3.0, grace_s=0.5, timeout_s=600)
        report = run_load(LoadSpec(uri=server.url, root=tmp_path / "runs", writers=16,
                                   steps=1000, keys=4), during=restart)  # fmt: skip
    assert report.problems == [], report.lines()
    assert 1 / 3 <= events["killed_at"] < 0.6  # the restart happened in the middle ...
    # ... nothing arrived while it was down (a writer may count an answer it had just before)
    assert events["restarting_at"] - events["killed_at"] <= 2 * 1000 / (16 * 1000 * 4)
    assert events["back_at"] < 1.0
    assert report.resend_calls > 0  # ... and the writers sent their backlog afterwards
    assert report.reads >= 1  # read while they wrote; a count that dropped would be a problem
    assert len(report.run_ids) == 16
