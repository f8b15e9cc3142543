"""Resume: the run is reopened and the steps it already holds are not sent again."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from alpha_rl.tracking import TrackingConfig, open_tracker
from tests.tracking.conftest import Outage, diag_lines, history


def _log(tracker, steps: range) -> None:
    for step in steps:
        tracker.log_point(step, {"loss/l_q": step * 0.5, "trade/pnl": -float(step)})


@pytest.mark.parametrize("down_at_reopen", [False, True])
def test_a_resumed_run_holds_each_step_once(
    cfg: TrackingConfig,
    client: MlflowClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    down_at_reopen: bool,
) -> None:
    first = open_tracker(cfg, tmp_path / "first", run_name="resumable")
    _log(first, range(0, 501, 5))
    first.finish("KILLED")
    assert client.get_run(first.run_id).info.status == "KILLED"

    outage = Outage(monkeypatch, ["get_run", "log_batch", "update_run"])
    outage.down = down_at_reopen
    second_dir = tmp_path / "second"
    second_dir.mkdir()
    second = open_tracker(cfg, second_dir, run_name="resumable", resume_run_id=first.run_id)
    _log(second, range(300, 801, 5))  # a deterministic re-run from the step-300 checkpoint
    outage.down = False
    assert second.flush()
    assert second.run_id == first.run_id
    assert second.last_step == 500
    assert client.get_run(first.run_id).info.status == "RUNNING"
    second.finish()

    assert history(client, first.run_id, "loss/l_q") == [(s, s * 0.5) for s in range(0, 801, 5)]
    assert history(client, first.run_id, "trade/pnl") == [(s, -s) for s in range(0, 801, 5)]
    assert client.get_run(first.run_id).info.status == "FINISHED"
    assert [line["step"] for line in diag_lines(second_dir)] == list(range(300, 801, 5))


def test_a_fresh_run_has_no_last_step(cfg: TrackingConfig, run_dir: Path) -> None:
    tracker = open_tracker(cfg, run_dir, run_name="fresh")
    assert tracker.last_step == -1
    tracker.finish()


def test_a_resume_in_the_same_directory_first_sends_what_was_left_unsent(
    cfg: TrackingConfig,
    client: MlflowClient,
    run_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outage = Outage(monkeypatch, ["log_batch", "log_artifact", "set_terminated"])
    first = open_tracker(cfg, run_dir, run_name="twice")
    _log(first, range(0, 201, 5))
    assert first.flush()
    outage.down = True
    _log(first, range(205, 501, 5))
    first.finish("FAILED", reason="killed by the scheduler")
    assert (run_dir / "unsent.jsonl").exists()

    outage.down = False  # the store is back; the job resumes from its step-300 checkpoint
    second = open_tracker(cfg, run_dir, run_name="twice", resume_run_id=first.run_id)
    assert second.last_step == 500
    _log(second, range(300, 801, 5))
    second.finish()
    assert history(client, first.run_id, "loss/l_q") == [(s, s * 0.5) for s in range(0, 801, 5)]
    assert client.get_run(first.run_id).info.status == "FINISHED"
    assert not (run_dir / "unsent.jsonl").exists()
