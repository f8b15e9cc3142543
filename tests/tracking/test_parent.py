"""Parent runs of a multirun: through the Hydra callback, and created by the jobs themselves."""

from __future__ import annotations

import json
import multiprocessing
import re
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from alpha_rl.tracking import ParentRunCallback, TrackingConfig, open_tracker, parent_run_for
from tests.tracking.conftest import make_cfg


def _multirun_config(cfg: TrackingConfig, sweep_dir: Path, choices: dict | None = None):
    tracking = {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}
    hydra = {"sweep": {"dir": str(sweep_dir)}, "runtime": {"choices": choices or {}}}
    return OmegaConf.create({"tracking": tracking, "hydra": hydra})


def _sweep_runs(client: MlflowClient, experiment: str, sweep_dir: Path) -> list:
    experiment_id = client.get_experiment_by_name(experiment).experiment_id
    query = f"tags.`alpha_rl.sweep_dir` = '{sweep_dir.resolve()}'"
    return client.search_runs([experiment_id], filter_string=query)


def test_the_callback_nests_the_jobs_under_one_parent(
    cfg: TrackingConfig, client: MlflowClient, tmp_path: Path
) -> None:
    sweep_dir = tmp_path / "multirun" / "2024-05-01" / "12-30-00"
    config = _multirun_config(cfg, sweep_dir, {"experiment": "her_ablation", "her": "on"})
    callback = ParentRunCallback()
    callback.on_multirun_start(config=config)
    saved = json.loads((sweep_dir / "mlflow_parent.json").read_text())
    parent_id = saved["run_id"]
    assert saved["experiment"] == cfg.experiment and saved["uri"].startswith("sqlite:///")

    children = []
    for job in range(3):
        assert parent_run_for(sweep_dir, cfg) == parent_id
        tracker = open_tracker(
            cfg, sweep_dir / str(job), run_name=f"job{job}", parent_run_id=parent_id
        )
        tracker.log_point(0, {"loss/l_q": float(job)})
        tracker.finish()
        children.append(tracker.run_id)
    callback.on_multirun_end(config=config)

    parent = client.get_run(parent_id)
    assert parent.info.status == "FINISHED"
    # named after its preset and its start
    assert re.fullmatch(r"her_ablation__\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d", parent.info.run_name)
    assert parent.data.tags["alpha_rl.sweep_dir"] == str(sweep_dir.resolve())
    for run_id in children:
        assert client.get_run(run_id).data.tags["mlflow.parentRunId"] == parent_id
    assert [r.info.run_id for r in _sweep_runs(client, cfg.experiment, sweep_dir)] == [parent_id]


def _job(uri: str, sweep_dir: str, barrier, results) -> None:
    """One job process: wait for the other, then ask for the sweep's parent run."""
    cfg = make_cfg(uri)
    barrier.wait(timeout=120)
    results.put(parent_run_for(Path(sweep_dir), cfg))


@pytest.mark.slow
def test_parallel_jobs_without_the_callback_agree_on_one_parent(
    uri: str, client: MlflowClient, tmp_path: Path
) -> None:
    sweep_dir = tmp_path / "multirun" / "2024-05-01" / "13-00-00"
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    jobs = [ctx.Process(target=_job, args=(uri, str(sweep_dir), barrier, results)) for _ in "ab"]
    for job in jobs:
        job.start()
    ids = [results.get(timeout=120) for _ in jobs]
    for job in jobs:
        job.join(timeout=60)
        assert job.exitcode == 0

    assert ids[0] is not None and ids[0] == ids[1]
    runs = _sweep_runs(client, make_cfg(uri).experiment, sweep_dir)
    assert [r.info.run_id for r in runs] == [ids[0]]
    assert json.loads((sweep_dir / "mlflow_parent.json").read_text())["run_id"] == ids[0]


def test_parent_run_for_without_a_file_and_without_create_is_none(
    cfg: TrackingConfig, tmp_path: Path
) -> None:
    assert parent_run_for(tmp_path / "sweep", cfg, create=False) is None
    assert not (tmp_path / "sweep" / "mlflow_parent.json").exists()
