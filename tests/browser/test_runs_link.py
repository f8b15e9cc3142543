"""The link `make ui` prints, opened in headless Chromium on a real `mlflow server` over a small
store (a sweep's parent and four runs under it): the runs table of the model-training pages, the
deciding metrics as columns, every run of the sweep on its row. Saves the picture in the test's
directory and, when every check passed, as docs/img/ui_runs.png."""

from __future__ import annotations

import contextlib
import re
import shutil
import time
from pathlib import Path

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from alpha_rl import paths
from alpha_rl.tracking.store import Store
from alpha_rl.tracking.view import DECIDING
from tests.conftest import required_tool
from tests.mlflow_server import started_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]

DOCS_SHOT = paths.project_root() / "docs" / "img" / "ui_runs.png"
CHILDREN = ("her-on s0", "her-off s0", "her-on s1", "her-off s1")
PARENT = "her_ablation__2026-12-02_01-43-03"
HELD_OUT = [  # the last evaluation of each run: (eval/pnl USD, eval/sharpe, eval/capture_ratio)
    (1520.0, 1.42, 0.41), (980.0, 0.91, 0.27), (1710.0, 1.57, 0.44), (1105.0, 1.02, 0.30),
]  # fmt: skip


def sweep_store(path: Path) -> str:
    """A store whose experiment `alpha_rl` the tracker's own code made (with its runs view), and
    a sweep's parent run with four finished runs under it; the experiment's id."""
    uri = f"sqlite:///{path}"
    experiment_id = Store(uri, retry_s=0.0).experiment_id("alpha_rl")
    client = MlflowClient(tracking_uri=uri)
    parent = client.create_run(experiment_id, run_name=PARENT).info.run_id
    for i, name in enumerate(CHILDREN):
        her, seed = name.split()[0][4:], int(name[-1])
        tags = {"mlflow.parentRunId": parent, "her": her, "seed": str(seed),
                "market": "synthetic_waves", "experiment": "her_ablation",
                "kill_check.verdict": "KEEP"}  # fmt: skip
        run_id = client.create_run(experiment_id, run_name=name, tags=tags).info.run_id
        now = int(time.time() * 1000)
        points = [Metric("loss/l_q", round(0.3 / (1 + s) + 0.02 * i, 4), now, s * 100)
                  for s in range(20)]  # fmt: skip
        pnl, sharpe, capture = HELD_OUT[i]
        held_out = {"eval/l_q_probe": round(0.05 + 0.01 * i, 3), "eval/pnl": pnl,
                    "eval/sharpe": sharpe, "eval/capture_ratio": capture}  # fmt: skip
        points += [Metric(k, v, now, 2000) for k, v in held_out.items()]
        client.log_batch(run_id, metrics=points)
        client.set_terminated(run_id)
    client.set_terminated(parent)
    return experiment_id


def printed_link(log: Path, timeout_s: float = 120.0) -> str:
    """The link to experiment alpha_rl's runs the server launcher printed once it answered."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(r"^  alpha_rl: (http://\S+)$", log.read_text(), re.MULTILINE)
        if found:
            return found.group(1)
        time.sleep(0.2)
    raise AssertionError(f"no link in the launcher's output: {log.read_text()[-3000:]}")


def test_the_printed_link_opens_the_runs_and_their_deciding_metrics(tmp_path: Path) -> None:
    executable = required_tool("CHROMIUM", "chromium", ".ci/run installs Debian's chromium")
    from playwright.sync_api import TimeoutError as NotThere
    from playwright.sync_api import expect, sync_playwright

    experiment_id = sweep_store(tmp_path / "mlflow.db")
    shot = tmp_path / "ui_runs.png"
    with started_server(f"sqlite:///{tmp_path}/mlflow.db", tmp_path) as server:
        link = printed_link(server.log_path)
        assert f"/#/experiments/{experiment_id}/runs?workflowType=machine_learning" in link
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=executable, args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1600, "height": 1000})
                page.goto(link)
                close = page.locator('[data-component-id="mlflow.assistant.chat_panel.close"]')
                # MLflow opens its assistant on a first visit; closed once, as README says (an
                # MLflow that no longer opens it has nothing to close)
                with contextlib.suppress(NotThere):
                    close.click(timeout=30_000)
                page.goto(link)
                try:
                    check_runs_table(page, expect)
                finally:
                    page.wait_for_timeout(1000)  # the table's columns settle
                    page.screenshot(path=str(shot))
                expect(close).to_have_count(0)  # closed once, it stays closed
            finally:
                browser.close()
    DOCS_SHOT.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, DOCS_SHOT)


def check_runs_table(page, expect) -> None:
    """The model-training pages, the view's metric columns, every run of the sweep on its row."""
    expect(page.get_by_role("link", name="Model registry")).to_be_visible(timeout=60_000)
    expect(page.get_by_role("link", name="Evaluation runs")).to_have_count(0)  # GenAI's
    for key in DECIDING:
        header = page.locator(f'.ag-header-cell[col-id="metrics.`{key}`"]')
        expect(header).to_be_visible(timeout=30_000)
        expect(header).to_contain_text(key)
    for name in (PARENT, *CHILDREN):  # each a row of its own, none folded under its parent
        row = page.locator("[role=row]").filter(has=page.get_by_role("link", name=name, exact=True))
        expect(row).to_have_count(1, timeout=30_000)
        expect(row).to_be_visible()
    expect(page.get_by_text("alpha_rl: runs", exact=True).first).to_be_visible()  # the view
