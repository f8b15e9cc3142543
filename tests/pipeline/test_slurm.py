"""Sweeps on a real SLURM cluster (tests/slurm_cluster.py: munged, slurmctld and a slurmd on this
host) through `hydra/launcher=slurm`, into an MLflow server on a throw-away PostgreSQL: the jobs
are sbatch's, the signals slurmctld's. All of them run on one xdist worker (one cluster)."""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from alpha_rl.search.storage import JOURNAL, open_storage
from tests.helpers import wait_for_step
from tests.mlflow_server import started_server

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.xdist_group("slurm")]

# the preset's GPU node, made a CPU job of this host's partition
ON_THIS_CLUSTER = ["hydra/launcher=slurm", "hydra.launcher.partition=debug",
                   "hydra.launcher.gpus_per_node=0", "hydra.launcher.cpus_per_task=1",
                   "hydra.launcher.mem_gb=1", "hydra.launcher.setup=[]"]  # fmt: skip


@pytest.fixture(scope="module")
def cluster() -> Iterator:
    from tests.slurm_cluster import require_slurm, slurm_cluster

    require_slurm()
    with slurm_cluster() as running:
        yield running
    assert not running.processes(), "processes of the cluster outlived it"


ACCOUNT = ("lab-admin", secrets.token_urlsafe(16))
LAB = {"MLFLOW_TRACKING_USERNAME": ACCOUNT[0], "MLFLOW_TRACKING_PASSWORD": ACCOUNT[1]}


def this_host() -> str:
    """This host's address as other nodes reach it (the interface of its default route)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))  # no packet is sent
        return probe.getsockname()[0]
    finally:
        probe.close()


@pytest.fixture(scope="module")
def server(postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An MLflow server on a PostgreSQL database of its own, listening on this host's address
    as a cluster's nodes would reach it, so with basic-auth (ACCOUNT); its URL."""
    root = tmp_path_factory.mktemp("slurm_server")
    credentials = root / "admin.txt"
    credentials.write_text(f"{ACCOUNT[0]}:{ACCOUNT[1]}\n")
    credentials.chmod(0o600)
    with started_server(postgres.new_database("slurm"), root, workers=2, host=this_host(),
                        credentials=credentials) as running:  # fmt: skip
        yield running.url


def sweep(where: Path, cluster, server: str, *overrides: str) -> subprocess.Popen:
    """`alpha-rl-train -m` on the cluster, its sweep in `where`/sweep, into `server`."""
    env = {**cluster.env(), **LAB, "MLFLOW_DISABLE_TELEMETRY": "true"}
    return subprocess.Popen(
        [sys.executable, "-m", "alpha_rl.train", "-m", *ON_THIS_CLUSTER, "backend=numpy",
         "debug=tiny", "tracking=server", f"tracking.uri={server}",
         f"hydra.sweep.dir={where}/sweep", *overrides],
        cwd=where, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def store(server: str) -> MlflowClient:
    """A client of the server, with the lab's account (the environment's, as on a node)."""
    os.environ.update(LAB)
    return MlflowClient(tracking_uri=server)


def runs_of(server: str, sweep_dir: Path) -> list:
    """The sweep's runs in the server's store (its parent run left out)."""
    store_ = store(server)
    found = store_.search_runs([store_.get_experiment_by_name("alpha_rl").experiment_id],
                               max_results=1000)  # fmt: skip
    return [r for r in found if r.data.tags.get("alpha_rl.run_dir", "").startswith(str(sweep_dir))]


def test_a_sweep_runs_as_a_job_array_and_is_judged(tmp_path: Path, cluster, server: str) -> None:
    """her_ablation (her on/off x 2 seeds) is one job array of 4 tasks, 2 at a time; every run
    FINISHED in the server's store; the sweep ends with the basic launcher's last lines; the
    kill check judges it from the server."""
    started = time.monotonic()
    proc = sweep(tmp_path, cluster, server, "experiment=her_ablation",
                 "hydra.launcher.array_parallelism=2")  # fmt: skip
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-4000:]
    took = time.monotonic() - started
    assert "sweep " in out and "4 jobs: 4 FINISHED" in out, out[-3000:]
    tasks = [p.name for p in (tmp_path / "sweep" / ".submitit").iterdir()
             if "_" in p.name and p.name[0] != "."]  # fmt: skip
    jobs = sorted({name.split("_")[0] for name in tasks})
    assert len(jobs) == 1 and len(tasks) == 4, tasks  # one array: <job id>_<task>
    runs = runs_of(server, tmp_path / "sweep")
    assert len(runs) == 4 and {r.info.status for r in runs} == {"FINISHED"}
    check = subprocess.run(
        [sys.executable, "-m", "alpha_rl.killcheck.cli", "--tracking-uri", server, "--sweep",
         str(tmp_path / "sweep")],
        env={**os.environ, **LAB, "MLFLOW_DISABLE_TELEMETRY": "true"}, capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    # 2 pairs, fewer than min_seeds: judged from the server's store to UNDECIDED (exit 2)
    assert "verdict: UNDECIDED" in check.stdout and check.returncode == 2, check.stdout[-3000:]
    print(f"the array sweep took {took:.0f} s")


# --- a job's life under slurmctld: time limits, requeues, cancels, dead nodes ---

QUIET = ["eval.every=0", "eval.first=[]"]  # the held-out evaluation at the end only
UNTIMED = ("perf/", "sys/", "system/")  # metrics of the clock, not of the run


def histories(client: MlflowClient, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """Every metric of a run but the clock's: its (step, value) points in step order."""
    keys = [k for k in client.get_run(run_id).data.metrics if not k.startswith(UNTIMED)]
    return {k: sorted((p.step, p.value) for p in client.get_metric_history(run_id, k))
            for k in keys}  # fmt: skip


def slurm_jobs(sweep_dir: Path) -> dict[int, str]:
    """The sweep's SLURM job ids by job number, from submitit's folder names: <array>_<task>, or
    the job's id alone when the sweep was one job (submitted as a plain job, not an array)."""
    names = [folder.name for folder in (sweep_dir / ".submitit").iterdir()]
    tasks = {int(name.partition("_")[2]): name for name in names
             if name.partition("_")[0].isdigit() and name.partition("_")[2].isdigit()}  # fmt: skip
    return tasks or dict(enumerate(name for name in names if name.isdigit()))


def log_of(job_dir: Path) -> str:
    path = job_dir / "train.log"
    return path.read_text() if path.exists() else ""


def wait_until(what: str, ready, proc: subprocess.Popen, timeout_s: float = 300) -> None:
    """Poll `ready()`; AssertionError naming `what` when the sweep ends first or time is up."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"the sweep ended before {what}: {proc.communicate()[0][-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} in {timeout_s:.0f} s")
        time.sleep(0.5)


def unbroken(where: Path, *overrides: str) -> subprocess.Popen:
    """The same run in one piece, in this process's machine, into where/mlflow.db."""
    where.mkdir()
    return subprocess.Popen(
        [sys.executable, "-m", "alpha_rl.train", "backend=numpy", "debug=tiny",
         f"tracking.uri=sqlite:///{where}/mlflow.db", f"hydra.run.dir={where}/run", *overrides],
        cwd=where, env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def running(cluster, job: str) -> bool:
    """Whether slurmctld says `job` runs."""
    return cluster.run("squeue", "-h", "-j", job, "-o", "%T", check=False).strip() == "RUNNING"


def cluster_ok(cluster, *command: str) -> bool:
    """Whether a client command of the cluster succeeded."""
    return subprocess.run(command, env=cluster.env(), capture_output=True).returncode == 0


def sole_run(uri: str, experiment: str = "alpha_rl") -> str:
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return run.info.run_id


# long enough that the first attempt still steps when SIGUSR2 comes, 25 to 55 s after the job
# starts (a 1-minute limit, the signal 5 s before it: slurmctld checks limits every 30 s), on a
# CPU faster than CI's
LONG = ["seed=3", "steps=5000", "checkpoint.every=1000", *QUIET]


def test_a_job_that_times_out_or_is_requeued_continues_its_run_bit_for_bit(
    tmp_path: Path, cluster, server: str
) -> None:
    """A 1-minute limit with SIGUSR2 5 s before it: the run checkpoints at its step, submitit
    requeues the job and the next attempt resumes the same MLflow run (its limit then raised to
    10 minutes, so that the attempts after it are not timed out while they start). Then
    `scontrol requeue` of the running job (what a requeueing preemption does: SIGTERM): the run
    asks slurmctld, finds its job requeued, checkpoints and leaves its MLflow run open. The run
    ends FINISHED with every metric's history equal to an unbroken run's, bit for bit."""
    limit = ["hydra.launcher.timeout_min=1", "hydra.launcher.signal_delay_s=5"]
    proc = sweep(tmp_path, cluster, server, *LONG, *limit)
    whole = unbroken(tmp_path / "whole", *LONG)
    job_dir, sweep_dir = tmp_path / "sweep" / "0", tmp_path / "sweep"
    timed_out = "SIGUSR2 from the cluster (a time limit or preemption)"
    wait_until("SIGUSR2 at the time limit", lambda: timed_out in log_of(job_dir), proc, 240)
    job = slurm_jobs(sweep_dir)[0]
    wait_until("a longer limit for the next attempts",
               lambda: cluster_ok(cluster, "scontrol", "update", f"JobId={job}", "TimeLimit=10"),
               proc, 60)  # fmt: skip
    resumed = "a requeued job: resuming from its checkpoint"
    wait_until("the attempt after the time limit", lambda: resumed in log_of(job_dir), proc, 240)
    at_step = r"resuming \S+ at step (\d+)"  # said once the checkpoint is loaded
    wait_until("the step it resumes at", lambda: re.search(at_step, log_of(job_dir)), proc, 120)
    at = int(re.findall(at_step, log_of(job_dir))[-1])
    wait_for_step(job_dir, at + 50, proc)  # it steps on from its checkpoint
    wait_until("a running attempt to requeue", lambda: running(cluster, job), proc, 240)
    # once only: a requeue whose reply timed out on a busy host may still have been done, and a
    # second would make a third attempt
    cluster_ok(cluster, "scontrol", "requeue", job)
    wait_until("the attempt after scontrol requeue",
               lambda: log_of(job_dir).count(resumed) == 2, proc, 240)  # fmt: skip
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-4000:]
    assert "1 job: 1 FINISHED" in out, out[-3000:]
    log = log_of(job_dir)
    assert "SIGUSR2 from the cluster (a time limit or preemption)" in log
    assert "SIGTERM: SLURM requeues this job (a preemption, scontrol requeue)" in log
    assert "run FINISHED after 5000 steps" in log
    submitit_log = "".join(p.read_text() for p in (tmp_path / "sweep" / ".submitit").glob(
        f"{job}/*_log.err"))  # fmt: skip
    assert "this job is timed-out" in submitit_log, submitit_log[-3000:]
    shown = cluster.run("scontrol", "show", "job", job)
    restarts = int(re.search(r"Restarts=(\d+)", shown).group(1))
    attempts = log.count(resumed)  # every attempt after the first resumes, and says so
    assert restarts == attempts == 2, f"Restarts={restarts}, {attempts} resumed: {shown}"
    whole_out, _ = whole.communicate(timeout=600)
    assert whole.returncode == 0, whole_out[-3000:]
    (run,) = runs_of(server, tmp_path / "sweep")
    assert run.info.status == "FINISHED"
    baseline = f"sqlite:///{tmp_path}/whole/mlflow.db"
    expected = histories(MlflowClient(tracking_uri=baseline), sole_run(baseline))
    got = histories(store(server), run.info.run_id)
    assert set(got) == set(expected) and "loss/l_q" in got
    differs = [key for key in expected if got[key] != expected[key]]
    assert not differs, f"{len(differs)} metrics differ from the unbroken run's: {differs[:5]}"


def test_a_cancelled_job_ends_killed_and_a_dead_nodes_job_finishes_on_another(
    tmp_path: Path, cluster, server: str
) -> None:
    """Two jobs at once, each past its first checkpoint. scancel of one: its run ends KILLED
    with the command that continues it, and the sweep counts it KILLED (its parent run too).
    The other's node dies (its slurmd and the job's processes killed, as at a power loss):
    slurmctld marks the node DOWN and requeues the job on the other node, where it resumes from
    its checkpoint and finishes, its every log point in the store (those its lost attempt logged
    after the checkpoint twice, with the same values)."""
    proc = sweep(tmp_path, cluster, server, "seed=0,1", "steps=1500", "checkpoint.every=400",
                 *QUIET, "hydra.launcher.array_parallelism=2")  # fmt: skip
    sweep_dir = tmp_path / "sweep"
    for job_dir in (sweep_dir / "0", sweep_dir / "1"):
        wait_for_step(job_dir, 500, proc)
    jobs = slurm_jobs(sweep_dir)
    assert cluster_ok(cluster, "scancel", jobs[0])
    wait_until("the cancelled run's end", lambda: (sweep_dir / "0" / "outcome.json").exists(),
               proc, 120)  # fmt: skip
    node = cluster.run("squeue", "-h", "-j", jobs[1], "-o", "%N").strip()
    cluster.stop_node(node)
    resumed = "a requeued job: resuming from its checkpoint"
    wait_until("the job on another node", lambda: resumed in log_of(sweep_dir / "1"), proc, 240)
    cluster.start_node(node)
    out, _ = proc.communicate(timeout=600)
    assert re.search(r"2 jobs: (1 FINISHED, 1 KILLED|1 KILLED, 1 FINISHED)", out), out[-3000:]
    assert f"SLURM job {jobs[0]} ended CANCELLED" in out, out[-3000:]
    assert "to continue it: " in log_of(sweep_dir / "0")
    states = cluster.run("sacct", "-n", "-X", "-D", "-P", "-o", "JobID,State,NodeList", "-j",
                         jobs[1])  # fmt: skip
    assert "NODE_FAIL" in states and "COMPLETED" in states, states
    runs = {
        r.data.tags["alpha_rl.run_dir"].rsplit("/", 1)[1]: r for r in runs_of(server, sweep_dir)
    }
    assert (runs["0"].info.status, runs["1"].info.status) == ("KILLED", "FINISHED")
    l_q = store(server).get_metric_history(runs["1"].info.run_id, "loss/l_q")
    by_step: dict[int, set[float]] = {}
    for point in l_q:
        by_step.setdefault(point.step, set()).add(point.value)
    assert sorted(by_step) == list(range(15, 1501, 5))  # every log point after learn_start
    assert all(len(values) == 1 for values in by_step.values())
    parent = json.loads((sweep_dir / "mlflow_parent.json").read_text())["run_id"]
    assert store(server).get_run(parent).info.status == "KILLED"


def test_an_sqlite_store_is_refused_before_any_job_and_a_failed_setup_line_named(
    tmp_path: Path, cluster, server: str
) -> None:
    """tracking.uri=sqlite:///... under the slurm launcher exits 2 before sbatch is called;
    a setup line that fails ends its job (FAILED) before the run starts, the sweep naming the
    line and counting the job as not started (exit 2)."""
    submitted = cluster.run("sacct", "-n", "-X", "-a", "-o", "JobID").split()
    (tmp_path / "sqlite").mkdir()
    refused = subprocess.run(
        [sys.executable, "-m", "alpha_rl.train", "-m", *ON_THIS_CLUSTER, "backend=numpy",
         "debug=tiny", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
         f"hydra.sweep.dir={tmp_path}/sqlite/sweep"],
        cwd=tmp_path / "sqlite", env=cluster.env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert "tracking=server" in refused.stdout + refused.stderr
    assert cluster.run("sacct", "-n", "-X", "-a", "-o", "JobID").split() == submitted
    assert not (tmp_path / "sqlite" / "sweep" / ".submitit").exists()
    proc = sweep(
        tmp_path, cluster, server, "hydra.launcher.setup=[echo ready,source ./absent/bin/activate]"
    )
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 2, out[-3000:]
    named = "a setup line failed (exit 1): source ./absent/bin/activate"
    assert "ended FAILED without a result: alpha_rl: " + named in out, out[-3000:]
    assert "1 job: 1 did not start" in out and "job 0 did not start: SLURM job" in out
    assert not (tmp_path / "sweep" / "0" / "train.log").exists()


def test_a_search_runs_its_trials_as_jobs_and_keeps_its_study_on_the_submitting_host(
    tmp_path: Path, cluster, server: str
) -> None:
    """hparams_search under the slurm launcher: the runs of a batch of n_jobs trials on their
    seeds are one job array; every run is in the server, FINISHED, its objective the trial's
    intermediate value at its instance and the trial's value their mean. The study's journal
    (optuna.journal beside the sweep's command, as with a server) is written by the sweeper
    alone, on the host that submitted: the jobs hand their objective back through submitit, so
    no node opens it."""
    proc = sweep(tmp_path, cluster, server, "hparams_search=her_optuna", "steps=20",
                 "hydra.sweeper.sampler.name=grid", "hydra.sweeper.n_trials=2",
                 "hydra.sweeper.n_jobs=2", "hydra.sweeper.seeds=[0,1]",
                 "her.threshold=choice(1.5)", "her.priority_boost=choice(3.0)",
                 "her.lookahead=choice(4,6)")  # fmt: skip
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-4000:]
    assert "4 jobs: 4 FINISHED" in out and "confirm it: " in out, out[-3000:]
    arrays = {name.split("_")[0] for name in slurm_jobs(tmp_path / "sweep").values()}
    assert len(arrays) == 1 and len(slurm_jobs(tmp_path / "sweep")) == 4  # one array of 4
    journal = open_storage(f"{JOURNAL}{tmp_path / 'optuna.journal'}")
    study = optuna.load_study(study_name="her_optuna", storage=journal)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 2
    for trial in study.trials:
        assert set(trial.intermediate_values) == {0, 1}  # seeds 0 and 1
        assert trial.value == pytest.approx(sum(trial.intermediate_values.values()) / 2)
        for instance, run_id in trial.user_attrs["mlflow_run_ids"].items():
            run = store(server).get_run(run_id)
            assert run.info.status == "FINISHED"
            assert run.data.tags["search.trial"] == str(trial.number)
            value = trial.intermediate_values[int(instance)]
            assert run.data.metrics["search/objective"] == value
    opened = [line for line in out.splitlines() if "optuna.journal" in line]
    assert opened, out[-3000:]  # the sweeper says where its study is
