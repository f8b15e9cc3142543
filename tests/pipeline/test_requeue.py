"""A submitit job that is preempted mid-run (SIGUSR2, what a cluster sends before a time limit or
on preemption) checkpoints at its step, is requeued, and continues the same MLflow run to
FINISHED with the l_q history of an unbroken run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers import wait_for_step
from tests.pipeline.test_run import history, job

OVERRIDES = ["steps=1000", "checkpoint.every=400"]


def submitit_task(sweep: Path) -> int | None:
    """The pid of the process submitit runs the job in (`python -m submitit.core._submit
    <sweep>/.submitit/<job id>`), None while there is none."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"submitit.core._submit" in words and any(str(sweep).encode() in w for w in words):
            return int(cmdline.parent.name)
    return None


@pytest.mark.slow
def test_a_preempted_submitit_job_is_requeued_and_finishes_the_same_run(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(
        [sys.executable, "-m", "alpha_rl.train", "-m", "hydra/launcher=submitit_local",
         "backend=numpy", "debug=tiny", *OVERRIDES, f"tracking.uri=sqlite:///{tmp_path}/m.db",
         f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path, env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    wait_for_step(sweep / "0", 100, proc)
    task = submitit_task(sweep)
    assert task is not None
    os.kill(task, signal.SIGUSR2)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    log = (sweep / "0" / "train.log").read_text()
    assert "a requeued job: resuming from its checkpoint" in log
    assert "run FINISHED after 1000 steps" in log and "Traceback" not in log
    store = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/m.db")
    runs = store.search_runs([store.get_experiment_by_name("alpha_rl").experiment_id])
    (child,) = [r for r in runs if "alpha_rl.sweep_dir" not in r.data.tags]
    assert child.info.status == "FINISHED"
    (tmp_path / "whole").mkdir()  # its own store, beside the sweep's
    whole = job(tmp_path / "whole", OVERRIDES, "whole")
    requeued = [(p.step, p.value) for p in store.get_metric_history(child.info.run_id, "loss/l_q")]
    assert sorted(requeued) == history(tmp_path / "whole", whole.run_id, "loss/l_q")
