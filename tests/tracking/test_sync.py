"""An outage that outlasts finish(): unsent.jsonl, then `sync` (in-process and as a command)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from alpha_rl import paths
from alpha_rl.tracking import TrackingConfig, open_tracker, sync_run
from alpha_rl.tracking.sync import main
from tests.tracking.conftest import BlockedStore, Outage, diag_lines, history, make_cfg


def _log(tracker, steps: range) -> None:
    for step in steps:
        tracker.log_point(step, {"loss/l_q": step / 8, "her/inject_total": float(step)})


def _sync_command(run_dir: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "PYTHONPATH": str(paths.project_root() / "src"),
    }
    return subprocess.run(
        [sys.executable, "-m", "alpha_rl.tracking", "sync", str(run_dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_unsent_data_is_kept_and_sync_sends_it(
    cfg: TrackingConfig,
    client: MlflowClient,
    run_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(monkeypatch, ["log_batch", "log_artifact", "log_text", "set_terminated"])
    tracker = open_tracker(cfg, run_dir, run_name="unsent")
    tracker.log_params({"seed": 1})
    _log(tracker, range(100))
    assert tracker.flush()
    outage.down = True
    tracker.set_tags({"her": "forward"})
    _log(tracker, range(100, 400))
    tracker.log_text("isv table", "isv_table.txt")
    with caplog.at_level(logging.WARNING, logger="alpha_rl.tracking"):
        tracker.finish("FAILED", reason="loss is NaN at step 399")

    unsent = run_dir / "unsent.jsonl"
    lines = [json.loads(line) for line in unsent.read_text().splitlines()]
    assert lines[0]["kind"] == "run" and lines[0]["run_id"] == tracker.run_id
    assert lines[0]["status"] == "FAILED"
    assert sum(line["kind"] == "metric" for line in lines) == 600
    assert {line.get("name") or Path(line.get("path", "")).name for line in lines[1:]} >= {
        "isv_table.txt",
        "diag.jsonl",
    }
    command = f"python -m alpha_rl.tracking sync {run_dir}"
    assert any(command in r.getMessage() for r in caplog.records)
    assert client.get_run(tracker.run_id).info.status == "RUNNING"

    outage.down = False
    assert sync_run(run_dir) == 600
    assert not unsent.exists() and (run_dir / "unsent.jsonl.sent").exists()
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["alpha_rl.failure_reason"] == "loss is NaN at step 399"
    assert run.data.tags["her"] == "forward"
    assert history(client, tracker.run_id, "loss/l_q") == [(s, s / 8) for s in range(400)]
    assert history(client, tracker.run_id, "her/inject_total") == [(s, s) for s in range(400)]
    assert {a.path for a in client.list_artifacts(tracker.run_id)} == {
        "isv_table.txt",
        "diag.jsonl",
    }
    assert len(diag_lines(run_dir)) == 400
    assert sync_run(run_dir) == 0  # nothing left: a second sync sends nothing


def test_the_sync_command_creates_a_run_that_never_reached_the_store(
    tmp_path: Path, run_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    store = BlockedStore(tmp_path)
    uri = store.uri
    tracker = open_tracker(make_cfg(uri, retry_s=0.0, final_retry_s=0.0), run_dir, run_name="cmd")
    tracker.log_params({"seed": 2})
    _log(tracker, range(250))
    tracker.finish()
    assert tracker.run_id is None and (run_dir / "unsent.jsonl").exists()

    assert main(["sync", str(run_dir)]) == 1  # in-process: the store is still down
    assert "unreachable" in capsys.readouterr().err
    assert (run_dir / "unsent.jsonl").exists()

    store.restore()
    done = _sync_command(run_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sent 500 metric values" in done.stdout
    run_id = json.loads((run_dir / "tracking.json").read_text())["run_id"]
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    assert (run.info.status, run.info.run_name, run.data.params) == (
        "FINISHED",
        "cmd",
        {"seed": "2"},
    )
    assert history(client, run_id, "loss/l_q") == [(s, s / 8) for s in range(250)]
    assert [a.path for a in client.list_artifacts(run_id)] == ["diag.jsonl"]
