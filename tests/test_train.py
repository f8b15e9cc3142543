"""`alpha-rl-train` end to end in a subprocess: compose, validate, train, report; clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from alpha_rl import paths
from alpha_rl.parts import layout_from_config
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
def test_a_run_prints_the_isv_table_and_where_its_results_are(tmp_path: Path) -> None:
    proc = _train(tmp_path, "backend=numpy")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    cfg, choices = compose_fixed()
    assert f"ISV layout: {len(layout_from_config(cfg, choices).slots)} slots" in out
    assert "549    1  her_threshold" in out
    assert "backend: numpy (backend=numpy)" in out
    assert "run FINISHED after 40 steps" in out
    assert f"mlflow ui --backend-store-uri sqlite:///{tmp_path}/mlflow.db" in out
    assert f"every metric in the UI: make ui STORE={tmp_path}/mlflow.db" in out
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
    proc = _train(tmp_path, "backend=numpy", "+isv.slots.probe.my_probe={index:549,init:0,doc:x}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "ISV slot clash at index 549" in out and "Traceback" not in out


def test_impossible_variant_exits_2(tmp_path: Path) -> None:
    proc = _train(tmp_path, "backend=numpy", "reward=stride6", "beta=active")
    assert proc.returncode == 2
    assert "beta=active needs reward=stride7" in proc.stdout + proc.stderr
