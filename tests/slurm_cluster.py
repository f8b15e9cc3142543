"""A throw-away SLURM cluster for the tests: munged, slurmctld and one slurmd on this host, in a
temporary directory with free ports, every process stopped at the end. Never a mock.

The binaries are Debian's (`slurm-wlm` and `munge`; `.ci/run` installs them). Without them the
tests that need a cluster are skipped, and fail under CI (CI=true), where a skip would hide that
they never ran. The daemons run as root (a container's only user); the jobs run as the user who
submits them. `python -m tests.slurm_cluster up DIR` / `down DIR` start and stop one by hand
(`make slurm-up`, `make slurm-down`): `export SLURM_CONF=DIR/slurm.conf`, then sbatch, squeue.

There is no accounting database (slurmdbd needs MySQL): `sacct` answers that accounting is
disabled, and submitit then learns that a job ended from its result file alone.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.mlflow_server import free_port

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo")
PARTITION = "debug"


def missing() -> str | None:
    """Why no cluster can be started here (None when one can)."""
    absent = [name for name in DAEMONS + CLIENTS if not shutil.which(name, path=_path())]
    if absent:
        return f"{', '.join(absent)} not installed (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the daemons of a throw-away cluster run as root here"
    return None


def require_slurm() -> None:
    """Skip when no cluster can start; under CI fail instead."""
    why = missing()
    if why is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"a SLURM cluster cannot start: {why}; .ci/run installs it under CI")
    pytest.skip(why)


def _path() -> str:
    return os.environ.get("PATH", "") + ":/usr/sbin:/sbin"


@dataclass
class Cluster:
    """A running cluster: its directory, its config (SLURM_CONF) and its node."""

    root: Path
    node: str

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self) -> dict[str, str]:
        """The environment a client (sbatch, a sweep) talks to this cluster in."""
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": _path()}

    def run(self, *command: str, check: bool = True) -> str:
        """A client command's output (scontrol, squeue, ...)."""
        done = subprocess.run(command, env=self.env(), capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        if check and done.returncode:
            raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip() or done.stdout}")
        return done.stdout

    def log(self, daemon: str) -> str:
        path = self.root / "log" / f"{daemon}.log"
        return path.read_text() if path.exists() else ""

    def processes(self) -> list[int]:
        """Every process of the cluster still alive: daemons, job steps, jobs."""
        return _processes_in(self.root)


def _memory_mb() -> int:
    """This host's memory (MB), from /proc/meminfo."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 1024


def _config(root: Path, node: str, cpus: int) -> str:
    ports = free_port(), free_port()
    return "\n".join([
        "ClusterName=alpharl", f"SlurmctldHost={node}", f"SlurmctldPort={ports[0]}",
        f"SlurmdPort={ports[1]}", "AuthType=auth/munge", f"AuthInfo=socket={root}/munge.sock",
        "CredType=cred/munge", "SlurmUser=root", "SlurmdUser=root",
        f"StateSaveLocation={root}/state", f"SlurmdSpoolDir={root}/spool",
        f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log", f"SlurmdLogFile={root}/log/slurmd.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
        "SchedulerType=sched/backfill", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "ReturnToService=2", "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
        "PlugStackConfig=/dev/null", "KillWait=5", "MinJobAge=300", "SlurmdTimeout=30",
        f"NodeName={node} CPUs={cpus} RealMemory={_memory_mb() * 9 // 10} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
    ]) + "\n"  # fmt: skip


def start(root: Path, timeout_s: float = 60.0) -> Cluster:
    """munged, slurmctld and slurmd started in `root`, the node idle; RuntimeError (with the
    daemons' logs) when it does not come up."""
    node = socket.gethostname()
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    cluster = Cluster(root, node)
    cluster.conf.write_text(_config(root, node, os.cpu_count() or 1))
    env = cluster.env()
    subprocess.run(["munged", f"--socket={root}/munge.sock", f"--key-file={key}",
                    f"--log-file={root}/log/munged.log", f"--pid-file={root}/munged.pid",
                    f"--seed-file={root}/munged.seed", "--force"],
                   env=env, check=True, timeout=30)  # fmt: skip
    subprocess.run(["slurmctld", "-c"], env=env, check=True, timeout=30)
    subprocess.run(["slurmd"], env=env, check=True, timeout=30)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = cluster.run("sinfo", "-h", "-o", "%t", check=False).strip()
        if state == "idle":
            return cluster
        time.sleep(0.5)
    logs = "\n".join(f"--- {d}:\n{cluster.log(d)[-2000:]}" for d in DAEMONS)
    stop(cluster)
    raise RuntimeError(f"the SLURM cluster in {root} did not come up in {timeout_s:.0f} s:\n{logs}")


def stop(cluster: Cluster, timeout_s: float = 30.0) -> None:
    """Every job cancelled, then slurmd, slurmctld and munged stopped (SIGTERM, then SIGKILL),
    and every process left in the cluster's directory (a job's) killed."""
    with suppress(Exception):
        cluster.run("scancel", "--full", "-u", str(os.getuid()), check=False)
    for name in reversed(DAEMONS):
        with suppress(OSError, ValueError):
            pid = int((cluster.root / f"{name}.pid").read_text().split()[0])
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                os.kill(pid, 0)
                time.sleep(0.1)
            os.kill(pid, signal.SIGKILL)
    for pid in _processes_in(cluster.root):
        with suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _processes_in(root: Path) -> list[int]:
    """The processes of the cluster in `root`: those whose command line or environment names it
    (the daemons, and slurmstepd and every job's process, which inherit SLURM_CONF)."""
    found, mark = [], str(root).encode()
    for proc in Path("/proc").glob("[0-9]*"):
        if int(proc.name) == os.getpid():
            continue
        with suppress(OSError):
            if mark in (proc / "cmdline").read_bytes() or mark in (proc / "environ").read_bytes():
                found.append(int(proc.name))
    return found


@contextmanager
def slurm_cluster() -> Iterator[Cluster]:
    """A started cluster in a temporary directory, stopped and removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="alpha_rl_slurm_"))
    cluster = start(root)
    try:
        yield cluster
    finally:
        stop(cluster)
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str]) -> int:
    """`up DIR` / `down DIR`: a cluster by hand."""
    if len(argv) != 2 or argv[0] not in ("up", "down"):
        print("usage: python -m tests.slurm_cluster up|down DIR", file=sys.stderr)
        return 2
    root = Path(argv[1]).resolve()
    if argv[0] == "up":
        why = missing()
        if why:
            print(f"cannot start a SLURM cluster: {why}", file=sys.stderr)
            return 1
        start(root)
        print(f"a SLURM cluster runs in {root}: export SLURM_CONF={root}/slurm.conf")
        return 0
    stop(Cluster(root, socket.gethostname()))
    print(f"the SLURM cluster in {root} is stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
