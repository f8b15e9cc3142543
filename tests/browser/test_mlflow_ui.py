"""The comparison UI in a real browser: a HER on/off sweep logged through the tracking server and
judged by the kill check, in headless Chromium (Playwright driving the system's Chromium; no
browser download). The printed link opens the experiment on its runs, listed flat; the runs'
short names in the legend of their `loss/l_q` chart; the parent's description carries the verdict
table. Saves two screenshots."""

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
from alpha_rl.tracking.links import runs_link
from tests.conftest import required_tool

pytestmark = [pytest.mark.browser, pytest.mark.slow]

EXPERIMENT = "ui_her_ablation"
SCREENSHOT = paths.project_root() / "test-artifacts" / "mlflow_ui_her_on_off.png"
NOTE_SHOT = paths.project_root() / "test-artifacts" / "mlflow_ui_sweep_verdict_note.png"


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

    check = [sys.executable, "-m", "alpha_rl.killcheck", "--tracking-uri", url,
             "--experiment", EXPERIMENT, "--sweep", "sweep", "--out", "report"]  # fmt: skip
    judged = subprocess.run(check, cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)  # fmt: skip
    assert judged.returncode in (0, 1, 2), judged.stderr[-3000:]

    client = MlflowClient(tracking_uri=url)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    exp_id = experiment.experiment_id
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    runs = client.search_runs([exp_id])
    children = {r.data.tags["her"]: r for r in runs if "mlflow.parentRunId" in r.data.tags}
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert set(children) == {"on", "off"}
    names = [children[k].info.run_name for k in ("on", "off")]
    assert names == ["her-on s0", "her-off s0"]
    assert parent.info.run_name.startswith("her_ablation__")
    verdict = parent.data.tags["kill_check.verdict"]
    assert f"**{verdict}**" in parent.data.tags["mlflow.note.content"]

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            # the link a run prints opens a training experiment on its runs, not the GenAI page
            page.goto(runs_link(url, exp_id))
            parent_cell = page.locator("[role=gridcell]").filter(has_text=parent.info.run_name)
            expect(parent_cell.first).to_be_visible(timeout=60_000)
            page.goto(runs_link(url, exp_id).replace("=TABLE", "=CHART"))
            expect(parent_cell.first).to_be_visible(timeout=60_000)
            for name in names:  # listed flat: nothing to unfold under the parent
                expect(page.get_by_text(name, exact=True).first).to_be_visible(timeout=30_000)
            page.get_by_placeholder("Search metric charts").fill("loss/l_q")
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            try:
                expect(page.get_by_text("loss/l_q", exact=True).first).to_be_visible(timeout=30_000)
                for name in names:  # each run is a line of the chart: its legend entry
                    legend = page.get_by_text(f"{name} (loss/l_q)", exact=True)
                    expect(legend.first).to_be_attached(timeout=30_000)
                shown = [page.get_by_text(f"{name} (loss/l_q)", exact=True).first.inner_text()
                         for name in names]  # fmt: skip
                assert shown[0][:10] != shown[1][:10], "the names must differ where they start"
                page.wait_for_timeout(3000)  # let the charts draw before the picture
            finally:
                page.screenshot(path=str(SCREENSHOT))
            # the parent run's page: its description is the kill check's verdict table
            page.goto(f"{url}/#/experiments/{exp_id}/runs/{parent.info.run_id}"
                      "?workflowType=machine_learning")  # fmt: skip
            try:
                heading = page.get_by_text("Kill check", exact=False).first
                expect(heading).to_be_visible(timeout=30_000)
                more = page.get_by_text("Show more", exact=True)
                if more.count():  # MLflow folds a long description
                    more.first.click()
                heading.scroll_into_view_if_needed()
                expect(page.get_by_text("her=on", exact=False).first).to_be_visible(timeout=30_000)
            finally:
                page.screenshot(path=str(NOTE_SHOT))
        finally:
            browser.close()
    for shot in (SCREENSHOT, NOTE_SHOT):
        client.log_artifact(parent.info.run_id, str(shot), "ui")
    listed = json.load(urllib.request.urlopen(
        f"{url}/api/2.0/mlflow/artifacts/list?run_id={parent.info.run_id}&path=ui"))  # fmt: skip
    assert sorted(f["path"] for f in listed["files"]) == sorted(
        f"ui/{shot.name}" for shot in (SCREENSHOT, NOTE_SHOT)
    )
