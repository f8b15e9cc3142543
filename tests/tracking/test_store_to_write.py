"""A training run (and a sweep's parent run) refuses an SQLite store that the kill check refuses,
before writing anything into it: damaged, not SQLite, another program's database, another MLflow
schema. A file not there yet, or empty, is a store the run makes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from alpha_rl import paths
from alpha_rl.pipeline.life.run import Job, run_job
from alpha_rl.tracking import ParentRunCallback
from alpha_rl.tracking.stores import WRITE_REMEDY, TrackingReadError, check_store_to_write
from tests import helpers
from tests.bad_stores import fingerprint, make

# the SQLite files of tests/bad_stores.py that no run may write into
REFUSED = ("random bytes", "truncated", "text file", "foreign database", "older schema",
           "newer schema", "directory")  # fmt: skip


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid MLflow store holding one run."""
    path = tmp_path_factory.mktemp("template") / "mlflow.db"
    shutil.copyfile(helpers.empty_store(), path)
    client = MlflowClient(tracking_uri=f"sqlite:///{path}")
    client.create_run(client.create_experiment("alpha_rl"))
    return path


@pytest.mark.parametrize("kind", REFUSED)
def test_a_run_refuses_a_store_the_kill_check_refuses(
    kind: str, template: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    uri, refusal = make(kind, template, store)
    before = fingerprint(store)
    cfg, choices = helpers.compose_train(["backend=numpy", "debug=tiny", f"tracking.uri={uri}"])
    with pytest.raises(TrackingReadError) as caught:
        run_job(cfg, Job(tmp_path / "run", choices))
    assert refusal in str(caught.value) and "\n" not in str(caught.value)
    assert fingerprint(store) == before  # no MLflow table written into it, nothing created
    assert not (tmp_path / "run").exists()  # refused before the run took its directory


@pytest.mark.parametrize("kind", ["foreign database", "truncated"])
def test_a_sweep_refuses_such_a_store_before_its_parent_run(
    kind: str, template: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    uri, refusal = make(kind, template, tmp_path)
    before = fingerprint(tmp_path)
    tracking = OmegaConf.load(paths.conf_dir() / "tracking" / "local.yaml")
    tracking.uri = uri
    sweep = tmp_path / "sweep"
    hydra = {"sweep": {"dir": str(sweep)}, "runtime": {"choices": {}}}
    with pytest.raises(SystemExit) as stop:
        ParentRunCallback().on_multirun_start(OmegaConf.create({"tracking": tracking,
                                                                "hydra": hydra}))  # fmt: skip
    assert stop.value.code == 2 and refusal in caplog.text
    assert fingerprint(tmp_path) == before and not sweep.exists()


def test_a_store_not_there_yet_or_empty_is_one_the_run_makes(tmp_path: Path) -> None:
    check_store_to_write(f"sqlite:///{tmp_path}/new.db")
    assert list(tmp_path.iterdir()) == []  # looked at, not made
    (tmp_path / "empty.db").touch()
    check_store_to_write(f"sqlite:///{tmp_path}/empty.db")
    assert (tmp_path / "empty.db").read_bytes() == b""


def test_the_command_exits_2_in_one_line_leaving_the_file_as_it_was(
    template: Path, tmp_path: Path
) -> None:
    uri, refusal = make("foreign database", template, tmp_path)
    data = (tmp_path / "mlflow.db").read_bytes()
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    cmd = [sys.executable, "-m", "alpha_rl.train", "backend=numpy", "debug=tiny",
           f"tracking.uri={uri}", "hydra.run.dir=run"]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out[-3000:]
    (line,) = [x for x in out.splitlines() if refusal in x]
    assert line.endswith(f"; {WRITE_REMEDY}") and "Traceback" not in out
    assert (tmp_path / "mlflow.db").read_bytes() == data
