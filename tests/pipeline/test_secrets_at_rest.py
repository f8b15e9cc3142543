"""Secrets of the environment are never written in clear: the config written into checkpoints
(and logged as config.yaml) has them masked in keys and values, numbers included, as the params
do, and a resume still checks the config against the checkpoint's; an error or a log line that
echoes one shows it masked; one that would name an experiment or a store is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from alpha_rl.errors import CheckpointError
from alpha_rl.masking import mask, secret_in, secrets
from alpha_rl.pipeline.life import checkpoint
from tests.helpers import start_train, train_in_process
from tests.pipeline.test_run import client, job

SECRET = "s3cret-Pa55word-0123"
# a command line refused at start: the run directory and the store in the test's directory
CLI = ("backend=numpy", "debug=tiny", "tracking.uri=sqlite:///mlflow.db")


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


# --- every line the platform writes: errors, logs, names, records, the store ---

NUMERIC = "1_234_567"  # a numeric secret: ${oc.decode:...} makes it the int 1234567
DECODED = "1234567"


def _written(where: Path) -> list[Path]:
    """Every file under `where`: run and sweep directories, the SQLite store, its artifacts."""
    return [p for p in where.rglob("*") if p.is_file()]


def _holding(where: Path, printed: str, *secrets: str) -> list[str]:
    """The files under `where` (and `printed`) whose bytes hold one of `secrets`."""
    found = [str(p) for p in _written(where) for s in secrets if s.encode() in p.read_bytes()]
    return found + [f"printed: {s}" for s in secrets if s in printed]


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("agent.lr=${oc.env:MLFLOW_TRACKING_PASSWORD}", "agent.lr"),
        ("market.path=data/${oc.env:MLFLOW_TRACKING_PASSWORD}.csv", "market.path"),
        ("market.path=${oc.env:MLFLOW_TRACKING_PASSWORD}", "market.path"),
    ],
)
def test_an_error_that_echoes_a_secret_shows_it_masked(
    tmp_path: Path, monkeypatch, override: str, key: str
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", SECRET)
    code, printed = train_in_process(tmp_path, *CLI, "market=file", override)
    errors = [line for line in printed.splitlines() if "[ERROR]" in line]
    assert code == 2 and len(errors) == 1 and "***" in errors[0], printed
    assert (tmp_path / "outputs").is_dir()  # the run directory and its train.log were written
    assert not _holding(tmp_path, printed, SECRET)


def test_a_secret_as_the_experiment_name_is_refused_by_its_key(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", SECRET)
    override = "tracking.experiment=${oc.env:MLFLOW_TRACKING_PASSWORD}"
    code, printed = train_in_process(tmp_path, *CLI, override)
    errors = [line for line in printed.splitlines() if "[ERROR]" in line]
    assert code == 2 and len(errors) == 1, printed
    assert "tracking.experiment holds the value of MLFLOW_TRACKING_PASSWORD" in errors[0]
    assert not (tmp_path / "mlflow.db").exists()  # refused before the store is opened
    assert not _holding(tmp_path, printed, SECRET)
    # so is one that holds the decoded value of a numeric secret, and a store's URI with one
    monkeypatch.setenv("PGPASSWORD", NUMERIC)
    decoded = "${oc.decode:${oc.env:PGPASSWORD}}"
    for override in (f"tracking.experiment='run{decoded}'", f"tracking.uri='sqlite:///{decoded}'"):
        code, printed = train_in_process(tmp_path, *CLI, override)
        assert code == 2 and "holds the value of PGPASSWORD" in printed, printed
        assert not _holding(tmp_path, printed, NUMERIC, DECODED)


def test_a_number_from_a_secret_is_masked_as_its_text_is() -> None:
    env = {"PGPASSWORD": NUMERIC, "DATABRICKS_TOKEN": "12e3", "AWS_SECRET_ACCESS_KEY": "100.0"}
    assert set(secrets(env)) == {NUMERIC, DECODED, "12e3", "12000.0", "12000", "100.0"}
    config = {"seed": 1234567, "lr": 12000.0, "log_every": 100, "on": True, "name": "s1234567"}
    assert mask(config, env) == {"seed": "***", "lr": "***", "log_every": 100, "on": True,
                                 "name": "s***"}  # fmt: skip
    assert secret_in("run 12000", env) == "DATABRICKS_TOKEN" and secret_in("run 100", env) is None


@pytest.mark.slow
def test_no_line_of_a_run_holds_a_numeric_secret(tmp_path: Path, monkeypatch) -> None:
    """`seed=${oc.decode:${oc.env:PGPASSWORD}}`: the config of meta.json and config.yaml, the
    identity, the run's name, tags, params, its log and the store hold it masked; a resume
    still checks the seed against the identity."""
    monkeypatch.setenv("PGPASSWORD", NUMERIC)
    seed = "seed='${oc.decode:${oc.env:PGPASSWORD}}'"
    run_dir = tmp_path / "run"
    proc = start_train(tmp_path, seed, f"hydra.run.dir={run_dir}")
    printed = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, printed
    assert not _holding(tmp_path, printed, NUMERIC, DECODED)
    meta = checkpoint._meta(checkpoint.latest(run_dir))
    assert yaml.safe_load(meta["config"])["seed"] == "***"
    assert json.loads((run_dir / "identity.json").read_text())["seed"] == "***"
    run_id = json.loads((run_dir / "tracking.json").read_text())["run_id"]
    run = client(tmp_path).get_run(run_id)
    assert run.info.run_name == "her-on s***" and run.data.tags["seed"] == "***"
    resumed = job(tmp_path, ["steps=60", seed, f"resume={run_dir}"], "ignored")
    assert resumed.status == "FINISHED" and resumed.steps == 60
    other = ["steps=60", "seed=1", f"resume={run_dir}"]
    with pytest.raises(CheckpointError, match=r"seed: '\*\*\*' -> 1"):
        job(tmp_path, other, "ignored")


def test_a_failed_trial_of_a_study_named_with_a_secret_is_recorded_masked(
    tmp_path: Path, monkeypatch
) -> None:
    from alpha_rl.errors import ConfigError
    from alpha_rl.tracking.parent import record_failed_run
    from tests.test_bad_overrides import _tracking

    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", SECRET)
    cfg = _tracking(f"sqlite:///{tmp_path}/mlflow.db")
    refused = ConfigError(f"agent.lr={SECRET!r} must be a number > 0")
    study = {"search.study": SECRET, "search.trial": "3"}
    run_id = record_failed_run(tmp_path / "sweep", cfg, f"{SECRET}_trial3", ["agent.lr=0.1"],
                               study, refused)  # fmt: skip
    run = client(tmp_path).get_run(run_id)
    assert run.info.run_name == "***_trial3" and run.data.tags["search.study"] == "***"
    assert "agent.lr='***'" in run.data.tags["alpha_rl.failure_reason"]
    assert not _holding(tmp_path, "", SECRET)
