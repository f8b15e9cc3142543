"""The server launcher says when the server answers and where its UI is, and, should the server
die first, says so naming the file its output went to. A stand-in HTTP server here plays
MLflow's (a real start takes a minute: tests/browser runs one)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from alpha_rl.tracking import server_answer
from alpha_rl.tracking.__main__ import main as tracking_main
from alpha_rl.tracking.server_answer import StartWatch, answers, ui_links
from alpha_rl.tracking.view import VIEW_TAG
from tests.mlflow_server import free_port

EXPERIMENTS = [
    {"experiment_id": "3", "name": "her_study", "tags": [{"key": VIEW_TAG, "value": "{}"}]},
    {"experiment_id": "0", "name": "Default", "tags": []},
    {"experiment_id": "1", "name": "alpha_rl", "tags": [{"key": VIEW_TAG, "value": "{}"}]},
]


@contextmanager
def stand_in(status: int = 200, after_s: float = 0.0) -> Iterator[tuple[str, list[dict]]]:
    """An HTTP server on loopback that refuses connections for `after_s`, then answers /health
    with `status` and the experiments' search with EXPERIMENTS: (its URL, the requests' headers)."""
    port, seen = free_port(), []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(dict(self.headers) | {"path": self.path})
            found = self.path.startswith("/api/2.0/mlflow/experiments/search")
            body = json.dumps({"experiments": EXPERIMENTS} if found else {}).encode()
            self.send_response(200 if found else status)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    holder: list[ThreadingHTTPServer] = []

    def serve() -> None:
        time.sleep(after_s)
        holder.append(ThreadingHTTPServer(("127.0.0.1", port), Handler))
        holder[0].serve_forever(poll_interval=0.05)

    threading.Thread(target=serve, daemon=True).start()
    deadline = time.monotonic() + 10
    while not after_s and not holder and time.monotonic() < deadline:  # bound, unless delayed
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        deadline = time.monotonic() + 10
        while not holder and time.monotonic() < deadline:
            time.sleep(0.05)
        if holder:
            holder[0].shutdown()
            holder[0].server_close()


def test_any_http_answer_counts_and_a_refused_connection_does_not() -> None:
    assert not answers(f"http://127.0.0.1:{free_port()}", timeout_s=1)
    with stand_in(status=401) as (url, _):
        assert answers(url, timeout_s=1)  # the basic-auth app's 401 is an answer


def test_the_wait_is_reported_until_the_server_answers_then_its_links(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(server_answer, "PROGRESS_S", 0.3)
    monkeypatch.setattr(server_answer, "POLL_S", 0.05)
    said: list[float] = []
    with stand_in(after_s=1.0) as (url, _):
        watch = StartWatch(url, said.append)
        watch.begin()
        assert watch.answered.wait(timeout=20)
        watch.stop()
    out = capsys.readouterr().out
    assert out.startswith("waiting for the server to answer (0 s)...\n")
    assert out.count("waiting for the server to answer") >= 2 and len(said) == 1
    assert 0.9 <= said[0] < 20
    watch.ended(0)  # stopped: its exit says nothing
    assert capsys.readouterr().err == ""


def test_a_server_that_dies_first_names_its_output_and_shows_its_end(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    log = tmp_path / "mlflow_server.log"
    log.write_text("".join(f"line {i}\n" for i in range(40)) + "OperationalError: no such table\n")
    watch = StartWatch(f"http://127.0.0.1:{free_port()}", lambda s: None, log)
    watch.begin()
    watch.ended(1)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: the MLflow server exited with status 1 after ")
    assert err[0].endswith(f"s, before it answered; its output: {log}")
    assert err[1:] == [f"  line {i}" for i in range(26, 40)] + ["  OperationalError: no such table"]


def test_a_stopped_server_is_no_error(capsys: pytest.CaptureFixture) -> None:
    watch = StartWatch(f"http://127.0.0.1:{free_port()}", lambda s: None)
    watch.begin()
    watch.silence()  # a forwarded Ctrl-C
    watch.ended(130)
    assert capsys.readouterr().err == ""


def test_the_links_are_the_experiments_with_the_runs_view_then_every_experiment() -> None:
    with stand_in() as (url, seen):
        lines = ui_links(url, "http://ui:5000", ("admin", "pw"))
    assert lines == [
        "her_study: http://ui:5000/#/experiments/3/runs?workflowType=machine_learning"
        "&compareRunsMode=TABLE&viewStateShareKey=alpha_rl_runs",
        "alpha_rl: http://ui:5000/#/experiments/1/runs?workflowType=machine_learning"
        "&compareRunsMode=TABLE&viewStateShareKey=alpha_rl_runs",
        "every experiment: http://ui:5000/#/experiments?workflowType=machine_learning",
    ]
    assert seen[-1]["Authorization"] == "Basic YWRtaW46cHc="  # admin:pw
    assert ui_links(f"http://127.0.0.1:{free_port()}", "http://ui:1") == [
        "every experiment: http://ui:1/#/experiments?workflowType=machine_learning"
    ]


def test_a_log_file_that_cannot_be_written_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subprocess, "Popen", None)  # a start would fail with a traceback
    missing = tmp_path / "no" / "such" / "dir" / "mlflow_server.log"
    code = tracking_main(["server", "--db", f"sqlite:///{tmp_path}/mlflow.db",
                          "--port", "5057", "--log", str(missing)])  # fmt: skip
    said = f"error: --log {missing}: cannot write it (No such file or directory)\n"
    assert (code, capsys.readouterr().err) == (2, said)
