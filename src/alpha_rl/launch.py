"""Sweeps beyond one process: the `local_gpus` launcher and the GPU each of its jobs takes.

`hydra/launcher=local_gpus` (conf/hydra/launcher/local_gpus.yaml; the launcher class lives in
hydra_plugins.alpha_rl_launcher, where Hydra looks for plugins) is Hydra's joblib launcher (loky
worker processes) with one worker per visible GPU by default, so jobs beyond the GPU count
queue. A job in such a sweep takes a free GPU with `gpu_slot`: an exclusive lock on
`<sweep dir>/.gpu_slots/gpu<k>.lock`, held while the job runs, its ordinal passed to the cuda
backend (`backend.device`) and recorded as the run's `gpu_slot` tag. On a machine without a GPU
the jobs run on the numpy backend and the tag says so.

The GPUs are those CUDA shows this process: CUDA_VISIBLE_DEVICES when it is set, else every
GPU `nvidia-smi -L` lists.
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("alpha_rl")

LAUNCHER = "hydra_plugins.alpha_rl_launcher.local_gpus.LocalGpusLauncher"  # its _target_
SLOTS_DIR = ".gpu_slots"
NO_GPU = "none (no GPU visible)"


def visible_gpus() -> list[int]:
    """CUDA ordinals of the GPUs this process may use ([] on a machine without a driver)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return list(range(len([d for d in env.split(",") if d.strip()])))
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if listed.returncode != 0:
        return []
    return list(range(sum(line.startswith("GPU ") for line in listed.stdout.splitlines())))


@dataclass(frozen=True)
class GpuSlot:
    """The GPU a job of a local_gpus sweep runs on: its ordinal, or None without a GPU."""

    ordinal: int | None

    @property
    def tag(self) -> str:
        return NO_GPU if self.ordinal is None else str(self.ordinal)


@contextmanager
def gpu_slot(
    launcher_target: str, sweep_dir: Path | None, poll_s: float = 1.0
) -> Iterator[GpuSlot | None]:
    """The GPU this job holds while it runs, when it is a job of a local_gpus sweep (None for
    any other launcher). Waits, logging once, while every GPU is held by another job."""
    if launcher_target != LAUNCHER or sweep_dir is None:
        yield None
        return
    gpus = visible_gpus()
    if not gpus:
        yield GpuSlot(None)
        return
    slots = Path(sweep_dir) / SLOTS_DIR
    slots.mkdir(parents=True, exist_ok=True)
    waited = False
    while True:
        for ordinal in gpus:
            fh = open(slots / f"gpu{ordinal}.lock", "a")  # noqa: SIM115 - held while the job runs
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.close()
                continue
            try:
                log.info("this job runs on GPU %d of %d", ordinal, len(gpus))
                yield GpuSlot(ordinal)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
                fh.close()
            return
        if not waited:
            log.info("all %d GPUs are taken by other jobs of the sweep: waiting", len(gpus))
            waited = True
        time.sleep(poll_s)
