"""An MLflow tracking server on loopback for the tests that need one, started the way a lab starts
its own: `python -m alpha_rl.tracking server` (alpha_rl.tracking.server) over a database."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from alpha_rl.tracking.server_watch import end, tree


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TrackingServer:
    """`python -m alpha_rl.tracking server --db <db>` on a free loopback port, artifacts in
    <root>/mlartifacts, its output in <root>/mlflow_server.log; started once it answers and its
    launcher checked where it listens, `kill()` ends it at once (every process of it, as a crash
    would), `start()` brings it back on the same port."""

    def __init__(self, db: str, root: Path, *, credentials: Path | None = None, workers: int = 4,
                 start_timeout_s: float = 180.0, host: str = "127.0.0.1") -> None:  # fmt: skip
        self.db, self.root, self.host = db, root, host
        self.port = free_port()
        self.url = f"http://{host}:{self.port}"
        self.credentials, self.workers = credentials, workers
        self.start_timeout_s = start_timeout_s
        self.log_path = root / "mlflow_server.log"
        self._proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        extra = ["--auth", "--credentials", str(self.credentials)] if self.credentials else []
        if self.host != "127.0.0.1":  # MLflow answers only localhost and private addresses
            extra += ["--allowed-hosts", f"{self.host},{self.host}:{self.port}"]
        return [sys.executable, "-m", "alpha_rl.tracking", "server", "--db", self.db,
                "--artifacts", str(self.root / "mlartifacts"), "--host", self.host,
                "--port", str(self.port), "--workers", str(self.workers), *extra]  # fmt: skip

    def _checked(self) -> int:
        """How many times the log says the launcher checked the server's listening sockets."""
        return self.log_path.read_text().count("listening on ") if self.log_path.exists() else 0

    def start(self) -> None:
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
        checked = self._checked()
        with open(self.log_path, "a") as log:
            self._proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.root,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {self.log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200 and self._checked() > checked:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server on {self.url} did not answer in "
                                   f"{self.start_timeout_s} s")  # fmt: skip
            time.sleep(0.25)

    def kill(self) -> None:
        """SIGKILL to the launcher, the server and its workers (each process group of the tree:
        the launcher runs `mlflow server` in a group of its own): requests in flight get no
        answer."""
        if self._proc is None or self._proc.poll() is not None:
            return
        left = end(tree(self._proc.pid), signal.SIGKILL, 30)
        self._proc.wait(timeout=30)
        assert not left, f"still running after SIGKILL: {left}"

    def stop(self) -> None:
        """SIGTERM to the launcher, which forwards it to the server; kill() after 20 s."""
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()

    def restart_at(self, fraction: float, down_s: float, *, grace_s: float = 0.0,
                   timeout_s: float = 1800.0) -> tuple[Callable, dict[str, float]]:  # fmt: skip
        """A `during` for alpha_rl.tracking.load.run_load that kills this server once
        `fraction` of the values arrived and starts it again after grace_s + down_s, and the
        fractions sent it records: at the kill (after grace_s, for a writer between its last
        answer and counting it), at the restart and once the server answers again."""
        events: dict[str, float] = {}

        def during(sent: Callable[[], float]) -> None:
            deadline = time.monotonic() + timeout_s
            while sent() < fraction and time.monotonic() < deadline:
                time.sleep(0.05)
            t = time.perf_counter()
            self.kill()
            time.sleep(grace_s)
            events["killed_at"] = sent()
            time.sleep(down_s)
            events["restarting_at"] = sent()
            self.start()
            events["back_at"] = sent()
            events["down_s"] = time.perf_counter() - t

        return during, events


@contextmanager
def started_server(db: str, root: Path, **kwargs) -> Iterator[TrackingServer]:
    """A started TrackingServer, stopped afterwards."""
    server = TrackingServer(db, root, **kwargs)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@contextmanager
def mlflow_server(store: Path, start_timeout_s: float = 180.0) -> Iterator[str]:
    """A server over sqlite:///<store> (artifacts in mlartifacts/ beside it); yields its URL."""
    with started_server(f"sqlite:///{store}", store.parent,
                         start_timeout_s=start_timeout_s) as server:  # fmt: skip
        yield server.url
