"""Sweeps on a real SLURM cluster (tests/slurm_cluster.py: munged, slurmctld and a slurmd on this
host) through `hydra/launcher=slurm`, into an MLflow server on a throw-away PostgreSQL: the jobs
are sbatch's, the signals slurmctld's. All of them run on one xdist worker (one cluster)."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

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
