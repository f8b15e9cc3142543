"""Stores that would lose data are refused, credentials stay out of runs, and a tracking server
reachable beyond loopback does not start without basic-auth."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from alpha_rl.errors import ConfigError
from alpha_rl.masking import MASK, hide_password, redact, secrets, uri_has_password
from alpha_rl.tracking.__main__ import main as tracking_main
from alpha_rl.tracking.config import check_launcher
from alpha_rl.tracking.server import is_loopback, read_credentials
from alpha_rl.tracking.tracker import open_tracker
from tests.mlflow_server import free_port
from tests.tracking.conftest import make_cfg
from tests.tracking.test_mounts import mountinfo

SLURM = "hydra_plugins.alpha_rl_launcher.slurm.SlurmLauncher"  # hydra/launcher=slurm
JOBLIB = "hydra_plugins.alpha_rl_launcher.local_gpus.LocalGpusLauncher"
BASIC = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


# --- stores a launcher would lose runs in ---


def test_an_sqlite_file_under_a_multi_node_launcher_is_refused(tmp_path: Path) -> None:
    local = mountinfo(tmp_path, [("/", "ext4")])
    shared = mountinfo(tmp_path / "..", [("/", "ext4"), (str(tmp_path), "nfs4")])
    cfg = make_cfg(f"sqlite:///{tmp_path}/mlflow.db")
    with pytest.raises(ConfigError, match=r"nfs4, a network file system.*tracking=server"):
        check_launcher(cfg, SLURM, shared)
    with pytest.raises(ConfigError, match=r"local disk: each node would write its own copy"):
        check_launcher(cfg, SLURM, local)
    # one machine: a network file system is worth a warning, a local disk nothing
    assert "network file system" in check_launcher(cfg, JOBLIB, shared)
    assert check_launcher(cfg, JOBLIB, local) is None
    assert check_launcher(cfg, BASIC, local) is None
    # with a driver named, it is SQLite all the same
    with pytest.raises(ConfigError, match=r"is an SQLite file"):
        check_launcher(make_cfg(f"sqlite+pysqlite:///{tmp_path}/mlflow.db"), SLURM, local)
    # a server or a database server is what a cluster should write through ...
    for uri in ("http://tracking.lab:5000", "postgresql://lab@db.lab/mlflow"):
        assert check_launcher(make_cfg(uri), SLURM, shared) is None
    # ... but not the one on this machine's loopback (the default of tracking=server)
    for uri in ("http://127.0.0.1:5000", "http://localhost:5000"):
        with pytest.raises(ConfigError, match=r"loopback.*MLFLOW_TRACKING_URI"):
            check_launcher(make_cfg(uri), SLURM, local)
        assert check_launcher(make_cfg(uri), JOBLIB, local) is None


@pytest.mark.slow
def test_a_slurm_sweep_into_an_sqlite_file_stops_before_any_job(tmp_path: Path) -> None:
    """The whole command line: the sweep exits 2 naming tracking=server, and nothing is
    submitted (no parent run, no store created)."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "alpha_rl.train", "-m", "hydra/launcher=slurm", "seed=0,1",
         f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"hydra.sweep.dir={tmp_path}/sweep"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    printed = done.stdout + done.stderr
    assert done.returncode == 2, printed[-3000:]
    assert "runs jobs on many nodes" in printed and "tracking=server" in printed
    assert not (tmp_path / "mlflow.db").exists()
    assert not (tmp_path / "sweep" / "mlflow_parent.json").exists()


# --- credentials ---


def test_a_tracking_uri_holding_a_password_is_refused_without_showing_it() -> None:
    for uri in ("postgresql://lab:s3cret-pw@db.lab/mlflow", "http://lab:s3cret-pw@host:5000"):
        with pytest.raises(ConfigError, match="MLFLOW_TRACKING_PASSWORD") as refused:
            make_cfg(uri)
        assert "s3cret-pw" not in str(refused.value) and MASK in str(refused.value)
    assert make_cfg("postgresql://lab@db.lab/mlflow").uri  # a user name alone is fine
    assert not uri_has_password("sqlite:///mlflow.db")


def test_passwords_are_hidden_and_secrets_of_the_environment_masked() -> None:
    assert hide_password("--db postgresql://u:p4ss@h/db and http://a:b@c") == (
        f"--db postgresql://u:{MASK}@h/db and http://a:{MASK}@c"
    )
    assert hide_password("sqlite:////tmp/x@y.db") == "sqlite:////tmp/x@y.db"
    env = {"MLFLOW_TRACKING_PASSWORD": "hunter2-long", "PGPASSWORD": "pg-secret",
           "MLFLOW_TRACKING_USERNAME": "alice", "HOME": "/home/alice",
           "MLFLOW_TRACKING_TOKEN": "x"}  # fmt: skip
    found = secrets(env)
    assert found == ("hunter2-long", "pg-secret")  # longest first; a 1-character value is none
    assert redact("a=hunter2-long b=pg-secret c=/home/alice", found) == (
        f"a={MASK} b={MASK} c=/home/alice"
    )


def test_the_tracker_masks_secrets_in_params_tags_and_text(
    tmp_path: Path, uri: str, client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "the-lab-password")
    tracker = open_tracker(make_cfg(uri, retry_s=0.0, final_retry_s=0.0), tmp_path / "run",
                           run_name="masked")  # fmt: skip
    tracker.log_params({"note": "pw=the-lab-password", "plain": 3})
    tracker.set_tags({"where": "postgresql://u:the-lab-password@h/db"})
    tracker.log_text("token: the-lab-password\n", "config.yaml")
    tracker.finish("FAILED", reason="OperationalError: password the-lab-password refused")
    run = client.get_run(tracker.run_id)
    assert run.data.params == {"note": f"pw={MASK}", "plain": "3"}
    assert run.data.tags["where"] == f"postgresql://u:{MASK}@h/db"
    assert run.data.tags["alpha_rl.failure_reason"] == f"OperationalError: password {MASK} refused"
    text = Path(client.download_artifacts(tracker.run_id, "config.yaml", str(tmp_path))).read_text()
    assert text == f"token: {MASK}\n"


# --- the server launcher ---


def test_loopback_addresses() -> None:
    for host in ("127.0.0.1", "127.0.1.1", "localhost", "::1", "[::1]"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "10.1.2.3", "::", "tracking.lab", "192.168.0.4"):
        assert not is_loopback(host), host


def serve(args: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    code = tracking_main(["server", *args])
    return code, capsys.readouterr().err


def test_a_server_beyond_loopback_needs_basic_auth_and_its_credentials(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = ["--db", f"sqlite:///{tmp_path}/mlflow.db", "--artifacts", str(tmp_path / "art")]
    for host in ("0.0.0.0", "10.0.0.5", "tracking.lab"):
        code, err = serve([*db, "--host", host], capsys)
        assert code == 2 and f"--host {host} reaches beyond this machine: add --auth" in err
    monkeypatch.delenv("MLFLOW_AUTH_ADMIN_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_AUTH_ADMIN_PASSWORD", raising=False)
    code, err = serve([*db, "--host", "0.0.0.0", "--auth"], capsys)
    assert code == 2 and "--auth needs the admin's credentials" in err
    loose = tmp_path / "admin.txt"
    loose.write_text("admin:pw-of-the-admin\n")
    loose.chmod(0o644)
    code, err = serve([*db, "--host", "0.0.0.0", "--auth", "--credentials", str(loose)], capsys)
    assert code == 2 and "others can read it" in err and "chmod 600" in err
    loose.chmod(0o600)
    loose.write_text("admin pw\n")
    code, err = serve([*db, "--auth", "--credentials", str(loose)], capsys)
    assert code == 2 and "expected one line username:password" in err
    code, err = serve(["--db", "http://elsewhere:5000"], capsys)
    assert code == 2 and "not a database URI" in err
    code, err = serve(["--db", "postgresql://lab:pw-on-argv@db/mlflow"], capsys)
    assert code == 2 and "PGPASSWORD" in err and "pw-on-argv" not in err
    for extra in (["--host", "0.0.0.0"], ["--app-name=x"], ["--uvicorn-opts", "--host 0.0.0.0"]):
        code, err = serve([*db, "--", *extra], capsys)
        assert code == 2 and "after --: " in err and "accepted after -- are only" in err, extra


def test_credentials_reach_mlflow_through_its_environment_only(tmp_path: Path) -> None:
    import argparse

    from alpha_rl.tracking.server import add_parser, plan

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    creds = tmp_path / "admin.txt"
    creds.write_text("lab-admin:pw-of-the-admin\n")
    creds.chmod(0o600)
    args = parser.parse_args(["server", "--db", f"sqlite:///{tmp_path}/mlflow.db", "--artifacts",
                              str(tmp_path / "art"), "--host", "0.0.0.0", "--auth",
                              "--credentials", str(creds),
                              "--state-dir", str(tmp_path / "state")])  # fmt: skip
    command, env = plan(args, {"PATH": os.environ["PATH"]})
    assert command[command.index("--app-name") + 1] == "basic-auth"
    assert "pw-of-the-admin" not in " ".join(command)
    assert (env["MLFLOW_AUTH_ADMIN_USERNAME"], env["MLFLOW_AUTH_ADMIN_PASSWORD"]) == (
        "lab-admin", "pw-of-the-admin")  # fmt: skip
    ini = Path(env["MLFLOW_AUTH_CONFIG_PATH"]).read_text()
    assert "pw-of-the-admin" not in ini and "default_permission = EDIT" in ini
    assert env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    key = tmp_path / "state" / "server_secret_key"  # kept for a restart, for its owner only
    assert env["MLFLOW_FLASK_SERVER_SECRET_KEY"] == key.read_text()
    assert key.stat().st_mode & 0o077 == 0
    assert (tmp_path / "state" / "basic_auth.ini").exists()
    assert read_credentials(None, {"MLFLOW_AUTH_ADMIN_USERNAME": "a",
                                   "MLFLOW_AUTH_ADMIN_PASSWORD": "b"}) == ("a", "b")  # fmt: skip


def test_an_unreachable_database_is_named_with_what_to_check(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    url = f"postgresql://lab@127.0.0.1:{free_port()}/mlflow"  # nothing listens there
    code, err = serve(["--db", url, "--artifacts", str(tmp_path / "art")], capsys)
    assert code == 2 and f"--db {url}: cannot connect" in err and "createdb" in err
    code, err = serve(["--db", "postgresql+nodriver://lab@h/db"], capsys)
    assert code == 2 and "SQLAlchemy cannot read it" in err


@pytest.mark.slow
def test_jobs_opening_a_new_sqlite_store_at_once_all_get_it(tmp_path: Path) -> None:
    """Four processes open one new SQLite store together (a sweep's jobs side by side): each
    would create and migrate its schema, and without the lock most fail with 'table ...
    already exists'; they all open it and see one experiment list."""
    code = ("import sys; from alpha_rl.tracking.store import new_client; "
            "new_client(sys.argv[1]).search_experiments(); print('opened')")  # fmt: skip
    uri = f"sqlite:///{tmp_path}/new.db"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, uri],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(4)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-300:] for _, err in results]
    assert all(out.strip() == "opened" for out, _ in results)
