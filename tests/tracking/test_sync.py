"""An outage that outlasts finish(): unsent.jsonl, then `sync` (in-process and as a command)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from alpha_rl.commands import module_command
from alpha_rl.tracking import TrackingConfig, open_tracker, sync_run
from alpha_rl.tracking.__main__ import main
from alpha_rl.tracking.records import Outbox, RunSpec, write_unsent
from tests.bad_stores import KINDS, PASSWORD, fingerprint, free_port, make
from tests.helpers import paste
from tests.tracking.conftest import BlockedStore, Outage, diag_lines, history


def _log(tracker, steps: range) -> None:
    for step in steps:
        tracker.log_point(step, {"loss/l_q": step / 8, "her/inject_total": float(step)})


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
    command = module_command("alpha_rl.tracking", ["sync", str(run_dir)])
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


@pytest.mark.slow
def test_the_sync_command_creates_a_run_that_never_reached_the_store(
    tmp_path: Path,
    run_dir: Path,
    capsys: pytest.CaptureFixture,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = BlockedStore(tmp_path)
    cfg = store.config(retry_s=0.0, final_retry_s=0.0)
    store.block()
    uri = store.uri
    tracker = open_tracker(cfg, run_dir, run_name="cmd")
    tracker.log_params({"seed": 2})
    _log(tracker, range(250))
    with caplog.at_level(logging.WARNING, logger="alpha_rl.tracking"):
        tracker.finish()
    assert tracker.run_id is None and (run_dir / "unsent.jsonl").exists()
    (said,) = [r.getMessage() for r in caplog.records if "Send them later with: " in r.getMessage()]
    command = said.split("Send them later with: ", 1)[1]

    assert main(["sync", str(run_dir)]) == 2  # in-process: the store is still down
    assert "does not answer; " in capsys.readouterr().err
    assert (run_dir / "unsent.jsonl").exists()

    store.restore()
    done = paste(command, tmp_path)  # as printed, into a fresh shell
    assert done.returncode == 0, done.stdout
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


def _unsent(run_dir: Path, uri: str, run_id: str | None) -> Path:
    """run_dir/unsent.jsonl of a job that logged to run_id of the store at uri (None: the job
    never reached it), holding one metric value."""
    box = Outbox()
    box.metrics.append(("loss/l_q", 0.5, 0, 1))
    spec = RunSpec(uri=uri, experiment="alpha_rl", run_name="r", run_dir=str(run_dir),
                   run_id=run_id)  # fmt: skip
    write_unsent(run_dir / "unsent.jsonl", spec, box)
    return run_dir / "unsent.jsonl"


def _sync(capsys: pytest.CaptureFixture, run_dir: Path) -> tuple[int, str]:
    code = main(["sync", str(run_dir)])
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, out + err
    assert "Traceback" not in err and PASSWORD not in err
    return code, err


@pytest.mark.parametrize("kind", KINDS)
def test_sync_refuses_a_store_it_cannot_read_in_one_line(
    kind: str, empty_store: Path, tmp_path: Path, run_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    uri, refusal = make(kind, empty_store, store)
    unsent = _unsent(run_dir, uri, "0123456789abcdef0123456789abcdef")
    before, kept = fingerprint(store), unsent.read_bytes()
    code, err = _sync(capsys, run_dir)
    assert code == 2 and err.startswith("error: ") and refusal in err
    assert f"{unsent} keeps what is unsent" in err
    assert fingerprint(store) == before and unsent.read_bytes() == kept


def test_sync_tells_a_store_gone_a_run_not_in_it_and_a_server_down_apart(
    uri: str,
    client: MlflowClient,
    empty_store: Path,
    tmp_path: Path,
    run_dir: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    run_id = client.create_run(client.create_experiment("alpha_rl")).info.run_id
    db = tmp_path / "mlflow.db"
    unsent = _unsent(run_dir, uri, run_id)

    moved = db.rename(tmp_path / "moved.db")  # the store was deleted (or moved away)
    assert _sync(capsys, run_dir) == (
        2,
        f"error: no tracking store at {db}: no such file; run {run_id} was logged there: put "
        f"that store back ({unsent} keeps what is unsent)\n",
    )
    assert not db.exists()  # not created again, empty

    other = tmp_path / "other" / "mlflow.db"  # another store where the job's was
    other.parent.mkdir()
    shutil.copyfile(empty_store, other)
    _unsent(run_dir, f"sqlite:///{other}", run_id)
    assert _sync(capsys, run_dir) == (
        2,
        f"error: run {run_id} is not in tracking store {other}: the store was replaced, or is "
        f"another one than the job logged to; put back the one that holds the run ({unsent} "
        "keeps what is unsent)\n",
    )

    port = free_port()
    _unsent(run_dir, f"http://127.0.0.1:{port}", run_id)  # a server that does not answer
    assert _sync(capsys, run_dir) == (
        2,
        f"error: tracking server http://127.0.0.1:{port} does not answer (Connection refused): "
        "start it (make tracking-server) or check the address; trying again later may help "
        f"({unsent} keeps what is unsent)\n",
    )

    moved.rename(db)  # the store is back: the same command sends it
    _unsent(run_dir, uri, run_id)
    assert main(["sync", str(run_dir)]) == 0
    assert history(client, run_id, "loss/l_q") == [(1, 0.5)]


# the load command takes seconds to give up on a server that does not answer
@pytest.mark.parametrize(
    "kind", ["random bytes", "truncated", pytest.param("server down", marks=pytest.mark.slow)]
)
def test_the_load_command_refuses_a_store_it_cannot_use_in_one_line(
    kind: str, empty_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    uri, refusal = make(kind, empty_store, tmp_path)
    argv = ["load", "--uri", uri, "--writers", "1", "--steps", "1", "--dir", str(tmp_path / "l")]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out.startswith("error: ") and refusal in out and len(out.splitlines()) == 1
    assert "Traceback" not in out + err
