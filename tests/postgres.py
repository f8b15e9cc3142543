"""A throw-away PostgreSQL cluster for the tests: initdb in a temporary directory, a free port on
127.0.0.1, stopped and removed at the end. Never a mock.

The binaries are Debian's (`/usr/lib/postgresql/<version>/bin`, `.ci/run` installs the
`postgresql` package) or whatever `initdb` PATH finds. Without them, or without its driver (the
`.[server]` extra: psycopg), the tests that need a cluster are skipped, and fail under CI
(CI=true), where a skip would hide that they never ran. PostgreSQL refuses to run as root: as
root the cluster runs as the `postgres` user the Debian package creates.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from tests.mlflow_server import free_port

USER = "alpha_rl"  # the cluster's superuser (trust authentication on 127.0.0.1 only)
DATABASE = "mlflow"


def bin_dir() -> Path | None:
    """The directory holding initdb and pg_ctl (the newest Debian version first, then PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version, reverse=True)
    for directory in found:
        if (Path(directory) / "initdb").exists() and (Path(directory) / "pg_ctl").exists():
            return Path(directory)
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def _version(path: str) -> float:
    try:
        return float(Path(path).parent.name)
    except ValueError:
        return 0.0


def missing() -> str | None:
    """Why no cluster can be started here (None when one can)."""
    if bin_dir() is None:
        return "PostgreSQL's initdb / pg_ctl are not installed (apt-get install postgresql)"
    try:  # the driver the installed SQLAlchemy takes for postgresql:// (psycopg from 2.1 on)
        import sqlalchemy

        sqlalchemy.create_engine("postgresql://127.0.0.1/probe").dispose()
    except ModuleNotFoundError as exc:
        return f"PostgreSQL's driver {exc.name} is not installed (pip install -e '.[server]')"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no `postgres` user to run PostgreSQL as"
    return None


def require_postgres() -> None:
    """Skip the calling test where no cluster can be started; fail instead under CI."""
    reason = missing()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI must run the PostgreSQL tests: {reason}")
    pytest.skip(reason)


class Cluster:
    """A running throw-away cluster; `uri` is the SQLAlchemy URI of its `mlflow` database."""

    def __init__(self, root: Path, port: int, as_user: list[str]) -> None:
        self.root = root
        self.port = port
        self.data = root / "data"
        self.log = root / "postgres.log"
        self._as_user = as_user
        self._bin = bin_dir()
        assert self._bin is not None

    @property
    def uri(self) -> str:
        """The `mlflow` database."""
        return self.database_uri(DATABASE)

    def database_uri(self, name: str) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{name}"

    def new_database(self, name: str) -> str:
        """Create database `name` (a test's own store); its URI."""
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", USER, name)
        return self.database_uri(name)

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run([*self._as_user, str(self._bin / tool), *args],
                              capture_output=True, text=True, cwd=self.root)  # fmt: skip
        if done.returncode != 0:
            log = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{tool} {' '.join(args)} failed: {done.stderr}{done.stdout}{log}")

    def start(self) -> None:
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} "
                   "-c max_connections=300")  # fmt: skip
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w",
                  "-t", "60", "start")  # fmt: skip

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")


@contextmanager
def postgres_cluster() -> Iterator[Cluster]:
    """initdb, start on a free loopback port, create the `mlflow` database; stop and remove."""
    root = Path(tempfile.mkdtemp(prefix="alpha_rl_pg_"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        account = pwd.getpwnam("postgres")
        os.chown(root, account.pw_uid, account.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    cluster = Cluster(root, free_port(), as_user)
    started = False
    try:
        cluster._run("initdb", "-D", str(cluster.data), "-U", USER, "--auth=trust", "-E", "UTF8",
                     "--no-sync")  # fmt: skip
        cluster.start()
        started = True
        cluster.new_database(DATABASE)
        yield cluster
    finally:
        if started:
            with suppress(RuntimeError):  # already stopped: the directory goes anyway
                cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
