"""Resume: the run is reopened and the steps it already holds are not sent again; a resume into
another store than the run's is refused unless that store is a relocated copy of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from mlflow.tracking._tracking_service import utils as mlflow_utils

from alpha_rl.commands import module_command
from alpha_rl.pipeline.life.run import Job, Outcome, run_job
from alpha_rl.tracking import TrackingConfig, open_tracker
from alpha_rl.tracking.stores import TrackingReadError
from tests.bad_stores import fingerprint
from tests.helpers import compose_train, paste, seeded_store
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


def train(uri: str, run_dir: Path, *overrides: str) -> Outcome:
    """A tiny numpy run of conf/train.yaml in `run_dir`, tracked into `uri`."""
    cfg, choices = compose_train(["backend=numpy", "debug=tiny", f"tracking.uri={uri}",
                                  *overrides])  # fmt: skip
    return run_job(cfg, Job(run_dir, choices))


@pytest.fixture
def stopped(tmp_path: Path) -> Outcome:
    """A run of 20 steps tracked into tmp_path/first/mlflow.db (with its mlartifacts/)."""
    (tmp_path / "first").mkdir()
    done = train(seeded_store(tmp_path / "first" / "mlflow.db"), tmp_path / "run", "steps=20")
    assert done.status == "FINISHED"
    return done


@pytest.mark.slow
def test_a_resume_into_another_store_is_refused(tmp_path: Path, stopped: Outcome) -> None:
    first, other = tmp_path / "first", tmp_path / "other"
    other.mkdir()
    before = fingerprint(tmp_path)
    with pytest.raises(TrackingReadError) as caught:
        train(f"sqlite:///{other}/mlflow.db", tmp_path / "ignored", f"resume={stopped.run_dir}",
              "steps=40")  # fmt: skip
    new = other / "mlflow.db"
    relocate = module_command("alpha_rl.tracking", ["relocate", str(new)])
    assert str(caught.value) == (
        f"resume={stopped.run_dir}: its MLflow run {stopped.run_id} is in tracking store "
        f"{first / 'mlflow.db'} (its tracking.json), but tracking.uri is {new}, which does not "
        f"hold it; resume with tracking.uri=sqlite:///{first / 'mlflow.db'}, or copy that store "
        f"(with its mlartifacts/) to {new} and run `{relocate}` first"
    )
    claim = ("run/owner.json", "run/.owner.lock")  # held by a run while it runs
    after = fingerprint(tmp_path)
    assert {k: v for k, v in after.items() if k not in claim} == {
        k: v for k, v in before.items() if k not in claim
    }  # no store made, nothing unsent, the run's files as they were


@pytest.mark.slow
def test_a_resume_into_a_copy_of_its_store_needs_it_relocated(
    tmp_path: Path, stopped: Outcome
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "first", copy)  # the store and its mlartifacts/, moved
    uri = f"sqlite:///{copy}/mlflow.db"
    resume = (f"resume={stopped.run_dir}", "steps=40")
    with pytest.raises(TrackingReadError) as caught:
        train(uri, tmp_path / "ignored", *resume)
    relocate = module_command("alpha_rl.tracking", ["relocate", str(copy / "mlflow.db")])
    assert str(caught.value).endswith(
        f"but tracking.uri is {copy / 'mlflow.db'}, a copy whose artifacts are still those of "
        f"{tmp_path / 'first' / 'mlartifacts'}; run `{relocate}` first, or resume with "
        f"tracking.uri=sqlite:///{tmp_path / 'first' / 'mlflow.db'}"
    )
    original = fingerprint(tmp_path / "first")
    moved = paste(relocate, tmp_path)  # as printed, into a fresh shell
    assert moved.returncode == 0 and "(1 runs)" in moved.stdout, moved.stdout
    mlflow_utils._artifact_repos_cache.clear()  # per run id: a resume is a process of its own
    resumed = train(uri, tmp_path / "ignored", *resume)
    assert (resumed.status, resumed.run_id, resumed.steps) == ("FINISHED", stopped.run_id, 40)
    assert json.loads((stopped.run_dir / "tracking.json").read_text())["uri"] == uri
    l_q = history(MlflowClient(tracking_uri=uri), stopped.run_id, "loss/l_q")
    assert [step for step, _ in l_q] == [15, 20, 25, 30, 35, 40]
    assert fingerprint(tmp_path / "first") == original  # the original store left alone
