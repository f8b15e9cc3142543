"""A throw-away SLURM cluster for the tests: munged, a MariaDB server, slurmdbd, slurmctld and
one slurmd on this host, in a temporary directory with free ports, every process stopped at the
end. Never a mock.

The binaries are Debian's (`slurm-wlm`, `slurmdbd`, `munge`, `mariadb-server`; `.ci/run` installs
them). Without them the tests that need a cluster are skipped, and fail under CI (CI=true), where a
skip would hide that they never ran. The daemons run as root (a container's only user); the jobs
run as the user who submits them. `python -m tests.slurm_cluster up DIR` / `down DIR` start and
stop one by hand (`make slurm-up`, `make slurm-down`): `export SLURM_CONF=DIR/slurm.conf`, then
sbatch, squeue, sacct.

The accounting database is what a lab's cluster has and what submitit reads: it learns the state
of a job from `sacct`, so without accounting a job that dies before it writes its result (a
cancelled job, a failed setup line, a dead node) would leave the sweep waiting for ever.
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

DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo", "sacct", "sacctmgr",
           "mariadb-install-db")  # fmt: skip
INSTALL = "apt-get install slurm-wlm slurmdbd munge mariadb-server"
PARTITION = "debug"


def missing() -> str | None:
    """Why no cluster can be started here (None when one can)."""
    absent = [name for name in DAEMONS + CLIENTS if not shutil.which(name, path=_path())]
    if absent:
        return f"{', '.join(absent)} not installed ({INSTALL})"
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
    """A running cluster: its directory (its config, SLURM_CONF, in it) and its host."""

    root: Path
    host: str

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
        """A daemon's log ("slurmctld", "slurmd.n1", ...)."""
        path = self.root / "log" / f"{daemon}.log"
        return path.read_text() if path.exists() else ""

    def idle(self) -> int:
        """How many nodes are idle."""
        states = self.run("sinfo", "-h", "-N", "-o", "%t", check=False).split()
        return states.count("idle")

    def stop_node(self, name: str) -> None:
        """The node dies: its slurmd and every job process on it killed (SIGKILL), as when its
        machine loses power; slurmctld finds out after SlurmdTimeout."""
        pid = int((self.root / f"slurmd.{name}.pid").read_text().split()[0])
        jobs = _processes_in(self.root, node=name)
        stepds = {_parent(proc) for proc in jobs} - {None}  # each job step's slurmstepd
        for proc in [pid, *(p for p in stepds if _command(p) == "slurmstepd"), *jobs]:
            with suppress(OSError):
                os.kill(proc, signal.SIGKILL)

    def start_node(self, name: str) -> None:
        """The node's slurmd started again (ReturnToService=2 brings the node back)."""
        subprocess.run(["slurmd", "-N", name], env=self.env(), check=True, timeout=30)

    def processes(self) -> list[int]:
        """Every process of the cluster still alive: daemons, job steps, jobs."""
        return _processes_in(self.root)


def _memory_mb() -> int:
    """This host's memory (MB), from /proc/meminfo."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 1024


NODES = ("n1", "n2")  # two slurmd on this host, as two nodes of one partition
REQUEUE_WAIT_S = 5  # a requeued job waits this + 1 s before it may start again (cred_expire)


def _config(root: Path, host: str, ports: dict[str, int], cpus: int) -> str:
    memory = _memory_mb() * 9 // 10 // len(NODES)
    nodes = [f"NodeName={name} NodeHostname={host} Port={ports[name]} CPUs={cpus} "
             f"RealMemory={memory} State=UNKNOWN" for name in NODES]  # fmt: skip
    return "\n".join([
        "ClusterName=alpharl", f"SlurmctldHost={host}", f"SlurmctldPort={ports['slurmctld']}",
        "AuthType=auth/munge", f"AuthInfo=socket={root}/munge.sock,cred_expire={REQUEUE_WAIT_S}",
        f"AccountingStoragePass={root}/munge.sock",  # the munge of slurmdbd's connections
        "CredType=cred/munge", "SlurmUser=root", "SlurmdUser=root",
        f"StateSaveLocation={root}/state", f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd.%n.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log", f"SlurmdLogFile={root}/log/slurmd.%n.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
        "SchedulerType=sched/backfill", "SchedulerParameters=sched_interval=2,bf_interval=2",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "ReturnToService=2",
        "JobCompType=jobcomp/none", "AccountingStorageType=accounting_storage/slurmdbd",
        f"AccountingStorageHost={host}", f"AccountingStoragePort={ports['slurmdbd']}",
        "JobAcctGatherType=jobacct_gather/none", "PlugStackConfig=/dev/null", "KillWait=30",
        "MinJobAge=300", "SlurmdTimeout=10", *nodes,
        f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
    ]) + "\n"  # fmt: skip


def _dbd_config(root: Path, host: str, ports: dict[str, int]) -> str:
    return "\n".join([
        "AuthType=auth/munge", f"AuthInfo=socket={root}/munge.sock", f"DbdHost={host}",
        f"DbdPort={ports['slurmdbd']}", "SlurmUser=root", f"PidFile={root}/slurmdbd.pid",
        f"LogFile={root}/log/slurmdbd.log", "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1", f"StoragePort={ports['mariadbd']}", "StorageUser=root",
        "StorageLoc=slurm_acct_db",
    ]) + "\n"  # fmt: skip


def _wait(what: str, ready, timeout_s: float) -> None:
    """Poll `ready()` until it is true; RuntimeError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not come up in {timeout_s:.0f} s")
        time.sleep(0.25)


def start(root: Path, timeout_s: float = 60.0) -> Cluster:
    """munged, MariaDB, slurmdbd, slurmctld and a slurmd per node started in `root`, every node
    idle; RuntimeError (with the daemons' logs) when it does not come up."""
    host = socket.gethostname()
    for sub in ("state", "spool", "log", "db"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    cluster = Cluster(root, host)
    ports = {name: free_port() for name in ("slurmctld", "slurmdbd", "mariadbd", *NODES)}
    cluster.conf.write_text(_config(root, host, ports, os.cpu_count() or 1))
    dbd = root / "slurmdbd.conf"  # next to slurm.conf, where slurmdbd looks; its owner's only
    dbd.write_text(_dbd_config(root, host, ports))
    dbd.chmod(0o600)
    env = cluster.env()
    try:
        subprocess.run(["munged", f"--socket={root}/munge.sock", f"--key-file={key}",
                        f"--log-file={root}/log/munged.log", f"--pid-file={root}/munged.pid",
                        f"--seed-file={root}/munged.seed", "--force"],
                       env=env, check=True, timeout=30)  # fmt: skip
        _start_database(root, ports["mariadbd"], env)
        subprocess.run(["slurmdbd"], env=env, check=True, timeout=30)
        _wait("slurmdbd", lambda: _answers(cluster), timeout_s)
        cluster.run("sacctmgr", "-i", "add", "cluster", "alpharl")
        subprocess.run(["slurmctld", "-c"], env=env, check=True, timeout=30)
        for name in NODES:
            subprocess.run(["slurmd", "-N", name], env=env, check=True, timeout=30)
        _wait("the nodes", lambda: cluster.idle() == len(NODES), timeout_s)
    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
        logs = "\n".join(f"--- {p.name}:\n{p.read_text()[-2000:]}"
                         for p in sorted((root / "log").glob("*.log")))  # fmt: skip
        stop(cluster)
        raise RuntimeError(f"the SLURM cluster in {root} did not start: {exc}\n{logs}") from exc
    return cluster


def _answers(cluster: Cluster) -> bool:
    """Whether slurmdbd answers sacctmgr."""
    done = subprocess.run(["sacctmgr", "-n", "list", "cluster"], env=cluster.env(),
                          capture_output=True, timeout=30)  # fmt: skip
    return done.returncode == 0


def _start_database(root: Path, port: int, env: dict[str, str]) -> None:
    """A MariaDB server of the cluster's own in root/db, on 127.0.0.1:`port` (slurmdbd's)."""
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={root}/db", "--user=root",
                    "--auth-root-authentication-method=normal", "--skip-test-db"],
                   env=env, check=True, timeout=120, capture_output=True)  # fmt: skip
    # in the background as a daemon of its own (setsid --fork: not this process's child)
    subprocess.run(["setsid", "--fork", "mariadbd", "--no-defaults", f"--datadir={root}/db",
                    "--user=root", f"--socket={root}/mariadb.sock", f"--port={port}",
                    "--bind-address=127.0.0.1", "--skip-name-resolve",
                    f"--pid-file={root}/mariadbd.pid", f"--log-error={root}/log/mariadbd.log"],
                   env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True, timeout=30)  # fmt: skip
    _wait("MariaDB", lambda: _port_open(port), 60)


def _port_open(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def stop(cluster: Cluster, timeout_s: float = 30.0) -> None:
    """Every job cancelled, then every daemon sent SIGTERM at once (SIGKILL for any still up
    after `timeout_s`), and every process left of the cluster (a job's) killed."""
    with suppress(Exception):
        cluster.run("scancel", "--full", "-u", str(os.getuid()), check=False)
    pids = []
    for pid_file in cluster.root.glob("*.pid"):
        with suppress(OSError, ValueError):
            pid = int(pid_file.read_text().split()[0])
            os.kill(pid, signal.SIGTERM)
            pids.append(pid)
    deadline = time.monotonic() + timeout_s
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in [*filter(_alive, pids), *_processes_in(cluster.root)]:
        with suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended but not reaped by its parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _processes_in(root: Path, node: str | None = None) -> list[int]:
    """The processes of the cluster in `root`: those whose command line or environment names it
    (the daemons, and slurmstepd and every job's process, which inherit SLURM_CONF); with `node`,
    the job processes on that node only (SLURMD_NODENAME in their environment)."""
    found, mark = [], str(root).encode()
    on = f"SLURMD_NODENAME={node}".encode() if node else None
    for proc in Path("/proc").glob("[0-9]*"):
        if int(proc.name) == os.getpid() or not _alive(int(proc.name)):
            continue
        with suppress(OSError):
            environ = (proc / "environ").read_bytes()
            if on is not None:
                if on in environ.split(b"\0"):
                    found.append(int(proc.name))
            elif mark in (proc / "cmdline").read_bytes() or mark in environ:
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
