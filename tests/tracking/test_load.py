"""Load: 8 processes x 10k logged steps at once into one store — through a tracking server and
straight into one SQLite file. Every value must arrive."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.slow

JOBS, STEPS = 8, 10_000
KEYS = ("loss/l_q", "her/inject_count_step")

WRITER = """
import sys
from pathlib import Path
from omegaconf import OmegaConf
from alpha_rl import paths
from alpha_rl.tracking import TrackingConfig, open_tracker

uri, run_dir, name, parent, steps = sys.argv[1:6]
node = OmegaConf.load(paths.conf_dir() / "tracking" / "local.yaml")
node.uri, node.retry_s, node.final_retry_s = uri, 1.0, 300.0
tracker = open_tracker(TrackingConfig.from_cfg(node), Path(run_dir), run_name=name,
                       parent_run_id=parent)
job = int(name.split("-")[1])
for step in range(int(steps)):
    tracker.log_point(step, {"loss/l_q": job + 1.0 / (step + 1), "her/inject_count_step": step % 7})
tracker.finish()
print(tracker.run_id)
"""


def _load(uri: str, tmp_path: Path) -> None:
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("alpha_rl")
    exp_id = exp.experiment_id if exp else client.create_experiment("alpha_rl")
    parent = client.create_run(exp_id, run_name=f"load-{tmp_path.name}").info.run_id
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    script = textwrap.dedent(WRITER)
    args = [[uri, str(tmp_path / f"job{j}"), f"job-{j}", parent, str(STEPS)] for j in range(JOBS)]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, "env": env}
    procs = [subprocess.Popen([sys.executable, "-c", script, *a], **pipes) for a in args]
    run_ids = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
        run_ids.append(out.strip().splitlines()[-1])
    for j, run_id in enumerate(run_ids):
        run = client.get_run(run_id)
        assert run.info.status == "FINISHED"
        assert run.data.tags["mlflow.parentRunId"] == parent
        for key in KEYS:
            history = client.get_metric_history(run_id, key)
            assert sorted(m.step for m in history) == list(range(STEPS)), f"{key} of job {j}"
        l_q = {m.step: m.value for m in client.get_metric_history(run_id, "loss/l_q")}
        assert l_q[0] == j + 1.0 and l_q[STEPS - 1] == pytest.approx(j + 1.0 / STEPS)
        assert not (tmp_path / f"job{j}" / "unsent.jsonl").exists()


def test_eight_jobs_log_every_value_through_the_server(tracking_server, tmp_path: Path) -> None:
    url, _ = tracking_server
    _load(url, tmp_path)


def test_eight_jobs_log_every_value_into_one_sqlite_file(tmp_path: Path, empty_store: Path) -> None:
    shutil.copyfile(empty_store, tmp_path / "mlflow.db")
    _load(f"sqlite:///{tmp_path}/mlflow.db", tmp_path)
