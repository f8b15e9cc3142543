"""`make dashboard` on a real search's journal, opened in headless Chromium: a numpy search of 3
trials x 3 seeds (one instance at a time, so each trial's margins are intermediate values by seed),
then the dashboard's link as printed, the study's page with its trials and their intermediate
values. Saves the picture in the test's directory and, when every check passed, as
docs/img/optuna_dashboard.png."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from alpha_rl import paths
from alpha_rl.search.storage import JOURNAL, open_storage
from tests.conftest import required_tool

pytestmark = [pytest.mark.browser, pytest.mark.slow]

DOCS_SHOT = paths.project_root() / "docs" / "img" / "optuna_dashboard.png"
ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}


def server_left(group: int) -> bool:
    """Whether a process of the process group `group` is still alive (zombies aside)."""
    import psutil

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = []
        for p in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(p.pid) == group and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except (ProcessLookupError, psutil.Error):
                continue
        if not alive:
            return False
        time.sleep(0.2)
    return True


def printed_link(proc: subprocess.Popen, timeout_s: float = 120.0) -> str:
    """The dashboard's link, the line it prints once it listens."""
    deadline = time.monotonic() + timeout_s
    seen = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen.append(line)
        found = re.search(r"^  dashboard: (http://\S+)$", line)
        if found:
            return found.group(1)
    raise AssertionError(f"no link from the dashboard: {''.join(seen)[-3000:]}")


def test_the_dashboard_shows_a_searchs_trials_and_their_values_by_seed(tmp_path: Path) -> None:
    executable = required_tool("CHROMIUM", "chromium", ".ci/run installs Debian's chromium")
    from playwright.sync_api import expect, sync_playwright

    search = subprocess.run(
        [sys.executable, "-m", "alpha_rl.train", "-m", "hparams_search=her_optuna", "debug=tiny",
         "steps=20", "backend=numpy", "objective=margin", f"hydra.sweep.dir={tmp_path}/sweep",
         f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", "hydra.sweeper.n_trials=3",
         "hydra.sweeper.seeds=[0,1,2]", "hydra.sweeper.wave=1"],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert search.returncode == 0, search.stderr[-3000:]
    assert (tmp_path / "optuna.journal").is_file()  # beside the MLflow store
    journal = open_storage(f"{JOURNAL}{tmp_path / 'optuna.journal'}")
    best = optuna.load_study(study_name="her_optuna", storage=journal).best_trial
    shot = tmp_path / "optuna_dashboard.png"
    dashboard = subprocess.Popen(
        ["make", "-s", "-C", str(paths.project_root()), "dashboard",
         f"STUDIES={tmp_path / 'optuna.journal'}", "PORT=0"],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # make and the server it starts: one group, stopped as one
    )  # fmt: skip
    try:
        link = printed_link(dashboard)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=executable, args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1600, "height": 1000})
                page.goto(link)
                study = page.get_by_role("link", name=re.compile(r"^\d+\. her_optuna\b"))
                expect(study).to_be_visible(timeout=60_000)
                study.click()
                try:
                    # the study's page: its history, its best trial as the journal has it, the
                    # study's record of what it searched (objective, space, instances), each
                    # trial's values by instance (a seed here)
                    for heading in ("History", f"Best Trial (number={best.number})",
                                    "Study User Attributes", "Intermediate values"):  # fmt: skip
                        expect(page.get_by_role("heading", name=heading)).to_be_visible(
                            timeout=60_000)  # fmt: skip
                    expect(page.get_by_text("instances", exact=True)).to_be_visible()
                finally:
                    page.wait_for_timeout(2000)  # the plots draw
                    page.screenshot(path=str(shot), full_page=True)
            finally:
                browser.close()
    finally:
        os.killpg(dashboard.pid, signal.SIGTERM)
        dashboard.wait(timeout=30)
        assert not server_left(dashboard.pid), "the dashboard outlived the test"
    DOCS_SHOT.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, DOCS_SHOT)
