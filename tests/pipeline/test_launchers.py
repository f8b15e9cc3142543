"""Sweeps beyond one process: local_gpus (joblib workers, a GPU each), submitit's local executor,
the SLURM preset, and the GPU slots the local_gpus jobs take."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from alpha_rl import paths
from alpha_rl.launch import LAUNCHER, NO_GPU, GpuSlot, gpu_slot, visible_gpus
from hydra_plugins.alpha_rl_launcher.local_gpus import LocalGpusLauncher
from tests.pipeline.test_cli import nested_sweep_runs, train

SWEEP = ["-m", "experiment=her_ablation", "steps=60", "hydra.sweep.dir=multirun/sweep"]


@pytest.mark.slow
def test_local_gpus_sweep_without_a_gpu_runs_every_job_on_numpy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU, even on a GPU machine
    done = train(tmp_path, *SWEEP, "hydra/launcher=local_gpus", "hydra.launcher.n_jobs=2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Joblib.Parallel(n_jobs=2" in done.stdout + done.stderr
    children = nested_sweep_runs(tmp_path)
    assert {r.data.tags["gpu_slot"] for r in children} == {NO_GPU}
    assert {r.data.tags["backend"] for r in children} == {"numpy"}


@pytest.mark.slow
def test_submitit_local_sweep(tmp_path: Path) -> None:
    done = train(tmp_path, *SWEEP, "hydra/launcher=submitit_local")
    assert done.returncode == 0, done.stderr[-3000:]
    nested_sweep_runs(tmp_path)
    assert list((tmp_path / "multirun" / "sweep" / ".submitit").iterdir())  # submitit's job dirs


def test_slurm_preset_composes_for_submitit() -> None:
    with initialize_config_dir(config_dir=str(paths.conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert (launcher.partition, launcher.gpus_per_node, launcher.timeout_min) == ("gpu", 1, 120)


def test_local_gpus_launches_a_worker_per_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,7")
    assert visible_gpus() == [0, 1, 2]  # CUDA's ordinals inside this process
    assert LocalGpusLauncher(n_jobs=None).joblib["n_jobs"] == 3
    assert LocalGpusLauncher(n_jobs=5).joblib["n_jobs"] == 5
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert LocalGpusLauncher(n_jobs=None).joblib["n_jobs"] == 1


def test_gpu_slots_are_exclusive_and_queue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    joblib = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
    with gpu_slot(joblib, tmp_path) as s:
        assert s is None  # other launchers: no slot, no tag
    with gpu_slot(LAUNCHER, None) as s:
        assert s is None  # not a sweep
    got: list[GpuSlot | None] = []

    def third() -> None:
        with gpu_slot(LAUNCHER, tmp_path, poll_s=0.05) as s:
            got.append(s)

    with gpu_slot(LAUNCHER, tmp_path) as a, gpu_slot(LAUNCHER, tmp_path) as b:
        assert {a.ordinal, b.ordinal} == {0, 1} and a.tag in ("0", "1")
        waiter = threading.Thread(target=third)
        waiter.start()
        time.sleep(0.3)
        assert got == [], "a third job must wait while both GPUs are held"
    waiter.join(timeout=10)
    assert got and got[0].ordinal in (0, 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with gpu_slot(LAUNCHER, tmp_path) as s:
        assert s == GpuSlot(None) and s.tag == NO_GPU
    assert os.path.isdir(tmp_path / ".gpu_slots")
