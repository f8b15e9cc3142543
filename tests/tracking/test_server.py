"""The tracking-server launcher decides where the server listens: options after `--` pass from an
allow-list only, variables that could move it are refused, the accounts' state is private, and a
server found listening anywhere but where it was announced is stopped with its whole tree."""

from __future__ import annotations

import argparse
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from base64 import b64encode
from pathlib import Path

import psutil
import pytest

from alpha_rl.tracking.__main__ import main as tracking_main
from alpha_rl.tracking.server import add_parser, plan
from alpha_rl.tracking.server_checks import ServerError
from alpha_rl.tracking.server_watch import Announced, ended, ip, run_watched, tree
from tests.mlflow_server import TrackingServer, free_port


def server(tmp_path: Path, capsys: pytest.CaptureFixture, *extra: str) -> tuple[int, str]:
    """`python -m alpha_rl.tracking server` over SQLite on loopback, in this process: (exit
    status, what it printed)."""
    code = tracking_main(["server", "--db", f"sqlite:///{tmp_path}/mlflow.db", "--artifacts",
                          str(tmp_path / "art"), "--host", "127.0.0.1", "--port", "5056",
                          *extra])  # fmt: skip
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, err


# (what follows `--`, the piece of the one line that names it)
REFUSED = [
    (["-h", "0.0.0.0"], "after --: -h: this command sets it itself, use its own --host"),
    (["-h0.0.0.0"], "after --: -h0.0.0.0: this command sets it itself, use its own --host"),
    (["-h=0.0.0.0"], "after --: -h=0.0.0.0: this command sets it itself"),
    (["--host", "0.0.0.0"], "after --: --host: this command sets it itself"),
    (["--host=0.0.0.0"], "after --: --host=0.0.0.0: this command sets it itself"),
    (["--ho", "0.0.0.0"], "after --: --ho: not passed on to mlflow server"),
    (["--ho=0.0.0.0"], "after --: --ho=0.0.0.0: not passed on"),
    (["-p", "6000"], "after --: -p: this command sets it itself, use its own --port"),
    (["-p6000"], "after --: -p6000: this command sets it itself, use its own --port"),
    (["--port=6000"], "after --: --port=6000: this command sets it itself"),
    (["--po", "6000"], "after --: --po: not passed on"),
    (["-wh", "0.0.0.0"], "after --: -wh: this command sets it itself, use its own --workers"),
    (["-hp", "0.0.0.0"], "after --: -hp: this command sets it itself, use its own --host"),
    (["--gunicorn-opts", "-b 0.0.0.0:9"], "after --: --gunicorn-opts: not passed on"),
    (["--uvicorn-opts=--uds /tmp/s"], "after --: --uvicorn-opts=--uds /tmp/s: not passed on"),
    (["--uvicorn-opts", ""], "after --: --uvicorn-opts: not passed on"),
    (["--waitress-opts", "--listen=*:9"], "after --: --waitress-opts: not passed on"),
    (["--dev"], "after --: --dev: not passed on"),
    (["--disable-security-middleware"], "after --: --disable-security-middleware: not passed"),
    (["--disable-security"], "after --: --disable-security: not passed on"),
    (
        ["--app-name", "basic-auth"],
        "after --: --app-name: this command sets it itself, use its own --auth",
    ),
    (["--app=basic-auth"], "after --: --app=basic-auth: not passed on"),
    (
        ["--backend-store-uri=postgresql://u:pw@h/db"],
        "this command sets it itself, use its own --db",
    ),
    (["--artifacts-destination", "/tmp/x"], "after --: --artifacts-destination: this command"),
    (["--allowed-hosts", "*"], "after --: --allowed-hosts: this command sets it itself"),
    (["stray"], "after --: stray: not passed on"),
    (["--"], "after --: --: not passed on"),
    (["--static-prefix", "/api"], "after --: --static-prefix: not passed on"),
    (["--x-frame-options", "DENY", "--host", "0.0.0.0"], "after --: --host: this command"),
    (["--x-frame-options"], "after --: --x-frame-options: needs a value"),
    (
        ["--x-frame-options", "--host=0.0.0.0"],
        "after --: --x-frame-options --host=0.0.0.0: needs a value (one not starting with -)",
    ),
    (["--cors-allowed-origins", "*"], "after --: --cors-allowed-origins *: '*' lets websites"),
    (["--cors-allowed-origins=https://lab.example.org,http://*"], "'http://*' lets websites"),
    (["--cors-allowed-origins", "https://*.com"], "'https://*.com' lets websites nobody named"),
    (["--cors-allowed-origins", "null"], "'null' lets any sandboxed page send requests"),
    (["--x-frame-options", "NONE"], "after --: --x-frame-options NONE: only SAMEORIGIN or DENY"),
    (["--secrets-cache-ttl", "ten"], "after --: --secrets-cache-ttl ten: expected a whole"),
    (["--secrets-cache-max-size=²"], "after --: --secrets-cache-max-size ²: expected a whole"),
]


@pytest.mark.parametrize(("extra", "named"), REFUSED, ids=[" ".join(e) for e, _ in REFUSED])
def test_every_option_after_dashes_but_the_allowed_ones_is_refused_before_anything_starts(
    extra: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture, nothing_starts
) -> None:
    code, err = server(tmp_path, capsys, "--", *extra)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: after --: "), err
    assert named in err, err
    assert "pw@" not in err  # a password in a refused option is not shown


def test_the_allowed_options_after_dashes_reach_mlflow_server(tmp_path: Path) -> None:
    allowed = ["--cors-allowed-origins", "https://lab.example.org,https://ui.lab.example.org",
               "--x-frame-options=DENY", "--secrets-cache-ttl=30",
               "--secrets-cache-max-size", "500"]  # fmt: skip
    hosts = "tracking.lab.example.org,*.lab.example.org,*.lab.example.org:5000,10.0.0.5,[::1]:5000"
    args = parse(tmp_path, "--allowed-hosts", hosts, "--", *allowed)
    args.mlflow_args = args.mlflow_args[1:]
    command, _ = plan(args, {})
    assert command[-len(allowed) :] == allowed
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert command.count("--host") == 1 and "-h" not in command


def test_an_allowed_host_that_lets_in_anyone_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture, nothing_starts
) -> None:
    for hosts in ("*", "tracking.lab,*:5000", "*.*", "*.com", "*.com:5000", "10.*.*.*",
                  "172.32.*", "8.8.*", "lab.*.org",
                  # fnmatch's other globs, and a `*` anywhere but one leading `*.`: `10.*`
                  # matches 10.rebind.example too
                  "*.??????.???", "track?ng.lab", "*.lab.[a-z]xample.org", "[!x]*.lab.org",
                  "10.*", "192.168.*", "172.20.*:5000", "*.lab.example.org:*", "[::1]:*",
                  "[lab.org]"):  # fmt: skip
        code, err = server(tmp_path, capsys, "--allowed-hosts", hosts)
        assert code == 2 and err.count("\n") == 1, err
        assert f"--allowed-hosts {hosts}: " in err and "lets in Host headers nobody" in err, err


ENVIRONMENT = ["MLFLOW_HOST", "MLFLOW_PORT", "MLFLOW_GUNICORN_OPTS", "MLFLOW_UVICORN_OPTS",
               "MLFLOW_SERVER_DISABLE_SECURITY_MIDDLEWARE", "MLFLOW_SERVER_ALLOWED_HOSTS",
               "MLFLOW_SERVER_CORS_ALLOWED_ORIGINS", "MLFLOW_SERVER_X_FRAME_OPTIONS",
               "MLFLOW_BASIC_AUTH_FAIL_CLOSED", "MLFLOW_SERVER_ENABLE_GRAPHQL_AUTH",
               "MLFLOW_AUTH_CONFIG_PATH", "UVICORN_FD", "UVICORN_HOST", "UVICORN_ENV_FILE",
               "GUNICORN_CMD_ARGS", "MLFLOW_STATIC_PREFIX", "MLFLOW_EXPOSE_PROMETHEUS",
               "MLFLOW_ARTIFACTS_ONLY", "MLFLOW_SERVE_ARTIFACTS", "MLFLOW_DEFAULT_ARTIFACT_ROOT",
               "MLFLOW_REGISTRY_STORE_URI", "MLFLOW_WORKSPACE_STORE_URI",
               "_MLFLOW_SERVER_SECRET_KEY"]  # fmt: skip


@pytest.mark.parametrize("name", ENVIRONMENT)
def test_a_variable_that_could_move_the_server_or_loosen_its_auth_is_refused(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch, nothing_starts
) -> None:
    monkeypatch.setenv(name, "0.0.0.0")
    code, err = server(tmp_path, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert f"error: {name} set in the environment: could change where the server listens" in err
    assert "unset it" in err


# --- the accounts' state ---


def parse(tmp_path: Path, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["server", "--db", f"sqlite:///{tmp_path}/mlflow.db",
                              "--artifacts", str(tmp_path / "art"), *argv])  # fmt: skip


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


AUTH_ENV = {"MLFLOW_AUTH_ADMIN_USERNAME": "lab-admin", "MLFLOW_AUTH_ADMIN_PASSWORD": "pw-1234"}


def test_the_accounts_database_is_made_600_in_a_700_directory_before_mlflow_opens_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    plan(parse(tmp_path, "--auth", "--state-dir", str(state)), dict(AUTH_ENV))
    assert mode(state) == 0o700
    for name in ("basic_auth.db", "basic_auth.ini", "server_secret_key"):
        assert mode(state / name) == 0o600, name
    assert (state / "basic_auth.db").stat().st_size == 0  # made here, MLflow fills it
    # one an earlier launcher left readable is tightened, with a warning
    (state / "basic_auth.db").chmod(0o644)
    plan(parse(tmp_path, "--auth", "--state-dir", str(state)), dict(AUTH_ENV))
    assert mode(state / "basic_auth.db") == 0o600
    assert "basic_auth.db: others could read it (mode 644); now 600" in caplog.text
    # so is one named by --auth-db
    elsewhere = tmp_path / "accounts.db"
    elsewhere.touch(mode=0o666)
    elsewhere.chmod(0o664)
    plan(parse(tmp_path, "--auth", "--state-dir", str(state), "--auth-db",
               f"sqlite:///{elsewhere}"), dict(AUTH_ENV))  # fmt: skip
    assert mode(elsewhere) == 0o600
    # but not in a directory others can enter (they could plant a journal SQLite replays)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(ServerError, match=rf"--auth-db {shared}: others can enter it \(mode 777\)"):
        plan(parse(tmp_path, "--auth", "--state-dir", str(state), "--auth-db",
                   f"sqlite:///{shared}/accounts.db"), dict(AUTH_ENV))  # fmt: skip
    assert not (shared / "accounts.db").exists()


def test_a_state_directory_others_can_enter_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch, nothing_starts
) -> None:
    state = tmp_path / "shared"
    state.mkdir()
    state.chmod(0o755)
    for name, value in AUTH_ENV.items():
        monkeypatch.setenv(name, value)
    code, err = server(tmp_path, capsys, "--auth", "--state-dir", str(state))
    assert code == 2 and err.count("\n") == 1, err
    assert f"--state-dir {state}: others can enter it (mode 755)" in err
    assert f"chmod 700 {state}" in err
    assert mode(state) == 0o755 and not (state / "basic_auth.db").exists()


# --- the watch over the started server ---


def test_listeners_are_compared_by_resolved_address_ipv4_and_ipv6_loopback_alike() -> None:
    loopback = Announced.resolve("127.0.0.1", 5000)
    assert loopback.admits(ip("127.0.0.1"), 5000) and loopback.admits(ip("::1"), 5000)
    assert loopback.admits(ip("::ffff:127.0.0.1"), 5000)
    assert not loopback.admits(ip("127.0.0.1"), 5001)
    for anywhere in ("0.0.0.0", "::", "192.0.2.2", "::ffff:192.0.2.2"):
        assert not loopback.admits(ip(anywhere), 5000), anywhere
    assert Announced.resolve("localhost", 5000).admits(ip("127.0.0.1"), 5000)
    everywhere = Announced.resolve("0.0.0.0", 5000)
    assert everywhere.admits(ip("0.0.0.0"), 5000) and not everywhere.admits(ip("::"), 5000)
    assert str(Announced.resolve("::1", 5000)) == "http://[::1]:5000"


def stand_in(bind: str, port: int, pids: Path, *, exit_after_s: float, code: int = 0) -> list[str]:
    """A stand-in for `mlflow server`: a worker of its own that ignores SIGHUP (as uvicorn's
    supervisor does), a listener on (bind, port), both pids written to `pids`, then it exits
    `code` after exit_after_s."""
    worker = ("import pathlib, signal, sys, time; signal.signal(signal.SIGHUP, signal.SIG_IGN); "
              "pathlib.Path(sys.argv[1]).touch(); time.sleep(120)")  # fmt: skip
    script = f"""
import os, pathlib, socket, subprocess, sys, time
ready = pathlib.Path({str(pids)!r} + ".ready")
worker = subprocess.Popen([sys.executable, "-c", {worker!r}, str(ready)])
while not ready.exists():
    time.sleep(0.02)
s = socket.socket()
s.bind(({bind!r}, {port}))
s.listen()
pathlib.Path({str(pids)!r}).write_text(f"{{os.getpid()}} {{worker.pid}}")
time.sleep({exit_after_s})
sys.exit({code})
"""
    return [sys.executable, "-c", script]


def listeners(port: int) -> list:
    """The sockets listening on `port` on this machine. (Binding the port is no test of it:
    another test's connection may take a freed port as its ephemeral one at once.)"""
    return [c for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port]  # fmt: skip


def gone(pid: int) -> bool:
    try:
        return ended(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return True


def test_a_server_listening_beyond_where_it_was_announced_is_stopped_with_its_tree(
    tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    port, pids = free_port(), tmp_path / "pids"
    command = stand_in("0.0.0.0", port, pids, exit_after_s=60)
    code = run_watched(command, {"PATH": os.environ["PATH"]}, Announced.resolve("127.0.0.1", port))
    out, err = capfd.readouterr()
    assert code == 2 and "listening on" not in out and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"error: stopped the tracking server: it listens on 0.0.0.0:{port} ")
    assert f"not only on the announced http://127.0.0.1:{port}" in err
    server_pid, worker_pid = map(int, pids.read_text().split())
    assert gone(server_pid) and gone(worker_pid)
    assert not listeners(port)  # the port is free again


def test_the_launcher_forwards_a_signal_and_leaves_nothing_of_the_server_behind(
    tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    """SIGHUP to the launcher ends the server's whole group, passed on as SIGTERM (its worker
    ignores SIGHUP, as uvicorn's supervisor does): exit 128 + 1, one line."""
    port, pids = free_port(), tmp_path / "pids"
    command = stand_in("127.0.0.1", port, pids, exit_after_s=60)

    def hang_up() -> None:
        while not pids.exists() or pids.stat().st_size == 0:
            time.sleep(0.05)
        time.sleep(1.0)  # past the launcher's first look at its sockets
        os.kill(os.getpid(), signal.SIGHUP)

    before = signal.getsignal(signal.SIGHUP)
    threading.Thread(target=hang_up, daemon=True).start()
    code = run_watched(command, {"PATH": os.environ["PATH"]}, Announced.resolve("127.0.0.1", port))
    out, err = capfd.readouterr()
    assert code == 128 + signal.SIGHUP and err == "tracking server stopped (hung up)\n", err
    assert f"listening on http://127.0.0.1:{port} (checked: nowhere else)" in out
    server_pid, worker_pid = map(int, pids.read_text().split())
    assert gone(server_pid) and gone(worker_pid)
    assert signal.getsignal(signal.SIGHUP) == before


def test_the_launcher_exits_with_the_status_of_the_server(tmp_path: Path, capfd) -> None:
    port, pids = free_port(), tmp_path / "pids"
    command = stand_in("127.0.0.1", port, pids, exit_after_s=1.5, code=3)
    code = run_watched(command, {"PATH": os.environ["PATH"]}, Announced.resolve("127.0.0.1", port))
    assert code == 3 and "listening on" in capfd.readouterr().out
    assert all(gone(int(pid)) for pid in pids.read_text().split())  # its worker too


def _status(url: str, user: str | None = None, password: str | None = None) -> int:
    request = urllib.request.Request(f"{url}/api/2.0/mlflow/experiments/search?max_results=1")
    if user is not None:
        request.add_header("Authorization", "Basic " + b64encode(f"{user}:{password}".encode())
                           .decode())  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.slow
def test_a_real_server_passes_the_listening_check_and_keeps_its_accounts_private(
    tmp_path: Path,
) -> None:
    """One real start: basic-auth over SQLite on loopback. The launcher says where it checked
    the server listens and that it answers, strangers get 401, the accounts' database is 600 in
    a 700 directory, and kill() leaves no process of it and its port free."""
    creds = tmp_path / "admin.txt"
    creds.write_text("lab-admin:pw-of-the-admin\n")
    creds.chmod(0o600)
    server = TrackingServer(f"sqlite:///{tmp_path}/mlflow.db", tmp_path, credentials=creds,
                            workers=2)  # fmt: skip
    try:
        server.start()
        links = f"  every experiment: http://127.0.0.1:{server.port}/#/experiments?"
        deadline = time.monotonic() + 60  # the launcher's own requests may come after ours
        while links not in server.log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        log = server.log_path.read_text()
        assert f"listening on http://127.0.0.1:{server.port} (checked: nowhere else)" in log
        assert f"the server answers on http://127.0.0.1:{server.port} after " in log
        assert links in log
        assert _status(server.url) == 401
        assert _status(server.url, "lab-admin", "pw-of-the-admin") == 200
        state = tmp_path / "mlflow_server"
        assert mode(state) == 0o700 and mode(state / "basic_auth.db") == 0o600
        assert (state / "basic_auth.db").stat().st_size > 0  # MLflow's tables in the file
        procs = tree(server._proc.pid)
        assert len(procs) >= 4  # the launcher, mlflow server, uvicorn, its workers
    finally:
        server.kill()
    assert all(gone(p.pid) for p in procs)
    assert not listeners(server.port)
    assert "Traceback" not in server.log_path.read_text()


THREAD_EXIT = {"x86_64": 60, "aarch64": 93}.get(os.uname().machine)  # SYS_exit: one thread


@pytest.mark.skipif(THREAD_EXIT is None, reason="the thread-exit syscall's number is known here "
                    "for x86_64 and aarch64 only")  # fmt: skip
def test_a_zombie_whose_threads_still_hold_a_socket_has_not_ended(tmp_path: Path) -> None:
    """A process whose first thread exited is a zombie while its other threads run on and keep
    its sockets (as a SIGKILLed server's may for a moment): not ended until its last thread is."""
    script = f"""
import ctypes, socket, sys, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
threading.Thread(target=sys.stdin.read).start()
print(s.getsockname()[1], flush=True)
ctypes.CDLL(None).syscall({THREAD_EXIT}, 0)
"""
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        port, proc = int(child.stdout.readline()), psutil.Process(child.pid)
        deadline = time.monotonic() + 30
        while proc.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.status() == psutil.STATUS_ZOMBIE and listeners(port)
        assert not ended(proc)
        child.stdin.close()  # the reading thread, the last one, returns
        deadline = time.monotonic() + 30
        while not ended(proc) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ended(proc) and not listeners(port)
    finally:
        child.kill()
        child.wait()


def test_mlflow_s_own_telemetry_session_in_the_environment_is_not_a_switch() -> None:
    """A process that imported MLflow has its telemetry session id in its environment, which a
    server started from it inherits: no switch of the server's, so not refused; any other of
    MLflow's internal variables is."""
    from alpha_rl.tracking.server_checks import ServerError, check_environment

    check_environment({"_MLFLOW_TELEMETRY_SESSION_ID": "0f3a"})
    with pytest.raises(ServerError, match="_MLFLOW_SERVER_SECRET_KEY set in the environment"):
        check_environment({"_MLFLOW_TELEMETRY_SESSION_ID": "0f3a",
                           "_MLFLOW_SERVER_SECRET_KEY": "x"})  # fmt: skip
