"""The runs view an experiment is given and the links that open it: the deciding metrics as
columns, the runs flat, the model-training pages; written once, kept up to date, never twice."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from alpha_rl import paths
from alpha_rl.commands import script_command
from alpha_rl.tracking import TrackingConfig, open_tracker
from alpha_rl.tracking.links import open_line, runs_link, ui_of
from alpha_rl.tracking.view import KIND, KIND_TAG, VIEW_NAME, VIEW_TAG, view_tag
from tests.helpers import as_project_venv
from tests.tracking.conftest import Outage

LINK = ("http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning"
        "&compareRunsMode=TABLE&viewStateShareKey=alpha_rl_runs")  # fmt: skip


def state_of(value: str) -> dict:
    """The view's state, as MLflow's UI reads it from the tag: a JSON envelope around JSON."""
    envelope = json.loads(value)
    assert envelope["name"] == VIEW_NAME and isinstance(envelope["createdAt"], int)
    return json.loads(envelope["state"])


def test_the_view_shows_the_deciding_metrics_newest_run_first_and_runs_flat() -> None:
    state = state_of(view_tag(None, now_ms=1))
    for key in ("loss/l_q", "eval/pnl", "eval/sharpe", "eval/capture_ratio"):
        assert f"metrics.`{key}`" in state["selectedColumns"], key
    assert state["columnOrder"][3:] == state["selectedColumns"]
    # a start-time sort the UI does not take for its own "Created": it would fold child runs
    assert state["orderByKey"] == "attributes.`start_time`" and state["orderByAsc"] is False


def test_a_view_is_written_again_only_when_it_changed() -> None:
    first = view_tag(None, now_ms=1000)
    assert view_tag(first, now_ms=2000) is None
    stale = json.loads(first) | {"state": json.dumps({"selectedColumns": []})}
    again = json.loads(view_tag(json.dumps(stale), now_ms=3000))
    assert (again["createdAt"], again["updatedAt"]) == (1000, 3000)
    assert state_of(json.dumps(again)) == state_of(first)
    assert json.loads(view_tag("not json", now_ms=4000))["createdAt"] == 4000


def test_links_open_the_runs_table_of_the_model_training_pages() -> None:
    assert runs_link("http://127.0.0.1:5000/", "7") == LINK
    assert "viewStateShareKey" not in runs_link("http://h:1", "7", view=False)
    assert ui_of("sqlite:////data/mlflow.db") == "http://127.0.0.1:5000"
    assert ui_of("https://lab:secret@mlflow.lab.org/mlflow/") == "https://mlflow.lab.org/mlflow"
    assert ui_of("http://[::1]:5001") == "http://[::1]:5001"
    assert ui_of("postgresql://lab@db/mlflow") is None and ui_of("databricks") is None
    assert open_line("http://u:p@srv:5000", "7") == LINK.replace("127.0.0.1", "srv")


def test_an_sqlite_stores_line_says_how_to_serve_it(monkeypatch, tmp_path: Path) -> None:
    as_project_venv(monkeypatch)
    mlflow = script_command("mlflow", ["ui", "--backend-store-uri"])  # the script beside python
    assert open_line("sqlite:///mlflow.db", "7") == (
        f"make ui (or {mlflow} sqlite:///mlflow.db), then {LINK}"
    )
    assert open_line("sqlite:////d/a.db", "7") == (
        f"make ui STORE=/d/a.db (or {mlflow} sqlite:////d/a.db), then {LINK}"
    )
    monkeypatch.chdir(tmp_path)  # elsewhere make runs in the project, the store named whole
    assert open_line("sqlite:///a.db", "7") == (
        f"make -C {paths.project_root()} ui STORE={tmp_path}/a.db (or {mlflow} sqlite:///a.db), "
        f"then {LINK}"
    )
    monkeypatch.setattr(sys, "prefix", str(tmp_path))  # not the project's .venv: no make
    assert open_line("sqlite:///a.db", "7") == f"{mlflow} sqlite:///a.db, then {LINK}"


def test_a_tracker_gives_its_experiment_the_view_once(
    cfg: TrackingConfig, client: MlflowClient, tmp_path: Path, monkeypatch
) -> None:
    spy = Outage(monkeypatch, ["set_experiment_tag"])
    first = open_tracker(cfg, tmp_path / "a", run_name="a")
    first.finish()
    experiment = client.get_experiment(first.experiment_id)
    assert experiment.tags[KIND_TAG] == KIND and state_of(experiment.tags[VIEW_TAG])
    second = open_tracker(cfg, tmp_path / "b", run_name="b")
    second.finish()
    assert second.experiment_id == first.experiment_id and spy.calls["set_experiment_tag"] == 0


def test_an_experiment_made_elsewhere_is_given_the_view_and_a_resumed_run_says_where_it_is(
    cfg: TrackingConfig, client: MlflowClient, tmp_path: Path
) -> None:
    eid = client.create_experiment("alpha_rl")
    old = client.create_run(eid, run_name="old").info.run_id
    client.set_terminated(old, "KILLED")
    resumed = open_tracker(cfg, tmp_path / "old", run_name="old", resume_run_id=old)
    assert resumed.experiment_id == eid
    resumed.finish()
    tags = client.get_experiment(eid).tags
    assert tags[KIND_TAG] == KIND and state_of(tags[VIEW_TAG])
