"""Dead runs: found by their silent heartbeat (or old start time), listed and ended FAILED."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from alpha_rl.tracking.__main__ import main
from alpha_rl.tracking.parent import SWEEP_TAG
from alpha_rl.tracking.reap import (
    FROM_HEARTBEAT,
    FROM_START,
    HEARTBEAT,
    HOST_TAG,
    PID_TAG,
    RESUME_TAG,
    find_dead,
    format_duration,
    mark_dead,
    parse_duration,
)
from alpha_rl.tracking.tracker import REASON_TAG
from tests.bad_stores import KINDS, PASSWORD, fingerprint, make

HOUR_MS = 3_600_000
NOBODY = 65534  # the user and group id of nobody


@dataclass(frozen=True)
class Store:
    """A store holding one run of each kind, with the time they are judged at."""

    uri: str
    client: MlflowClient
    now: float
    live: str
    dead: str
    finished: str
    old_style: str
    parent: str
    other: str  # an old-style run in a second experiment


@pytest.fixture
def store(uri: str, client: MlflowClient) -> Store:
    now = time.time()
    ms = int(now * 1000)
    main_id = client.create_experiment("alpha_rl")
    other_id = client.create_experiment("other")

    def run(name: str, start_ms: int, tags: dict[str, str] | None = None, eid: str = main_id):
        return client.create_run(eid, start_time=start_ms, tags=tags, run_name=name).info.run_id

    live = run("live", ms - 2 * HOUR_MS, {HOST_TAG: "gpu-1", PID_TAG: "11"})
    client.log_metric(live, HEARTBEAT, now - 3 * 3600, timestamp=ms - 3 * HOUR_MS, step=1)
    client.log_metric(live, HEARTBEAT, now - 60, timestamp=ms - 60_000, step=2)
    dead_tags = {
        HOST_TAG: "gpu-2",
        PID_TAG: "4242",
        "alpha_rl.run_dir": "/runs/dead",
        RESUME_TAG: "make train ARGS=resume=/runs/dead",
    }
    dead = run("dead", ms - 3 * HOUR_MS, dead_tags)
    client.log_metric(dead, HEARTBEAT, now - 2 * 3600, timestamp=ms - 2 * HOUR_MS, step=1)
    client.log_metric(dead, HEARTBEAT, now - 3600, timestamp=ms - HOUR_MS, step=2)
    finished = run("finished", ms - 5 * HOUR_MS)
    client.set_terminated(finished, "FINISHED", end_time=ms - 4 * HOUR_MS)
    old_style = run("old-style", ms - 30 * HOUR_MS, {"alpha_rl.run_dir": "/runs/old"})
    client.log_metric(old_style, "loss/l_q", 0.5, timestamp=ms - 29 * HOUR_MS, step=1)
    parent = run("sweep", ms - 40 * HOUR_MS, {SWEEP_TAG: "/multirun/2024-05-01/12-30-00"})
    other = run("elsewhere", ms - 6 * HOUR_MS, eid=other_id)
    return Store(uri, client, now, live, dead, finished, old_style, parent, other)


def _status(client: MlflowClient, run_id: str) -> str:
    return client.get_run(run_id).info.status


def test_find_dead_returns_exactly_the_silent_runs(store: Store) -> None:
    dead = find_dead(store.uri, 600, now=store.now)
    assert [d.run_id for d in dead] == [store.old_style, store.other, store.dead]  # oldest first

    by_id = {d.run_id: d for d in dead}
    beat = by_id[store.dead]
    assert (beat.run_name, beat.experiment, beat.run_dir) == ("dead", "alpha_rl", "/runs/dead")
    assert (beat.host, beat.pid) == ("gpu-2", "4242")
    assert beat.resume_command == "make train ARGS=resume=/runs/dead"
    assert (beat.last_heartbeat, beat.source) == (store.now - 3600, FROM_HEARTBEAT)

    old = by_id[store.old_style]
    assert (old.source, old.host, old.pid, old.resume_command) == (FROM_START, None, None, None)
    assert old.last_heartbeat == pytest.approx(store.now - 30 * 3600, abs=0.01)
    assert old.run_dir == "/runs/old"
    assert by_id[store.other].experiment == "other"


def test_find_dead_narrows_to_one_experiment_and_the_threshold(store: Store) -> None:
    only = find_dead(store.uri, 600, experiment="alpha_rl", now=store.now)
    assert [d.run_id for d in only] == [store.old_style, store.dead]
    assert [d.run_id for d in find_dead(store.uri, 2 * 3600, now=store.now)] == [
        store.old_style,
        store.other,
    ]
    assert find_dead(store.uri, 50 * 3600, now=store.now) == []


def test_mark_dead_ends_them_failed_and_leaves_the_others(store: Store) -> None:
    dead = find_dead(store.uri, 600, now=store.now)
    mark_dead(store.uri, dead)

    client = store.client
    for d in dead:
        run = client.get_run(d.run_id)
        assert run.info.status == "FAILED"
        assert run.info.end_time == int(d.last_heartbeat * 1000)
    beat = client.get_run(store.dead)
    expected = "no heartbeat since " + time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(store.now - 3600)
    )
    assert beat.data.tags[REASON_TAG] == expected + " (host gpu-2, pid 4242)"
    assert beat.data.tags[RESUME_TAG] == "make train ARGS=resume=/runs/dead"
    old = client.get_run(store.old_style).data.tags
    assert old[REASON_TAG].endswith("(host ?, pid ?); none logged: its start time")
    assert RESUME_TAG not in old
    assert _status(client, store.live) == "RUNNING"
    assert _status(client, store.parent) == "RUNNING"
    assert _status(client, store.finished) == "FINISHED"
    assert find_dead(store.uri, 600, now=store.now) == []


def test_reap_command_lists_then_marks(store: Store, capsys: pytest.CaptureFixture) -> None:
    assert main(["reap", "--uri", store.uri, "--older-than", "10m"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    old = re.escape(f"{store.old_style} 'old-style' (experiment 'alpha_rl') on host ? pid ?: ")
    old += r"no heartbeat logged, started 1d06h ago; run dir /runs/old; resume: \?"
    assert re.fullmatch(old, lines[0])
    assert lines[1].startswith(f"{store.other} 'elsewhere' (experiment 'other')")
    dead = re.escape(f"{store.dead} 'dead' (experiment 'alpha_rl') on host gpu-2 pid 4242: ")
    dead += (
        r"no heartbeat for 1h(0\dm)?; run dir /runs/dead; resume: make train ARGS=resume=/runs/dead"
    )
    assert re.fullmatch(dead, lines[2])
    assert lines[3].startswith("3 dead run(s) in ") and "they stay RUNNING" in lines[3]
    assert _status(store.client, store.dead) == "RUNNING"

    assert main(["reap", "--uri", store.uri, "--older-than", "10m", "--mark"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("ended them FAILED")
    for run_id in (store.dead, store.old_style, store.other):
        assert _status(store.client, run_id) == "FAILED"
    assert _status(store.client, store.live) == "RUNNING"

    assert main(["reap", "--uri", store.uri]) == 0
    assert capsys.readouterr().out.startswith(f"no dead runs in {store.uri}")


def test_reap_command_reads_the_environment_and_one_experiment(
    store: Store, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.uri)
    assert main(["reap", "--older-than", "2h", "--experiment", "other"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == [store.other]
    assert lines[-1].startswith(f"1 dead run(s) in {store.uri}, experiment 'other'")


def test_reap_command_refuses_what_it_cannot_read(
    uri: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["reap", "--uri", uri, "--experiment", "nope"]) == 2
    assert "has no experiment 'nope'" in capsys.readouterr().err
    missing = tmp_path / "typo" / "mlflow.db"
    assert main(["reap", "--uri", f"sqlite:///{missing}"]) == 2
    assert capsys.readouterr().err == (
        f"error: no tracking store at {missing}: no such file; give --uri (or "
        "MLFLOW_TRACKING_URI) of an existing MLflow store\n"
    )
    assert not missing.parent.exists()  # not created as an empty store


@pytest.mark.parametrize("mark", [False, True], ids=["list", "mark"])
@pytest.mark.parametrize("kind", KINDS)
def test_reap_refuses_a_store_it_cannot_read_in_one_line(
    kind: str, mark: bool, empty_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    uri, refusal = make(kind, empty_store, tmp_path)
    before = fingerprint(tmp_path)
    assert main(["reap", "--uri", uri, *(["--mark"] if mark else [])]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and refusal in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err and PASSWORD not in err
    assert fingerprint(tmp_path) == before  # nothing created, nothing written


def _as_nobody(argv: list[str]) -> tuple[int, str]:
    """(exit status, stderr) of `main(argv)` in a child process of this one as the user nobody
    (root reads any file whatever its mode)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                code = main(argv)
            os.write(write, json.dumps([code, err.getvalue()]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    code, err = json.loads(data)
    return code, err


def test_reap_refuses_a_store_it_may_not_read(
    empty_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    store = tmp_path / "mlflow.db"
    shutil.copyfile(empty_store, store)
    store.chmod(0)
    argv = ["reap", "--uri", f"sqlite:///{store}"]
    if os.geteuid() == 0:
        code, err = _as_nobody(argv)
    else:
        code, err = main(argv), capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"error: tracking store {store} cannot be opened ([Errno 13] "
                          "Permission denied: ")  # fmt: skip
    assert err.endswith("give yourself read and write access to the file and its folder (or "
                        "work on a copy)\n")  # fmt: skip
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("text", ["10", "10x", "-5m", "0s", "m", "1.5.2h", ""])
def test_a_bad_duration_exits_2(text: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["reap", f"--older-than={text}"])
    assert stop.value.code == 2
    assert "is not a duration: give a positive number with a unit s, m, h or d" in (
        capsys.readouterr().err
    )


def test_durations_read_and_print() -> None:
    assert [parse_duration(t) for t in ("90s", "10m", "2h", "1d", "1.5h", " 3m ")] == [
        90,
        600,
        7200,
        86400,
        5400,
        180,
    ]
    assert [format_duration(s) for s in (0, 45, 570, 3600, 3900, 93600, -3)] == [
        "0s",
        "45s",
        "9m30s",
        "1h",
        "1h05m",
        "1d02h",
        "0s",
    ]
