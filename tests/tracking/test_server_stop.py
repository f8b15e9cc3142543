"""How `python -m alpha_rl.tracking server` ends: a stop signal ends the whole server quietly,
with one line and 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM), while it starts
or serves; a server that ends unasked (it could not bind, say) fails the command; a bracketed
IPv6 loopback address is served. Real launchers over real `mlflow server`s."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from alpha_rl.tracking import server as server_module
from alpha_rl.tracking.__main__ import main as tracking_main
from alpha_rl.tracking.server_watch import end, tree
from tests.mlflow_server import free_port
from tests.tracking.test_server import gone, listeners

NOISE = ("Traceback", "KeyboardInterrupt", "CancelledError")  # what a stop must not print


def launch(
    tmp_path: Path, port: int, host: str = "127.0.0.1", workers: int = 2
) -> subprocess.Popen:
    """The launcher over SQLite, its server's output in <tmp_path>/mlflow_server.log, in a
    session of its own (a signal to it reaches no other process)."""
    return subprocess.Popen(
        [sys.executable, "-m", "alpha_rl.tracking", "server", "--db",
         f"sqlite:///{tmp_path}/mlflow.db", "--artifacts", str(tmp_path / "art"), "--host", host,
         "--port", str(port), "--workers", str(workers),
         "--log", str(tmp_path / "mlflow_server.log")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}, start_new_session=True,
    )  # fmt: skip


def printed_until(proc: subprocess.Popen, text: str, timeout_s: float = 300) -> str:
    """The launcher's stdout up to the line holding `text` (it prints a line every 10 s while
    the server starts); AssertionError when it exits or the time runs out first."""
    lines, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if text in line:
            return "".join(lines)
    end(tree(proc.pid), signal.SIGKILL, 30)  # the launcher and the server it started
    out, err = proc.communicate()
    raise AssertionError(f"no {text!r} from the launcher: {''.join(lines) + out}\n{err}")


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    """(exit status, stderr) of the launcher; whatever is left of it killed should it hang."""
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        end(tree(proc.pid), signal.SIGKILL, 30)
        raise
    return proc.returncode, err


STOPS = [
    (signal.SIGINT, "serving", 130, "interrupted"),
    (signal.SIGINT, "starting", 130, "interrupted"),  # mlflow imports, its workers start
    (signal.SIGTERM, "serving", 143, "terminated"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "when", "code", "word"), STOPS,
                         ids=[f"{s.name}-{w}" for s, w, _, _ in STOPS])  # fmt: skip
def test_a_stop_signal_ends_the_server_in_one_line_with_128_plus_its_number(
    sig: signal.Signals, when: str, code: int, word: str, tmp_path: Path
) -> None:
    port = free_port()
    proc = launch(tmp_path, port)
    try:
        if when == "serving":
            printed_until(proc, "Ctrl-C stops the server.")
        else:
            printed_until(proc, "its output: ")
            time.sleep(2.0)  # into MLflow's imports (a stop at any point must hold)
        procs = tree(proc.pid)
        commands = [p.cmdline() for p in procs] if when == "serving" else []
        proc.send_signal(sig)
        status, err = finish(proc)
    finally:
        end(tree(proc.pid), signal.SIGKILL, 30)
    log = (tmp_path / "mlflow_server.log").read_text()
    assert (status, err) == (code, f"tracking server stopped ({word})\n"), log[-3000:]
    assert not any(noise in log for noise in NOISE), log[-3000:]
    assert all(gone(p.pid) for p in procs) and not listeners(port)
    if when == "serving":  # X-Forwarded-For believed from this machine's loopback only
        uvicorn = [c for c in commands if "uvicorn" in c]
        assert uvicorn and "--forwarded-allow-ips=127.0.0.1,::1" in uvicorn[0], uvicorn


def test_a_ctrl_c_while_the_launcher_checks_is_one_line_and_130(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, nothing_starts
) -> None:
    """Ctrl-C while it waits for the database (or imports MLflow): no traceback."""

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(server_module, "check_database", interrupted)
    try:
        code = tracking_main(["server", "--db", f"sqlite:///{tmp_path}/mlflow.db"])
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C came out of the launcher (a traceback)")
    assert (code, capsys.readouterr().err) == (130, "tracking server stopped (interrupted)\n")


@pytest.mark.slow
def test_a_server_that_cannot_bind_fails_the_command(tmp_path: Path) -> None:
    """MLflow's command exits 0 when uvicorn cannot bind; the launcher exits 1, saying so."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = launch(tmp_path, port)
        try:
            status, err = finish(proc)
        finally:
            end(tree(proc.pid), signal.SIGKILL, 30)
    first, *tail = err.splitlines()
    assert status == 1, err
    assert first.startswith("error: the MLflow server exited with status 0 after "), err
    assert first.endswith(f"before it answered; its output: {tmp_path / 'mlflow_server.log'}")
    assert all(line.startswith("  ") for line in tail), err  # the end of its output
    assert "address already in use" in err.lower()


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_a_server_on_bracketed_ipv6_loopback_listens_and_answers_there(tmp_path: Path) -> None:
    port = free_port()
    proc = launch(tmp_path, port, host="[::1]", workers=1)
    try:
        out = printed_until(proc, "Ctrl-C stops the server.")
        assert f"listening on http://[::1]:{port} (checked: nowhere else)" in out
        assert f"the server answers on http://[::1]:{port} after " in out
        with urllib.request.urlopen(f"http://[::1]:{port}/health", timeout=30) as answer:
            assert answer.status == 200
        assert any(c.laddr.ip == "::1" for c in psutil.net_connections("tcp6")
                   if c.status == psutil.CONN_LISTEN and c.laddr.port == port)  # fmt: skip
        proc.send_signal(signal.SIGTERM)
        assert finish(proc) == (143, "tracking server stopped (terminated)\n")
    finally:
        end(tree(proc.pid), signal.SIGKILL, 30)
