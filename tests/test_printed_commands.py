"""Every command the platform prints for the user to run next, pasted as printed into a fresh
shell (no virtualenv activated, the system's PATH; tests.helpers.paste): a sweep's kill check
and the UI lines of the sweep and of the check, from the project directory; a stopped run's
resume and its UI line, from another directory; an error's upgrade and restore of a store, and
the configuration reference's regeneration. Each runs to its own end (a command that would
serve the UI is run as `make -n` or with --help). The confirmation a search prints and the sync
a run prints are pasted by tests/test_search.py and tests/tracking/test_sync.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from alpha_rl import paths
from alpha_rl.commands import project_venv
from alpha_rl.pipeline.life import checkpoint
from alpha_rl.tracking.store import Store, StoreDown
from alpha_rl.tracking.stores import TrackingReadError, check_store
from tests.bad_stores import make
from tests.helpers import empty_store, paste, seeded_store, wait_for_step

pytestmark = pytest.mark.slow

ROOT = paths.project_root()
ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
LOG_PREFIX = re.compile(r"^(\[[^\]]*\])+\s*(-\s)?")  # `[time][HYDRA] `, `[time][alpha_rl][INFO] - `
UI_LINE = re.compile(r"(?:(?P<make>.+) \(or (?P<alt>.+)\)|(?P<only>.+)), then (?P<link>http\S+)")


def printed(out: str, head: str) -> str:
    """The text after `head` on the one log line (Hydra's or ours) that has it."""
    (line,) = [LOG_PREFIX.sub("", x) for x in out.splitlines() if head in x]
    assert line.startswith(head), line
    return line[len(head) :]


def not_found(done: subprocess.CompletedProcess) -> bool:
    return done.returncode == 127 or "command not found" in done.stdout


def check_ui_line(text: str, where: Path, store: Path) -> None:
    """Both commands of a UI line run pasted in `where`: `make ... ui` as a dry run that would
    serve `store` with the project's Python, mlflow ui with --help."""
    m = UI_LINE.fullmatch(text)
    assert m is not None, text
    mlflow = m["alt"] or m["only"]
    assert (m["make"] is not None) == (project_venv() is not None), text
    if m["make"] is not None:
        assert m["make"].startswith("make ") and " ui" in m["make"], text
        done = paste(m["make"].replace("make ", "make -n ", 1), where)
        assert done.returncode == 0, done.stdout
        assert f"-m alpha_rl.tracking server --db sqlite:///{store} " in done.stdout, done.stdout
    done = paste(f"{mlflow} --help", where)
    assert done.returncode == 0 and "Usage: mlflow ui" in done.stdout, (mlflow, done.stdout)


def test_a_sweeps_kill_check_and_ui_lines_run_as_printed_from_the_project_dir(
    tmp_path: Path,
) -> None:
    store, sweep = tmp_path / "mlflow.db", tmp_path / "sweep"
    done = subprocess.run(
        [sys.executable, "-m", "alpha_rl.train", "-m", "her=on,off", "backend=numpy",
         "debug=tiny", "steps=20", f"tracking.uri=sqlite:///{store}",
         f"hydra.sweep.dir={sweep}"],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    judge = printed(out, "judge it: ")
    if project_venv() is not None:  # from the project's .venv: its make target
        assert judge == f'make kill-check ARGS="--sweep {sweep} --tracking-uri sqlite:///{store}"'
    checked = paste(judge, ROOT)
    assert not not_found(checked), checked.stdout
    # one pair, fewer than min_seeds: the check runs to its verdict, UNDECIDED (exit 2)
    assert checked.returncode == 2, checked.stdout[-3000:]
    verdicts = [x for x in checked.stdout.splitlines() if x.startswith("verdict: ")]
    assert len(verdicts) == 1 and verdicts[0].startswith("verdict: UNDECIDED"), verdicts
    assert list(sweep.glob("kill_check/*/kill_check.json"))
    check_ui_line(printed(out, "its runs in the UI: "), ROOT, store)
    check_ui_line(printed(checked.stdout, "runs in the UI: "), ROOT, store)


def test_a_stopped_runs_resume_and_ui_lines_run_as_printed_from_its_directory(
    tmp_path: Path,
) -> None:
    run_dir, store = tmp_path / "run", tmp_path / "m.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "alpha_rl.train", "backend=numpy", "debug=tiny", "steps=300",
         "checkpoint.every=100", f"tracking.uri=sqlite:///{store}", f"hydra.run.dir={run_dir}"],
        cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    wait_for_step(run_dir, 30, proc)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 143, out[-3000:]
    resume = printed(out, "to continue it: ")
    assert resume.endswith(f"resume={run_dir}") and not resume.startswith("make ")
    stopped_at = json.loads((checkpoint.latest(run_dir) / "meta.json").read_text())["step"]
    assert stopped_at < 300
    resumed = paste(resume, tmp_path)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "run FINISHED after 300 steps" in resumed.stdout
    check_ui_line(printed(resumed.stdout, "every metric in the UI: "), tmp_path, store)


def test_the_upgrade_an_older_store_is_told_to_run_resolves(tmp_path: Path) -> None:
    uri, _ = make("older schema", empty_store(), tmp_path)
    with pytest.raises(TrackingReadError) as refused:
        check_store(uri, "give another")
    (upgrade,) = re.findall(r"run `([^`]+)`", str(refused.value))
    assert upgrade.endswith(f"db upgrade {uri}"), upgrade
    # run for real it would migrate the copy; --help shows the command and its argument resolve
    done = paste(f"{upgrade} --help", tmp_path)
    assert done.returncode == 0 and "Usage: mlflow db upgrade" in done.stdout, done.stdout


def test_the_restore_of_a_deleted_experiment_runs_as_printed(tmp_path: Path) -> None:
    uri = seeded_store(tmp_path / "mlflow.db")
    client = MlflowClient(tracking_uri=uri)
    client.delete_experiment(client.create_experiment("gone"))
    with pytest.raises(StoreDown) as down:
        Store(uri, retry_s=0.0).experiment_id("gone")
    (restore,) = re.findall(r"restore it \(`([^`]+)`\)", str(down.value))
    done = paste(restore, tmp_path)
    assert done.returncode == 0, done.stdout
    assert client.get_experiment_by_name("gone").lifecycle_stage == "active"


def test_the_stale_configuration_reference_is_written_by_the_command_it_names(
    tmp_path: Path,
) -> None:
    page = tmp_path / "configuration.md"
    module = [sys.executable, "-m", "alpha_rl.docsite.config_reference"]
    check = subprocess.run([*module, "--check", "--out", str(page)], cwd=tmp_path, env=ENV,
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert check.returncode == 1, check.stderr
    (again,) = re.findall(r"is stale: run `([^`]+)`", check.stderr)
    done = paste(again, tmp_path)
    assert done.returncode == 0 and page.is_file(), done.stdout
    check = subprocess.run([*module, "--check", "--out", str(page)], cwd=tmp_path, env=ENV,
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert check.returncode == 0, check.stderr
