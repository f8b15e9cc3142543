"""Sweeps beyond one process: the `local_gpus` launcher and the GPU each of its jobs takes.

`hydra/launcher=local_gpus` (conf/hydra/launcher/local_gpus.yaml; the launcher class lives in
hydra_plugins.alpha_rl_launcher, where Hydra looks for plugins) is Hydra's joblib launcher (loky
worker processes) with one worker per visible GPU by default, so jobs beyond the GPU count
queue. A job in such a sweep takes a free GPU with `gpu_slot`: an exclusive lock on
`<slots dir>/gpu-<id>.lock`, held while the job runs, its ordinal passed to the cuda backend
(`backend.device`) and recorded as the run's `gpu_slot` tag. The slots directory is one for the
whole machine (`hydra.launcher.slots_dir`, default $ALPHA_RL_GPU_SLOTS or
/tmp/alpha_rl_gpu_slots, open to every user), and a lock is named by the GPU itself (its entry in
CUDA_VISIBLE_DEVICES, else its nvidia-smi index), so sweeps started at once on one machine, even
with different CUDA_VISIBLE_DEVICES, never share a GPU, as long as they name GPUs alike (all by
index or all by UUID: a UUID and an index of one GPU are two locks). On a machine without a GPU
the jobs run on the numpy backend and the tag says so.

The GPUs are those CUDA shows this process: CUDA_VISIBLE_DEVICES when it is set, else every
GPU `nvidia-smi -L` lists.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from alpha_rl.errors import AlphaRlError

log = logging.getLogger("alpha_rl")

LAUNCHER = "hydra_plugins.alpha_rl_launcher.local_gpus.LocalGpusLauncher"  # its _target_
NO_GPU = "none (no GPU visible)"
SLOTS_ENV, DEFAULT_SLOTS_DIR = "ALPHA_RL_GPU_SLOTS", "/tmp/alpha_rl_gpu_slots"


def gpu_ids() -> list[str]:
    """The GPUs this process may use, in CUDA's ordinal order, each named as the machine knows
    it: its CUDA_VISIBLE_DEVICES entry when that is set, else its nvidia-smi index ([] on a
    machine without a driver)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip()]
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if listed.returncode != 0:
        return []
    return [str(i) for i in range(sum(x.startswith("GPU ") for x in listed.stdout.splitlines()))]


def visible_gpus() -> list[int]:
    """CUDA ordinals of the GPUs this process may use ([] on a machine without a driver)."""
    return list(range(len(gpu_ids())))


def open_shared(directory: Path, name: str) -> int:
    """A lock file in the machine-wide slots directory, created open to every user (an existing
    one, maybe another user's, is opened without O_CREAT, which a sticky directory refuses)."""
    path = directory / name
    try:
        return os.open(path, os.O_RDWR)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise AlphaRlError(f"cannot open the GPU lock {path} ({exc}): every user of this machine "
                           f"needs to write it; set hydra.launcher.slots_dir (or ${SLOTS_ENV}) "
                           "to a directory they share") from exc  # fmt: skip
    try:
        if not directory.is_dir():
            directory.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):  # another user's directory: leave its mode
                directory.chmod(0o1777)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise AlphaRlError(f"cannot create the GPU lock {path} ({exc}): set "
                           f"hydra.launcher.slots_dir (or ${SLOTS_ENV}) to a directory every "
                           "user of this machine may write") from exc  # fmt: skip
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o666)
    return fd


@dataclass(frozen=True)
class GpuSlot:
    """The GPU a job of a local_gpus sweep runs on: its ordinal, or None without a GPU."""

    ordinal: int | None

    @property
    def tag(self) -> str:
        return NO_GPU if self.ordinal is None else str(self.ordinal)


def slots_dir_of(configured: str | Path | None) -> Path:
    """The machine-wide slots directory: as configured, else $ALPHA_RL_GPU_SLOTS, else
    /tmp/alpha_rl_gpu_slots."""
    return Path(configured or os.environ.get(SLOTS_ENV) or DEFAULT_SLOTS_DIR)


@contextmanager
def gpu_slot(
    launcher_target: str,
    sweep_dir: Path | None,
    slots_dir: str | Path | None = None,
    poll_s: float = 1.0,
) -> Iterator[GpuSlot | None]:
    """The GPU this job holds while it runs, when it is a job of a local_gpus sweep (None for
    any other launcher). Waits, logging once, while every GPU is held by another job (of this
    sweep or of any other on the machine); `slots_dir` as slots_dir_of takes it."""
    if launcher_target != LAUNCHER or sweep_dir is None:
        yield None
        return
    slots_dir = slots_dir_of(slots_dir)
    ids = gpu_ids()
    if not ids:
        yield GpuSlot(None)
        return
    waited = False
    while True:
        for ordinal, gpu in enumerate(ids):
            fd = open_shared(slots_dir, f"gpu-{gpu.replace('/', '_')}.lock")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                log.info("this job runs on GPU %d of %d (%s)", ordinal, len(ids), gpu)
                yield GpuSlot(ordinal)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            return
        if not waited:
            log.info("all %d GPUs are taken by other jobs (%s): waiting", len(ids), slots_dir)
            waited = True
        time.sleep(poll_s)
