"""One live owner per run directory (pipeline/life/owner.py): a second run into an owned
directory is refused naming its owner, a stale claim of a dead process is taken over, a fresh run
never writes into a directory that holds another run, and a resume checks the directory's
identity."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from alpha_rl.errors import CheckpointError
from alpha_rl.pipeline.life import checkpoint, owner
from alpha_rl.pipeline.life.identity import IDENTITY_FILE
from alpha_rl.pipeline.life.owner import RunDirError
from tests.helpers import start_train, train_in_process, write_quotes
from tests.pipeline.test_run import client, job

ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
HOLD = """
import sys, time
from pathlib import Path
from alpha_rl.pipeline.life import owner
owner.claim(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(120)
"""


def holder(directory: Path) -> subprocess.Popen:
    """Another process that owns `directory` until it is killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(directory)], env=ENV, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_directory_another_live_process_owns_is_refused_naming_it(tmp_path: Path) -> None:
    proc = holder(tmp_path / "run")
    try:
        with pytest.raises(RunDirError) as caught:
            owner.claim(tmp_path / "run")
        message = str(caught.value)
        assert f"run directory {tmp_path / 'run'} is in use by pid {proc.pid} on host " in message
        assert "give this run another directory" in message
    finally:
        proc.kill()
        proc.wait()
    # the kernel dropped the dead process's lock: its owner.json is a stale claim, taken over
    assert json.loads((tmp_path / "run" / owner.OWNER_FILE).read_text())["pid"] == proc.pid
    with owner.owned(tmp_path / "run") as path:
        assert json.loads((path / owner.OWNER_FILE).read_text())["pid"] == os.getpid()
    assert not (tmp_path / "run" / owner.OWNER_FILE).exists()  # released: no claim left


def test_a_stale_claim_on_this_host_is_taken_over_with_a_warning(tmp_path: Path, caplog) -> None:
    run = tmp_path / "run"
    run.mkdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    stale = {
        "pid": int(dead),
        "host": os.uname().nodename,
        "started": "2026-12-01T10:00:00",
        "job": None,
        "run_id": "abc",
    }
    (run / owner.OWNER_FILE).write_text(json.dumps(stale))
    caplog.set_level(logging.WARNING, logger="alpha_rl")
    with owner.owned(run):
        pass
    assert f"taking over from pid {dead} on host {os.uname().nodename}" in caplog.text
    assert "MLflow run abc" in caplog.text


def test_a_claim_of_another_host_is_refused_unless_it_is_this_cluster_job(
    tmp_path: Path, monkeypatch
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    other = {
        "pid": 4242,
        "host": "node-17",
        "started": "2026-12-01T10:00:00",
        "job": "991",
        "run_id": None,
    }
    (run / owner.OWNER_FILE).write_text(json.dumps(other))
    monkeypatch.delenv("SUBMITIT_EXECUTOR", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    with pytest.raises(
        RunDirError,
        match=r"claimed by pid 4242 on host node-17 .*another host.*"
        rf"delete {run / owner.OWNER_FILE}",
    ):
        owner.claim(run)
    monkeypatch.setenv("SLURM_JOB_ID", "991")  # a sibling step of that job on this node
    with pytest.raises(RunDirError, match=r"claimed by pid 4242 on host node-17"):
        owner.claim(run)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # the same job, requeued onto this node
    with owner.owned(run):
        record = json.loads((run / owner.OWNER_FILE).read_text())
        assert (record["job"], record["restart"]) == ("991", "1")


def test_claims_of_one_process_nest(tmp_path: Path) -> None:
    first = owner.claim(tmp_path / "run")
    second = owner.claim(tmp_path / "run")
    owner.release(second)
    assert (first / owner.OWNER_FILE).exists()  # still held by the first claim
    owner.release(first)
    assert not (first / owner.OWNER_FILE).exists()
    proc = holder(first)  # free for another process now
    proc.kill()
    proc.wait()


def test_a_directory_that_cannot_be_made_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(
        RunDirError,
        match=r"run directory .*file/run cannot be created "
        r"\(Not a directory \[errno 20\]\); choose a writable place",
    ):
        owner.claim(tmp_path / "file" / "run")


def train(tmp_path: Path, run_dir: Path, *overrides: str) -> subprocess.Popen:
    return start_train(tmp_path, f"hydra.run.dir={run_dir}", *overrides)


@pytest.mark.slow
def test_two_runs_into_one_directory_the_second_is_refused_and_nothing_is_mixed(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    first = train(tmp_path, run_dir, "seed=1", "steps=200")
    deadline = time.monotonic() + 300
    while not (run_dir / IDENTITY_FILE).exists():  # the first owns it and has started
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[0]
        time.sleep(0.2)
    second = train(tmp_path, run_dir, "seed=2")
    out2 = second.communicate(timeout=300)[0]
    out1 = first.communicate(timeout=600)[0]
    assert first.returncode == 0, out1[-3000:]
    assert second.returncode == 2, out2[-3000:]
    assert "Traceback" not in out2
    (line,) = [x for x in out2.splitlines() if x.strip()]
    assert line.startswith(f"error: run directory {run_dir} is in use by pid {first.pid} on host")
    # everything in the directory is the first run's: seed 1 throughout
    steps = [json.loads(x)["step"] for x in (run_dir / "diag.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == 200
    assert "seed: 1" in (run_dir / ".hydra" / "config.yaml").read_text()
    identity = json.loads((run_dir / IDENTITY_FILE).read_text())
    tracking = json.loads((run_dir / "tracking.json").read_text())
    assert identity["seed"] == 1 and identity["run_id"] == tracking["run_id"]
    meta = json.loads((checkpoint.latest(run_dir) / "meta.json").read_text())
    assert meta["identity"] == identity["id"] and "seed: 1" in meta["config"]
    assert client(tmp_path).get_run(tracking["run_id"]).data.params["seed"] == "1"
    assert not (run_dir / owner.OWNER_FILE).exists()  # released at the end


@pytest.mark.slow
def test_a_fresh_run_or_sweep_into_a_used_directory_is_refused_before_hydra_writes(
    tmp_path: Path,
) -> None:
    done = job(tmp_path, ["seed=1"], "run")  # a run, and a sweep directory with one job in it
    (done.run_dir / ".hydra").mkdir()
    (done.run_dir / ".hydra" / "config.yaml").write_text("seed: 1\n")
    sweep = tmp_path / "sweep"
    job(tmp_path, ["seed=1"], "sweep/0")
    store = ["backend=numpy", "debug=tiny", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"]
    again = train_in_process(tmp_path, *store, "seed=3", f"hydra.run.dir={done.run_dir}")
    swept = train_in_process(tmp_path, "-m", *store, "seed=3,4", f"hydra.sweep.dir={sweep}")
    for (code, out), says in ((again, f"error: run directory {done.run_dir} already holds a run"),
                              (swept, f"error: sweep directory {sweep} already holds the runs of "
                                      "an earlier sweep (0/)")):  # fmt: skip
        assert code == 2 and "Traceback" not in out, out[-3000:]
        assert [x for x in out.splitlines() if x.strip()] == [out.strip()]  # one line
        assert out.startswith(says), out
    assert (done.run_dir / ".hydra" / "config.yaml").read_text() == "seed: 1\n"  # not rewritten
    assert not (sweep / "multirun.yaml").exists() and not (sweep / "1").exists()


def test_a_cluster_job_requeued_before_its_first_checkpoint_starts_over(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "55")
    first = job(tmp_path, [], "run")
    shutil.rmtree(first.run_dir / "checkpoint")  # killed before it saved one
    before = (first.run_dir / "diag.jsonl").read_text()
    caplog.set_level(logging.WARNING, logger="alpha_rl")
    again = job(tmp_path, [], "run")  # the requeued job: the same job id, the same directory
    assert again.status == "FINISHED"
    assert "cluster job 55 was requeued before its first checkpoint: it starts over" in caplog.text
    assert (first.run_dir / "diag.attempt1.jsonl").read_text() == before
    steps = [json.loads(x)["step"] for x in (first.run_dir / "diag.jsonl").read_text().splitlines()]
    assert steps == [5, 10, 15, 20, 25, 30, 35, 40]  # the new attempt's alone
    shutil.rmtree(first.run_dir / "checkpoint")
    monkeypatch.setenv("SLURM_JOB_ID", "56")  # another job into that directory: refused
    with pytest.raises(RunDirError, match="already holds a run"):
        job(tmp_path, [], "run")


def test_a_fresh_run_into_a_directory_that_holds_a_run_is_refused(tmp_path: Path) -> None:
    first = job(tmp_path, ["seed=1"], "run")
    before = (first.run_dir / "diag.jsonl").read_bytes()
    with pytest.raises(RunDirError) as caught:
        job(tmp_path, ["seed=2"], "run")
    message = str(caught.value)
    assert f"run directory {first.run_dir} already holds a run (seed 1, started " in message
    assert f"MLflow run {first.run_id}" in message and f"resume={first.run_dir}" in message
    assert (first.run_dir / "diag.jsonl").read_bytes() == before


def test_a_run_stopped_before_its_first_step_may_start_over(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "tracking.json").write_text('{"run_id": "x"}')  # it reached the store, no step
    (run_dir / IDENTITY_FILE).write_text('{"id": "y", "seed": 3, "market": "z"}')
    assert job(tmp_path, [], "run").status == "FINISHED"


@pytest.mark.slow
def test_resume_refuses_a_directory_whose_identity_disagrees(tmp_path: Path) -> None:
    path = write_quotes(tmp_path / "q.csv", 100 + np.cumsum(np.full(4000, 0.01)))
    market = ["market=file", f"market.path={path}", "market.tick_size=0.01"]
    first = job(tmp_path, market, "run")
    resume = [*market, f"resume={first.run_dir}", "steps=50"]
    # the file changed under the run: same config, other prices
    write_quotes(path, 100 + np.cumsum(np.full(4000, 0.02)))
    with pytest.raises(
        CheckpointError,
        match=r"identity \(identity.json\) disagrees: its market "
        r"data had digest \w+, the market built now has \w+",
    ):
        job(tmp_path, resume, "ignored")
    write_quotes(path, 100 + np.cumsum(np.full(4000, 0.01)))
    # tracking.json rewritten to another MLflow run
    tracking = first.run_dir / "tracking.json"
    record = json.loads(tracking.read_text())
    tracking.write_text(json.dumps({**record, "run_id": "0" * 32}))
    with pytest.raises(
        CheckpointError,
        match=rf"reported to MLflow run {first.run_id}, its "
        rf"tracking.json names {'0' * 32}",
    ):
        job(tmp_path, resume, "ignored")
    tracking.write_text(json.dumps(record))
    # a checkpoint of another run copied in
    other = job(tmp_path, market, "other")
    newest = checkpoint.latest(first.run_dir)
    for name in (checkpoint.STATE, checkpoint.META):
        (newest / name).write_bytes((checkpoint.latest(other.run_dir) / name).read_bytes())
    with pytest.raises(CheckpointError, match=r"its checkpoint belongs to run \w+, not \w+"):
        job(tmp_path, resume, "ignored")
