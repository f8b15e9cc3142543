"""A run whose disk fails (full, read-only) keeps everything it wrote valid, sends its metrics,
ends FAILED with the reason and exits in one line; damaged side files of a run directory are
named, never a traceback; Ctrl-C during start-up is one line too."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alpha_rl.commands import module_command
from alpha_rl.errors import CheckpointError, WriteError
from alpha_rl.pipeline.life import checkpoint
from alpha_rl.tracking import records
from alpha_rl.tracking.records import DiagWriter, read_diag
from alpha_rl.tracking.sync import sync_run
from tests.helpers import start_train, train_in_process
from tests.pipeline.test_run import client, history, job

ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}


# --- diag.jsonl ---


def test_a_failed_append_is_undone_and_raised(tmp_path: Path, monkeypatch) -> None:
    writer = DiagWriter(tmp_path / "diag.jsonl")
    writer.write({"step": 1, "metrics": {"a": 1.0}})
    real = os.write

    def half_then_full(fd: int, data: bytes) -> int:  # the disk fills half-way through a line
        real(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(records.os, "write", half_then_full)
    with pytest.raises(
        WriteError,
        match=r"cannot write .*diag.jsonl \(No space left on device "
        r"\[errno 28\]\)",
    ):
        writer.write({"step": 2, "metrics": {"a": 2.0}})
    monkeypatch.undo()
    writer.close()
    assert (tmp_path / "diag.jsonl").read_text() == '{"step":1,"metrics":{"a":1.0}}\n'


def test_readers_drop_a_torn_last_line_with_a_warning(tmp_path: Path, caplog) -> None:
    path = tmp_path / "diag.jsonl"
    path.write_text('{"step":5,"metrics":{"a":1}}\n{"step":10,"metrics":{"a":2}}\n{"step":15,"me')
    caplog.set_level(logging.WARNING)
    assert [r["step"] for r in read_diag(path)] == [5, 10]
    assert f"{path}: dropped its torn last line (line 3): not a whole record" in caplog.text
    path.write_text('{"step":5}\n[1, 2]\nnot json\n{"step":10}\n')
    assert [r["step"] for r in read_diag(path)] == [5, 10]
    assert "dropped 2 damaged line(s) (line 2, 3)" in caplog.text


def test_a_resume_drops_a_torn_last_line_of_diag_and_goes_on(tmp_path: Path, caplog) -> None:
    first = job(tmp_path, ["steps=20"], "run")
    diag = first.run_dir / "diag.jsonl"
    with diag.open("a") as f:
        f.write('{"step":25,"time":1,"metr')  # what a full disk or a crash leaves
    caplog.set_level(logging.WARNING)
    resumed = job(tmp_path, ["steps=40", f"resume={first.run_dir}"], "ignored")
    assert resumed.status == "FINISHED" and resumed.steps == 40
    assert f"{diag}: dropped its torn last line" in caplog.text
    assert [r["step"] for r in read_diag(diag)] == [5, 10, 15, 20, 25, 30, 35, 40]


def test_a_diag_that_cannot_be_written_stops_the_run_failed_and_sends_its_metrics(
    tmp_path: Path, monkeypatch
) -> None:
    real = DiagWriter.write

    def full_from_step_25(self: DiagWriter, record: dict) -> None:
        if record["step"] >= 25:
            raise WriteError(f"cannot write {self.path} (No space left on device [errno 28])")
        real(self, record)

    monkeypatch.setattr(DiagWriter, "write", full_from_step_25)
    out = job(tmp_path, [], "run")
    assert out.status == "FAILED" and out.steps == 25
    assert (
        out.reason
        == f"cannot write {out.run_dir / 'diag.jsonl'} (No space left on device [errno 28])"
    )
    run = client(tmp_path).get_run(out.run_id)
    assert run.info.status == "FAILED" and run.data.tags["alpha_rl.failure_reason"] == out.reason
    assert history(tmp_path, out.run_id, "loss/l_q")[-1][0] == 25  # the failing point too
    assert [r["step"] for r in read_diag(out.run_dir / "diag.jsonl")] == [5, 10, 15, 20]


# --- unsent data when the run directory cannot take it ---


def test_unsent_data_falls_back_beside_the_run_and_syncs_from_there(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    from alpha_rl.tracking import tracker as tracker_module

    real = tracker_module.write_unsent
    run_dir = tmp_path / "run"

    def no_room_in_the_run_dir(path: Path, spec, box) -> None:
        if path.parent == run_dir:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, spec, box)

    fallback = tmp_path / "fallback"
    monkeypatch.setenv("ALPHA_RL_UNSENT_DIR", str(fallback))
    monkeypatch.setattr(tracker_module, "write_unsent", no_room_in_the_run_dir)
    caplog.set_level(logging.WARNING)
    out = job(
        tmp_path,
        [
            "tracking.uri=http://127.0.0.1:9",
            "tracking.final_retry_s=0",
            "tracking.http_retries=0",
            "tracking.http_timeout_s=1",
        ],
        "run",
    )
    assert out.status == "FINISHED" and out.run_id is None
    (kept,) = fallback.glob("run-no-run-id/unsent.jsonl")
    assert f"cannot write unsent.jsonl into {run_dir}" in caplog.text
    assert module_command("alpha_rl.tracking", ["sync", str(kept.parent)]) in caplog.text
    spec = json.loads(kept.read_text().splitlines()[0])
    spec["uri"] = f"sqlite:///{tmp_path}/mlflow.db"  # the store the data goes to after all
    lines = kept.read_text().splitlines()
    kept.write_text("\n".join([json.dumps(spec), *lines[1:]]) + "\n")
    assert sync_run(kept.parent) > 0
    (run,) = client(tmp_path).search_runs(["1"])
    assert run.info.status == "FINISHED"
    # the run's own directory names the MLflow run now, so a resume continues it
    assert json.loads((run_dir / "tracking.json").read_text())["run_id"] == run.info.run_id
    assert history(tmp_path, run.info.run_id, "loss/l_q")[-1][0] == 40


def test_the_fallback_directories_are_this_users_alone(tmp_path: Path, monkeypatch) -> None:
    import tempfile

    from alpha_rl.tracking.tracker import fallback_dirs, private_dir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("ALPHA_RL_UNSENT_DIR", raising=False)
    *_, shared = fallback_dirs(Path("/x/runs/12-00-00"), None)
    assert shared == tmp_path / f"alpha_rl_unsent-{os.geteuid()}" / "12-00-00-no-run-id"
    private_dir(shared)
    assert {oct(p.stat().st_mode & 0o777) for p in (shared, shared.parent)} == {"0o700"}
    # one that another user made first, or left open, is not used
    shared.parent.chmod(0o777)
    with pytest.raises(OSError, match="is not a directory of this user's alone"):
        private_dir(shared)
    shared.parent.chmod(0o700)
    shared.rmdir()
    shared.symlink_to(tmp_path)  # a link planted in its place
    with pytest.raises(OSError, match="is not a directory of this user's alone"):
        private_dir(shared)


# --- a full disk, for real: the run directory on a small tmpfs of its own ---


def small_disk(tmp_path: Path, size_kb: int, *overrides: str, store_on_it: bool = False):
    """alpha-rl-train with its run directory (and with store_on_it, the SQLite store) on a
    tmpfs of size_kb in a mount namespace of its own; the tmpfs is copied to tmp_path/out
    after the run: (completed process, the run directory's copy, the store)."""
    unshare = shutil.which("unshare")
    if (
        unshare is None
        or subprocess.run(
            [unshare, "-m", "true"] if os.geteuid() == 0 else [unshare, "-rm", "true"]
        ).returncode
    ):
        if os.environ.get("CI"):
            pytest.fail(
                "unshare -m (util-linux, a mount namespace) is needed for the full-disk test"
            )
        pytest.skip("no mount namespace here (unshare -m)")
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir()
    store = disk / "m.db" if store_on_it else tmp_path / "m.db"
    train = [
        sys.executable,
        "-m",
        "alpha_rl.train",
        "backend=numpy",
        "debug=tiny",
        f"tracking.uri=sqlite:///{store}",
        f"hydra.run.dir={disk}/run",
        *overrides,
    ]
    script = (
        'mount -t tmpfs -o size="$1"k tmpfs "$2" || exit 97; shift 3; "$@"; rc=$?; '
        'cp -a "$0/." "$OUT"; exit $rc'
    )
    flag = ["-m"] if os.geteuid() == 0 else ["-rm"]
    proc = subprocess.run(
        [unshare, *flag, "sh", "-c", script, str(disk), str(size_kb), str(disk), "--", *train],
        cwd=tmp_path,
        env={**ENV, "OUT": str(out), "ALPHA_RL_UNSENT_DIR": str(tmp_path / "fallback")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    out.mkdir(exist_ok=True)
    assert proc.returncode != 97, proc.stderr
    return proc, out / "run", (out / "m.db" if store_on_it else store)


@pytest.mark.slow
def test_a_full_disk_stops_the_run_failed_in_one_line_with_every_metric_sent(
    tmp_path: Path,
) -> None:
    proc, run_dir, store = small_disk(tmp_path, 48, "steps=400", "checkpoint.every=0")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-3000:]
    assert "Traceback" not in output and "Logging error" not in output
    (stop,) = [x for x in output.splitlines() if "[ERROR]" in x]
    assert (
        f"run stopped: cannot write {tmp_path}/disk/run/diag.jsonl (No space left on device" in stop
    )
    steps = [r["step"] for r in read_diag(run_dir / "diag.jsonl")]  # whole lines only
    assert steps == list(range(5, steps[-1] + 1, 5)) and steps[-1] < 400
    from mlflow.tracking import MlflowClient

    mlflow = MlflowClient(tracking_uri=f"sqlite:///{store}")
    (run,) = mlflow.search_runs(["1"])
    assert run.info.status == "FAILED"
    assert "No space left on device" in run.data.tags["alpha_rl.failure_reason"]
    sent = [m.step for m in mlflow.get_metric_history(run.info.run_id, "perf/sps")]
    assert sent == [*steps, steps[-1] + 5]  # the point it could not write went to the store


@pytest.mark.slow
def test_a_full_disk_under_the_store_too_keeps_the_unsent_data_for_sync(tmp_path: Path) -> None:
    proc, run_dir, store = small_disk(
        tmp_path,
        1040,  # the store fills it at the checkpoint of step 20, and the run directory with it
        "steps=60",
        "tracking.final_retry_s=2",
        "tracking.retry_s=1",
        store_on_it=True,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-3000:]
    assert "Traceback" not in output and "Logging error" not in output
    assert "run stopped: checkpoint at step " in output and "(checkpoint.on_error=stop)" in output
    # the full run directory could not take it: it went to the fallback directory
    assert f"cannot write unsent.jsonl into {tmp_path}/disk/run (No space left on device" in output
    found = list((tmp_path / "fallback").glob("run-*/unsent.jsonl"))
    assert len(found) == 1, output[-6000:]
    (unsent,) = found
    assert module_command("alpha_rl.tracking", ["sync", str(unsent.parent)]) in output
    spec = json.loads(unsent.read_text().splitlines()[0])
    assert spec["status"] == "FAILED"
    for saved in checkpoint.saved(run_dir):  # what was written stays whole
        assert checkpoint._meta(saved)["step"] > 0
    # the store comes back (here: the copy of it, on a disk with room): sync ends the run FAILED
    spec["uri"] = f"sqlite:///{store}"
    lines = unsent.read_text().splitlines()
    unsent.write_text("\n".join([json.dumps(spec), *lines[1:]]) + "\n")
    sync_run(unsent.parent)
    from mlflow.tracking import MlflowClient

    run = MlflowClient(tracking_uri=f"sqlite:///{store}").get_run(spec["run_id"])
    assert run.info.status == "FAILED"
    assert "No space left on device" in run.data.tags["alpha_rl.failure_reason"]


# --- damaged side files: named in one line ---


def test_a_damaged_tracking_json_is_named(tmp_path: Path) -> None:
    first = job(tmp_path, ["steps=20"], "run")
    (first.run_dir / "tracking.json").write_text('{"run_id": ')
    with pytest.raises(
        CheckpointError,
        match=rf"{first.run_dir / 'tracking.json'}: unreadable "
        r"\(.*\); it names the MLflow run this directory reports to",
    ):
        job(tmp_path, ["steps=40", f"resume={first.run_dir}"], "ignored")
    (first.run_dir / "tracking.json").write_text('{"run_id": 7}')
    with pytest.raises(CheckpointError, match=r"tracking.json: not a JSON object with a run_id"):
        job(tmp_path, ["steps=40", f"resume={first.run_dir}"], "ignored")


def test_a_meta_json_of_the_wrong_type_is_named_and_an_older_checkpoint_used(
    tmp_path: Path, caplog
) -> None:
    first = job(tmp_path, ["steps=30", "checkpoint.every=10"], "run")
    newest = checkpoint.latest(first.run_dir)
    meta = json.loads((newest / "meta.json").read_text())
    (newest / "meta.json").write_text(json.dumps({**meta, "step": "30"}))
    caplog.set_level(logging.WARNING)
    resumed = job(tmp_path, ["steps=40", "checkpoint.every=10", f"resume={first.run_dir}"], "x")
    assert resumed.status == "FINISHED"
    assert (
        f'{newest / "meta.json"}: checkpoint metadata step="30", expected a whole number'
        in caplog.text
    )
    for saved in checkpoint.saved(first.run_dir):
        path = saved / "meta.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "config": ["a"]}))
    with pytest.raises(CheckpointError, match=r"config=\[\"a\"\], expected a string"):
        job(tmp_path, ["steps=50", f"resume={first.run_dir}"], "y")


def test_a_damaged_identity_json_is_named(tmp_path: Path) -> None:
    first = job(tmp_path, ["steps=20"], "run")
    (first.run_dir / "identity.json").write_text('{"id": "x", "seed": "0", "market": "y"}')
    with pytest.raises(CheckpointError, match=r"identity.json: seed missing or of the wrong type"):
        job(tmp_path, ["steps=40", f"resume={first.run_dir}"], "ignored")


# --- one line on the command line ---

CASES = {
    "tracking_json_damaged": ("tracking.json: unreadable", ["resume={run}"]),
    "meta_json_wrong_type": (
        "checkpoint metadata with_replay=1, expected true or false",
        ["resume={run}"],
    ),
    "tracking_json_of_another_run": ("its tracking.json names 00000000", ["resume={run}"]),
    "run_dir_under_a_file": (
        "cannot be created (Not a directory [errno 20])",
        ["hydra.run.dir={tmp}/afile/run"],
    ),
}


REAL_PROCESS = "tracking_json_damaged"  # the case run as a process of its own


def damage(case: str, tmp: Path, run: Path) -> None:
    if case == "tracking_json_damaged":
        (run / "tracking.json").write_text("{")
    elif case == "tracking_json_of_another_run":
        record = json.loads((run / "tracking.json").read_text())
        (run / "tracking.json").write_text(json.dumps({**record, "run_id": "0" * 32}))
    elif case == "meta_json_wrong_type":
        for saved in checkpoint.saved(run):
            path = saved / "meta.json"
            path.write_text(json.dumps({**json.loads(path.read_text()), "with_replay": 1}))
    (tmp / "afile").write_text("")


@pytest.mark.slow
def test_damaged_run_directories_are_refused_in_one_line_without_a_traceback(
    tmp_path: Path,
) -> None:
    done = {}
    for case, (_, overrides) in CASES.items():
        tmp = tmp_path / case
        tmp.mkdir()
        run = job(tmp, ["steps=20"], "run").run_dir
        damage(case, tmp, run)
        args = [
            "steps=30",
            f"hydra.run.dir={tmp}/new",
            *(o.format(run=run, tmp=tmp) for o in overrides),
        ]
        if case == REAL_PROCESS:  # its exit releases the claim it took (atexit)
            proc = start_train(tmp, *args)
            done[case] = (proc.communicate(timeout=300)[0], proc.returncode)
        else:  # refused at start: run in this process, sparing seconds of imports
            store = f"tracking.uri=sqlite:///{tmp}/mlflow.db"
            code, out = train_in_process(tmp, "backend=numpy", "debug=tiny", store, *args)
            done[case] = (out, code)
    for case, (out, returncode) in done.items():
        assert returncode == 2, out[-3000:]
        assert "Traceback" not in out
        (line,) = [x for x in out.splitlines() if "ERROR" in x or x.startswith("error:")]
        assert CASES[case][0] in line, out[-3000:]
    # a refused run leaves no claim behind that the next run would take for a crashed one
    assert (tmp_path / REAL_PROCESS / "new").is_dir()
    assert not list(tmp_path.glob("*/*/owner.json"))


@pytest.mark.slow
def test_ctrl_c_during_start_up_is_one_line(tmp_path: Path) -> None:
    # Imports, Hydra composing the config (where OmegaConf, interrupted, raised another error
    # that Hydra reported or swallowed), the run's own start; every other one started as a
    # background job is (SIGINT ignored, which the run once kept until its loop began).
    # the runs are long enough (debug=tiny steps 40 once ended within 5 s) that none can finish
    for i, delay in enumerate((0.3, 0.6, 1.0, 1.4, 1.8, 2.3, 5.0)):
        sigint = signal.SIG_IGN if i % 2 else signal.SIG_DFL
        proc = start_train(tmp_path, f"hydra.run.dir={tmp_path}/run{delay}", "steps=100000",
                           sigint=sigint)  # fmt: skip
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=300)[0]
        assert proc.returncode == 130, out[-3000:]
        assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
        assert "HYDRA_FULL_ERROR" not in out and "FINISHED" not in out, out[-3000:]
