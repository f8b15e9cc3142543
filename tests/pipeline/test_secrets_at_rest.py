"""Secrets of the environment never rest on disk in a run directory: the config written into
checkpoints (and logged as config.yaml) has them masked in keys and values, as the params do, and
a resume still checks the config against the checkpoint's."""

from __future__ import annotations

from pathlib import Path

import yaml

from alpha_rl.pipeline import checkpoint
from tests.pipeline.test_run import client, job

SECRET = "s3cret-Pa55word-0123"


def test_no_file_of_a_run_directory_holds_a_secret_of_the_environment(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", SECRET)
    study = "search.study=${oc.env:MLFLOW_TRACKING_PASSWORD}"
    first = job(tmp_path, ["steps=20", study], "run")
    assert first.status == "FINISHED"
    files = [p for p in first.run_dir.rglob("*") if p.is_file()]
    assert any(p.name == "meta.json" for p in files) and len(files) > 5
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), path
    meta = checkpoint._meta(checkpoint.latest(first.run_dir))
    assert yaml.safe_load(meta["config"])["search"]["study"] == "***"
    run = client(tmp_path).get_run(first.run_id)
    assert run.data.params["search.study"] == "***"
    # the checkpoint's masked config still matches the run's own config on resume, whatever the
    # secret is by then
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", SECRET + "-rotated")
    resumed = job(tmp_path, ["steps=40", study, f"resume={first.run_dir}"], "ignored")
    assert resumed.status == "FINISHED" and resumed.steps == 40


def test_a_secret_in_a_param_key_or_a_tag_key_is_masked(tmp_path: Path, monkeypatch) -> None:
    from alpha_rl.tracking import TrackingConfig, open_tracker
    from tests.test_bad_overrides import _tracking

    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", SECRET)
    cfg: TrackingConfig = _tracking(f"sqlite:///{tmp_path}/mlflow.db")
    tracker = open_tracker(cfg, tmp_path / "run", run_name="keys")
    tracker.log_params({f"columns.{SECRET}": "timestamp", "plain": SECRET})
    tracker.set_tags({f"note.{SECRET}": "x"})
    tracker.finish()
    run = client(tmp_path).get_run(tracker.run_id)
    assert run.data.params == {"columns._masked_": "timestamp", "plain": "***"}
    assert "note._masked_" in run.data.tags
    assert not any(SECRET in k or SECRET in v for k, v in run.data.tags.items())
