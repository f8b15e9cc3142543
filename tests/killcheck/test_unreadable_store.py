"""A store the kill check cannot read is CANNOT-JUDGE (exit 2) in one line, never KILL (1) and
never a traceback; a missing store is not created, a foreign one not given MLflow's schema."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from alpha_rl.killcheck import cli
from alpha_rl.killcheck.cli import main
from tests.bad_stores import KINDS, PASSWORD, fingerprint, make


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid MLflow store holding one run."""
    path = tmp_path_factory.mktemp("template") / "mlflow.db"
    client = MlflowClient(tracking_uri=f"sqlite:///{path}")
    client.create_run(client.create_experiment("alpha_rl"))
    return path


def kill_check(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `alpha-rl-kill-check argv`, run in this process."""
    with pytest.raises(SystemExit) as stop:
        main(list(argv))
    out, err = capsys.readouterr()
    return stop.value.code, out, err


@pytest.mark.parametrize("kind", KINDS)
def test_a_store_that_cannot_be_read_cannot_be_judged(
    kind: str, template: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    uri, refusal = make(kind, template, store)
    before = fingerprint(store)
    code, out, err = kill_check(capsys, "--tracking-uri", uri, "--out", str(tmp_path / "report"))
    assert code == 2, out + err
    line, verdict = err.splitlines()
    assert line.startswith("alpha-rl-kill-check: ") and refusal in line, line
    assert verdict == "verdict: CANNOT-JUDGE"
    assert "Traceback" not in out + err and PASSWORD not in out + err
    assert fingerprint(store) == before  # nothing created, nothing written
    assert not (tmp_path / "report").exists()


def test_a_missing_store_names_the_option_and_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the default store, sqlite:///mlflow.db, is relative to here
    code, out, err = kill_check(capsys, "--no-write")
    assert code == 2 and "Traceback" not in out + err
    assert err.splitlines()[0] == (
        f"alpha-rl-kill-check: no tracking store at {tmp_path / 'mlflow.db'}: no such file; "
        "give --tracking-uri of an existing MLflow store"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_failure_of_the_check_itself_cannot_judge_rather_than_kill(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(args: object) -> int:
        raise RuntimeError("a bug in the check")

    monkeypatch.setattr(cli, "run", broken)
    code, _, err = kill_check(capsys, "--no-write")
    assert code == 2  # never 1, which would say a treatment was killed
    assert "RuntimeError: a bug in the check" in err  # a bug keeps its traceback
    assert err.splitlines()[-1] == "verdict: CANNOT-JUDGE"


class _Refusing(http.server.BaseHTTPRequestHandler):
    """A tracking server that wants credentials the check was not given."""

    def do_GET(self) -> None:
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="mlflow"')
        self.end_headers()
        self.wfile.write(b"You are not authenticated.")

    do_POST = do_GET  # noqa: N815 (http.server's name)

    def log_message(self, *args: object) -> None:
        pass


def test_a_server_that_refuses_the_credentials_says_which_to_set(
    capsys: pytest.CaptureFixture,
) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        code, out, err = kill_check(capsys, "--tracking-uri", url, "--no-write")
    finally:
        server.shutdown()
    assert code == 2 and "Traceback" not in out + err
    assert err.splitlines() == [
        f"alpha-rl-kill-check: tracking server {url} refused the request to read experiment "
        "'alpha_rl' (UNAUTHENTICATED): set MLFLOW_TRACKING_USERNAME and _PASSWORD to an account "
        "that may read it",
        "verdict: CANNOT-JUDGE",
    ]


def test_a_database_that_does_not_exist_is_no_store_not_a_server_down(
    capsys: pytest.CaptureFixture, postgres
) -> None:
    uri = postgres.database_uri("no_such_database")  # the server answers: the database is gone
    code, out, err = kill_check(capsys, "--tracking-uri", uri, "--no-write")
    assert code == 2 and "Traceback" not in out + err
    line = err.splitlines()[0]
    assert 'has no such database or role (database "no_such_database" does not exist)' in line
    assert "create it (createdb, createuser)" in line and "trying again later" not in line


@pytest.mark.parametrize(
    ("record", "says"),
    [
        (None, "--sweep {sweep}: no mlflow_parent.json there (not a multirun directory?)"),
        ("{not json", "{sweep}/mlflow_parent.json cannot be read (JSONDecodeError: "),
        ('{"uri": "sqlite:///mlflow.db"}', "{sweep}/mlflow_parent.json cannot be read (KeyError: "),
    ],
)
def test_a_sweep_without_a_readable_parent_record_is_one_line(
    record: str | None, says: str, template: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    if record is not None:
        (sweep / "mlflow_parent.json").write_text(record)
    args = ("--tracking-uri", f"sqlite:///{template}", "--sweep", str(sweep), "--no-write")
    code, out, err = kill_check(capsys, *args)
    assert code == 2 and "Traceback" not in out + err
    line, verdict = err.splitlines()
    assert line.startswith(f"alpha-rl-kill-check: {says.format(sweep=sweep)}"), line
    assert verdict == "verdict: CANNOT-JUDGE"
