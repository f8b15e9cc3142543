"""What the tracking server believes of a request: its client address from X-Forwarded-For only
when a reverse proxy on this machine sent it (no variable widens that), and a bracketed IPv6
--host is the address inside the brackets."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from alpha_rl.tracking.server import plan
from alpha_rl.tracking.server_watch import end, tree
from tests.mlflow_server import free_port
from tests.tracking.test_server import parse, server

PROXY_TRUST = ["FORWARDED_ALLOW_IPS", "UVICORN_FORWARDED_ALLOW_IPS", "UVICORN_PROXY_HEADERS"]


@pytest.mark.parametrize("name", PROXY_TRUST)
def test_a_variable_that_widens_whose_forwarded_address_is_believed_is_refused(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch, nothing_starts
) -> None:
    monkeypatch.setenv(name, "*")
    code, err = server(tmp_path, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {name} set in the environment: could change whose "
                          "X-Forwarded-For it believes"), err  # fmt: skip
    assert "loopback only" in err and err.endswith("unset it\n"), err


def test_gunicorn_options_that_would_trust_any_proxy_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch, nothing_starts
) -> None:
    monkeypatch.setenv("GUNICORN_CMD_ARGS", "--forwarded-allow-ips=*")
    code, err = server(tmp_path, capsys)
    assert code == 2 and err.startswith("error: GUNICORN_CMD_ARGS set in the environment"), err


@pytest.mark.slow
def test_forwarded_allow_ips_stops_the_command_before_anything_starts(tmp_path: Path) -> None:
    """The whole command: exit 2, one line on stderr, no server announced, no store made."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "FORWARDED_ALLOW_IPS": "*"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "alpha_rl.tracking", "server", "--db",
         f"sqlite:///{tmp_path}/mlflow.db", "--artifacts", str(tmp_path / "art"),
         "--port", str(free_port())],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=120)
    finally:  # a server it started regardless, in a process group of its own
        end(tree(proc.pid), signal.SIGKILL, 30)
    assert proc.returncode == 2, out + err
    assert err.startswith("error: FORWARDED_ALLOW_IPS set in the environment: ")
    assert err.count("\n") == 1 and out == "", out + err
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "art").exists()


def test_uvicorn_believes_x_forwarded_for_from_this_machines_loopback_only(
    tmp_path: Path,
) -> None:
    """The launcher writes out uvicorn's trust: a reverse proxy on this machine names the
    client (so a remote request it passes on is not taken for a same-host one), nobody else."""
    from uvicorn.main import main as uvicorn_command

    command, _ = plan(parse(tmp_path), {})
    opts = command[command.index("--uvicorn-opts") + 1]
    parsed = uvicorn_command.make_context("uvicorn", [*shlex.split(opts), "app:app"]).params
    assert parsed["proxy_headers"] is True
    assert parsed["forwarded_allow_ips"] == "127.0.0.1,::1"


def test_a_bracketed_ipv6_host_is_served_at_the_address_inside(
    tmp_path: Path, capsys: pytest.CaptureFixture, nothing_starts
) -> None:
    """`[::1]` is loopback as it was before, and uvicorn is given `::1`, which it can bind;
    brackets around anything but an IPv6 address are refused."""
    command, _ = plan(parse(tmp_path, "--host", "[::1]"), {})
    assert command[command.index("--host") + 1] == "::1"
    for host in ("[localhost]", "[127.0.0.1]", "[::1", "::1]", "[0.0.0.0]"):
        code, err = server(tmp_path, capsys, "--host", host)
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith(f"error: --host {host}: brackets hold an IPv6 address"), err
