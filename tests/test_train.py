"""`alpha-rl-train` end to end in a subprocess: compose, validate, train, report; clear errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from alpha_rl import paths
from alpha_rl.pipeline.configure.config import layout_from_config
from alpha_rl.tracking.links import open_line
from tests.helpers import compose_fixed


def _train(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "ALPHA_RL_ROOT": str(paths.project_root()),
    }
    fixed = [
        f"hydra.run.dir={tmp_path}/run",
        "debug=tiny",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
    ]
    return subprocess.run(
        [sys.executable, "-m", "alpha_rl.train", *fixed, *overrides],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_a_run_prints_the_isv_table_and_where_its_results_are(tmp_path: Path,
                                                               monkeypatch) -> None:  # fmt: skip
    proc = _train(tmp_path, "backend=numpy")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    cfg, choices = compose_fixed()
    assert f"ISV layout: {len(layout_from_config(cfg, choices).slots)} slots" in out
    assert re.search(r"^549 +1  her_threshold +param  1\.5 ", out, re.MULTILINE), out
    assert "backend: numpy (backend=numpy)" in out
    assert "run FINISHED after 40 steps" in out
    monkeypatch.chdir(tmp_path)  # the run's directory: the UI line as it reads there
    assert f"every metric in the UI: {open_line(f'sqlite:///{tmp_path}/mlflow.db', '1')}\n" in out
    assert ("then http://127.0.0.1:5000/#/experiments/1/runs?workflowType=machine_learning"
            "&compareRunsMode=TABLE&viewStateShareKey=alpha_rl_runs") in out  # fmt: skip
    assert f"curves: {tmp_path}/run/curves.png" in out
    assert "held-out, the last evaluation (step 40, greedy, 4 envs x 20 steps): pnl " in out
    assert "l_q " in out and "(mean of the first and the last quarter of 6 log points)" in out
    assert "reward.scale=auto: " in out and "a typical step's reward is 1" in out
    assert (tmp_path / "run" / ".hydra" / "config.yaml").is_file()
    assert (tmp_path / "run" / "diag.jsonl").is_file()


@pytest.mark.slow
def test_variant_overrides_change_the_layout(tmp_path: Path) -> None:
    proc = _train(tmp_path, "backend=numpy", "her='off'", "reward=stride6")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "her_threshold" not in out and "w_aux_align" not in out
    assert "stride: 6" in (tmp_path / "run" / ".hydra" / "config.yaml").read_text()
    last = (tmp_path / "run" / "diag.jsonl").read_text().splitlines()[-1]
    assert json.loads(last)["hindsight"] == {"enabled": False}


def test_clash_exits_2_with_the_message_and_no_traceback(tmp_path: Path) -> None:
    proc = _train(tmp_path, "backend=numpy", "+isv.slots.probe.aux_share={index:549,init:0,doc:x}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "ISV slot clash at index 549" in out and "Traceback" not in out


def test_impossible_variant_exits_2(tmp_path: Path) -> None:
    proc = _train(tmp_path, "backend=numpy", "reward=stride6", "beta=active")
    assert proc.returncode == 2
    assert "beta=active needs reward=stride7" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_run_on_real_closes_logs_its_costs_baselines_and_tear_sheet(tmp_path: Path) -> None:
    """market=sp500_daily on a slice of its real closes (2007-2012): the summary breaks the
    held-out PnL into gross and costs and reads it against the baselines; tearsheet.html
    (QuantStats) and tearsheet.png are the run's MLflow artifacts; the units are params."""
    import mlflow
    import pandas as pd

    from alpha_rl.market.files import package_file

    raw = pd.read_csv(package_file("package:skfolio/datasets/data/sp500_index.csv.gz"))
    years = raw[(raw["Date"] >= "2007-01-01") & (raw["Date"] < "2013-01-01")]
    years.to_csv(tmp_path / "slice.csv", index=False)
    proc = _train(tmp_path, "backend=numpy", "market=sp500_daily",
                  f"market.path={tmp_path}/slice.csv", "eval.tearsheet=true",
                  "eval.steps=120")  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "held-out costs: gross " in out and " fills per env per 1,000 steps" in out
    assert "baselines on the same windows, net (flat +0, buy_and_hold " in out
    run_dir = tmp_path / "run"
    assert f"tear sheet: {run_dir}/tearsheet.png, {run_dir}/tearsheet.html" in out
    html = (run_dir / "tearsheet.html").read_text()
    assert "benchmark buy_and_hold on the same ticks" in html and "Max Drawdown" in html
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    run_id = json.loads((run_dir / "tracking.json").read_text())["run_id"]
    names = {a.path for a in client.list_artifacts(run_id)}
    assert {"tearsheet.html", "tearsheet.png", "curves.png"} <= names
    run = client.get_run(run_id)
    assert run.data.params["units.eval.turnover"].startswith("fills per env per 1,000 steps")
    assert run.data.params["env.multiplier"] == "50.0"
    m = run.data.metrics
    assert m["eval/pnl"] == pytest.approx(m["eval/pnl_gross"] - m["eval/cost_spread"]
                                          - m["eval/cost_fees"], abs=1e-6)  # fmt: skip
    assert m["eval/baseline/flat/pnl"] == 0.0 and "eval/baseline/random/pnl" in m
