"""A store copied to another place serves its artifacts again after `relocate`."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from alpha_rl.tracking.__main__ import main
from alpha_rl.tracking.store import artifact_location
from tests.bad_stores import FILE_KINDS, fingerprint, make


def test_a_copied_store_finds_its_artifacts_after_relocate(
    tmp_path: Path, empty_store: Path, capsys
) -> None:
    there = tmp_path / "gpu_host"
    there.mkdir()
    shutil.copy(empty_store, there / "mlflow.db")
    uri = f"sqlite:///{there / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("alpha_rl", artifact_location=artifact_location(uri))
    run = client.create_run(exp).info.run_id
    (tmp_path / "config.yaml").write_text("seed: 3\n")
    client.log_artifact(run, str(tmp_path / "config.yaml"))
    here = tmp_path / "results"
    shutil.copytree(there, here)
    shutil.rmtree(there)  # the GPU host is gone

    assert main(["relocate", str(here / "mlflow.db")]) == 0
    assert "(1 runs)" in capsys.readouterr().out
    moved = MlflowClient(tracking_uri=f"sqlite:///{here / 'mlflow.db'}")
    assert [f.path for f in moved.list_artifacts(run)] == ["config.yaml"]
    got = moved.download_artifacts(run, "config.yaml", str(tmp_path))
    assert Path(got).read_text() == "seed: 3\n"
    assert main(["relocate", str(here / "mlflow.db")]) == 0  # again: nothing left to move
    assert "no artifact root to move" in capsys.readouterr().out


def test_relocate_refuses_what_is_not_a_store(tmp_path: Path, capsys) -> None:
    assert main(["relocate", str(tmp_path / "missing.db")]) == 2
    assert "no such file" in capsys.readouterr().err
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    assert main(["relocate", str(other)]) == 2
    assert "is a database but not an MLflow store" in capsys.readouterr().err


@pytest.mark.parametrize("kind", FILE_KINDS)  # any MLflow schema will do for relocate
def test_relocate_refuses_a_file_it_cannot_use_in_one_line(
    kind: str, empty_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    uri, refusal = make(kind, empty_store, tmp_path)
    before = fingerprint(tmp_path)
    assert main(["relocate", uri.removeprefix("sqlite:///")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and refusal in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert fingerprint(tmp_path) == before
