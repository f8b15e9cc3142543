"""The comparison UI in a real browser: a HER on/off sweep logged through the tracking server,
its runs and their `loss/l_q` chart in MLflow's chart view, in headless Chromium (Playwright
driving the system's Chromium; no browser download). Saves a screenshot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from alpha_rl import paths
from tests.conftest import required_tool

pytestmark = [pytest.mark.browser, pytest.mark.slow]

EXPERIMENT = "ui_her_ablation"
SCREENSHOT = paths.project_root() / "test-artifacts" / "mlflow_ui_her_on_off.png"


def test_her_on_off_runs_and_their_l_q_chart_in_the_ui(tracking_server, tmp_path: Path) -> None:
    executable = required_tool("CHROMIUM", "chromium", ".ci/run installs Debian's chromium")
    from playwright.sync_api import expect, sync_playwright

    url, _ = tracking_server
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    cmd = [sys.executable, "-m", "alpha_rl.train", "-m", "experiment=her_ablation", "seed=0",
           "debug=tiny", "backend=numpy", "steps=60", "hydra.sweep.dir=sweep", "tracking=server",
           f"tracking.uri={url}", f"tracking.experiment={EXPERIMENT}"]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    client = MlflowClient(tracking_uri=url)
    exp_id = client.get_experiment_by_name(EXPERIMENT).experiment_id
    runs = client.search_runs([exp_id])
    children = {r.data.tags["her"]: r for r in runs if "mlflow.parentRunId" in r.data.tags}
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert set(children) == {"on", "off"}
    names = [children[k].info.run_name for k in ("on", "off")]

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(f"{url}/#/experiments/{exp_id}/runs?compareRunsMode=CHART")
            parent_cell = page.locator("[role=gridcell]").filter(has_text=parent.info.run_name)
            expect(parent_cell.first).to_be_visible(timeout=60_000)
            parent_cell.first.locator("button").first.click()  # show the nested HER on/off runs
            for name in names:
                expect(page.get_by_text(name, exact=True).first).to_be_visible(timeout=30_000)
            page.get_by_placeholder("Search metric charts").fill("loss/l_q")
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            try:
                expect(page.get_by_text("loss/l_q", exact=True).first).to_be_visible(timeout=30_000)
                for name in names:  # each run is a line of the chart: its legend entry
                    legend = page.get_by_text(f"{name} (loss/l_q)", exact=True)
                    expect(legend.first).to_be_attached(timeout=30_000)
            finally:
                page.screenshot(path=str(SCREENSHOT))
        finally:
            browser.close()
    client.log_artifact(parent.info.run_id, str(SCREENSHOT), "ui")
    listed = json.load(urllib.request.urlopen(
        f"{url}/api/2.0/mlflow/artifacts/list?run_id={parent.info.run_id}&path=ui"))  # fmt: skip
    assert [f["path"] for f in listed["files"]] == [f"ui/{SCREENSHOT.name}"]
