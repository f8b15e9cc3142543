"""SIGTERM and SIGINT mid-run: a checkpoint at the stop step, the run KILLED, a resume that
continues bit-exact to the l_q history of an unbroken run; on the command line, exit 143 / 130
without a traceback and the resume command printed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from alpha_rl.commands import script_command
from alpha_rl.pipeline.life import checkpoint
from alpha_rl.pipeline.step.trainer import Trainer
from tests.helpers import wait_for_step
from tests.pipeline.test_run import ANNEAL, client, history, job, theta


def signal_after_step(monkeypatch, step: int, signum: int, times: int = 1) -> None:
    """Send `signum` to this process `times` times while env step `step` runs."""
    real = Trainer.step

    def step_and_signal(self: Trainer) -> None:
        real(self)
        if self.t == step:
            for _ in range(times):
                os.kill(os.getpid(), signum)

    monkeypatch.setattr(Trainer, "step", step_and_signal)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_after_the_step_with_a_checkpoint_and_resume_is_bit_exact(
    tmp_path: Path, monkeypatch, signum: int, unbroken
) -> None:
    signal_after_step(monkeypatch, 27, signum)  # between the checkpoints at 20 and 40
    stopped = job(tmp_path, [ANNEAL], "stopped")
    monkeypatch.undo()
    name = signal.Signals(signum).name
    assert (stopped.status, stopped.steps, stopped.stopped_by) == ("KILLED", 27, signum)
    assert stopped.reason == f"stopped by {name} at step 27"
    assert stopped.resume_command and stopped.resume_command.endswith(
        f"resume={stopped.run_dir}")  # fmt: skip
    assert json.loads((checkpoint.latest(stopped.run_dir) / "meta.json").read_text())["step"] == 27
    run = client(tmp_path).get_run(stopped.run_id)
    assert run.info.status == "KILLED"
    assert run.data.tags["alpha_rl.failure_reason"] == stopped.reason
    assert run.data.tags["alpha_rl.resume_command"].endswith(f"resume={stopped.run_dir}")
    assert run.data.tags["alpha_rl.pid"] == str(os.getpid()) and run.data.tags["alpha_rl.host"]
    assert "sys/heartbeat" in run.data.metrics
    assert signal.getsignal(signum) is not None  # the handlers are given back after the run
    resumed = job(tmp_path, [ANNEAL, f"resume={stopped.run_dir}"], "ignored")
    assert (resumed.status, resumed.steps, resumed.run_id) == ("FINISHED", 40, stopped.run_id)
    l_q = history(tmp_path, stopped.run_id, "loss/l_q")
    assert l_q == unbroken.l_q and len(l_q) == 6
    np.testing.assert_array_equal(theta(stopped.run_dir), unbroken.theta)
    assert MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db").get_run(
        stopped.run_id).info.status == "FINISHED"  # fmt: skip


def test_a_second_signal_stops_at_once_and_the_last_checkpoint_stays_valid(
    tmp_path: Path, monkeypatch, unbroken
) -> None:
    signal_after_step(monkeypatch, 27, signal.SIGINT, times=2)
    with pytest.raises(KeyboardInterrupt):
        job(tmp_path, [ANNEAL], "twice")
    monkeypatch.undo()
    run_dir = tmp_path / "twice"
    assert [p.name for p in checkpoint.saved(run_dir)] == ["0000000020"]
    resumed = job(tmp_path, [ANNEAL, f"resume={run_dir}"], "ignored")
    assert resumed.status == "FINISHED"
    np.testing.assert_array_equal(theta(run_dir), unbroken.theta)


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_the_command_line_exits_with_the_signal_status_and_says_how_to_resume(
    tmp_path: Path, signum: int, status: int, monkeypatch
) -> None:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    overrides = ["backend=numpy", "debug=tiny", "steps=5000", "checkpoint.every=1000",
                 f"tracking.uri=sqlite:///{tmp_path}/m.db"]  # fmt: skip
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "alpha_rl.train", *overrides, f"hydra.run.dir={run_dir}"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    wait_for_step(run_dir, 30, proc)
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == status, out[-3000:]
    assert "Traceback" not in out
    step = json.loads((checkpoint.latest(run_dir) / "meta.json").read_text())["step"]
    assert 30 <= step < 5000
    monkeypatch.chdir(tmp_path)  # the run's directory: the command as it reads there
    command = script_command("alpha-rl-train", [*overrides, f"resume={run_dir}"])
    assert f"to continue it: {command}\n" in out
    store = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/m.db")
    (run,) = store.search_runs([store.get_experiment_by_name("alpha_rl").experiment_id])
    assert run.info.status == "KILLED"
    assert run.data.tags["alpha_rl.failure_reason"].startswith(
        f"stopped by {signal.Signals(signum).name} at step {step}")  # fmt: skip


@pytest.mark.slow
def test_a_stopped_sweep_job_ends_the_sweep_and_its_parent_killed(tmp_path: Path) -> None:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(
        [sys.executable, "-m", "alpha_rl.train", "-m", "seed=0,1", "backend=numpy", "debug=tiny",
         "steps=5000", f"tracking.uri=sqlite:///{tmp_path}/m.db", f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    wait_for_step(sweep / "0", 30, proc)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, out[-3000:]
    assert "Traceback" not in out and "the sweep stops here" in out
    assert not (sweep / "1").exists()  # the second job never started
    store = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/m.db")
    runs = store.search_runs([store.get_experiment_by_name("alpha_rl").experiment_id])
    status = {"parent" if "alpha_rl.sweep_dir" in r.data.tags else "job": r.info.status
              for r in runs}  # fmt: skip
    assert len(runs) == 2 and status == {"parent": "KILLED", "job": "KILLED"}


def packs_apart(tmp_path: Path, seeds: str, *more: str) -> subprocess.Popen:
    """A packed sweep of `seeds` (numpy, debug=tiny, 5,000 steps) in packs run two at a time
    in processes of their own, tracked into tmp_path/m.db, its sweep in tmp_path/sweep; its
    output piped."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    return subprocess.Popen(
        [sys.executable, "-m", "alpha_rl.train", "-m", f"seed={seeds}", "backend=numpy",
         "debug=tiny", "steps=5000", "hydra/launcher=packed", "hydra.launcher.processes=2", *more,
         f"tracking.uri=sqlite:///{tmp_path}/m.db", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def statuses(tmp_path: Path) -> list:
    store = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/m.db")
    return store.search_runs([store.get_experiment_by_name("alpha_rl").experiment_id])


@pytest.mark.slow
def test_a_stop_sent_to_a_sweep_of_packs_apart_stops_every_pack_with_its_checkpoints(
    tmp_path: Path,
) -> None:
    """hydra/launcher=packed with processes=2: SIGTERM to the launcher reaches both packs'
    processes; each run checkpoints and ends KILLED, the sweep's parent too, exit 143."""
    sweep, proc = tmp_path / "sweep", packs_apart(tmp_path, "0,1")
    for name in ("0", "1"):
        wait_for_step(sweep / name, 30, proc)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 143, out[-3000:]
    assert "Traceback" not in out and "SIGTERM: passed on to every pack's process" in out
    for name in ("0", "1"):
        step = json.loads((checkpoint.latest(sweep / name) / "meta.json").read_text())["step"]
        assert 30 <= step < 5000
    assert sorted(r.info.status for r in statuses(tmp_path)) == ["KILLED"] * 3  # jobs, parent


@pytest.mark.slow
def test_a_stop_while_packs_start_stops_them_and_starts_no_other(tmp_path: Path) -> None:
    """Four packs of one, two at a time: SIGTERM as soon as the second has started (the two are
    starting up: their processes hold the signal until their runs can take it). The two stop,
    the other two never start, the sweep exits 143 without a traceback."""
    proc = packs_apart(tmp_path, "0,1,2,3", "hydra.launcher.agents=1")
    seen = []
    for line in proc.stdout:  # type: ignore[union-attr]
        seen.append(line)
        if "pack-2 started" in line:
            proc.send_signal(signal.SIGTERM)
            break
    out, _ = proc.communicate(timeout=180)
    out = "".join(seen) + out
    assert proc.returncode == 143, out[-3000:]
    assert "Traceback" not in out and "no other pack starts" in out
    assert out.count("not started (the sweep was stopped)") == 2
    runs = statuses(tmp_path)
    jobs = [r for r in runs if "alpha_rl.sweep_dir" not in r.data.tags]
    assert len(jobs) <= 2 and all(r.info.status == "KILLED" for r in runs)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_packs_whose_launcher_is_killed_stop_with_their_checkpoints(tmp_path: Path) -> None:
    """kill -9 of the launcher of two packs at once: each pack's process is told (its
    parent-death signal) and stops its run as a SIGTERM does, KILLED with a checkpoint, instead
    of training on with nobody to report to."""
    sweep, proc = tmp_path / "sweep", packs_apart(tmp_path, "0,1")
    for name in ("0", "1"):
        wait_for_step(sweep / name, 30, proc)
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 120
    outcomes = [sweep / name / "outcome.json" for name in ("0", "1")]
    while not all(o.exists() for o in outcomes) and time.monotonic() < deadline:
        time.sleep(0.5)
    for outcome in outcomes:
        assert json.loads(outcome.read_text())["status"] == "KILLED"
        step = json.loads((checkpoint.latest(outcome.parent) / "meta.json").read_text())["step"]
        assert 30 <= step < 5000


def test_a_sigterm_is_a_requeue_only_when_slurmctld_says_the_job_restarts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Outside SLURM a SIGTERM is a stop; inside, a slurmctld that cannot be asked (no scontrol
    here) makes it a stop too, said. The answer of a real slurmctld is tests/pipeline/
    test_slurm.py's."""
    from alpha_rl.pipeline.life.stop import StopSignals, slurm_requeues_this_job

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert not slurm_requeues_this_job()
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol
    stop = StopSignals(requeue=True)
    stop.signum = signal.SIGTERM
    assert not stop.requeued
    assert "cannot ask SLURM whether job 7 is being requeued" in caplog.text
