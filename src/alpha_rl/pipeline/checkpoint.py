"""Checkpoints: every device array a resume needs, in a format that is never unpickled.

A checkpoint is `<run dir>/checkpoint/state.npz` (arrays by key, plus the step, read back with
allow_pickle=False) and `meta.json` (step, host counters, whether the replay is included, the
config it was written under). Both are written to temporary files and renamed into place, the
metadata last, so a crash while saving leaves the previous checkpoint whole.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from alpha_rl.errors import CheckpointError
from alpha_rl.pipeline.trainer import Trainer

FORMAT = 1
DIR = "checkpoint"


def checkpoint_dir(run_dir: Path) -> Path:
    """Where a run keeps its latest checkpoint."""
    return run_dir / DIR


def save(run_dir: Path, trainer: Trainer, with_replay: bool, config_yaml: str) -> Path:
    """Write the trainer's state after its step `trainer.t`; returns the checkpoint directory."""
    out = checkpoint_dir(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    be = trainer.backend
    arrays = {k: be.download(v) for k, v in trainer.state_arrays(with_replay).items()}
    arrays["__step__"] = np.array([trainer.t], np.int64)
    tmp = out / "state.npz.tmp"
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
    os.replace(tmp, out / "state.npz")
    meta = {
        "format": FORMAT,
        "step": trainer.t,
        "with_replay": with_replay,
        "host": trainer.host_state(),
        "backend": be.name,
        "config": config_yaml,
    }
    (out / "meta.json.tmp").write_text(json.dumps(meta, indent=1))
    os.replace(out / "meta.json.tmp", out / "meta.json")
    return out


def read_meta(run_dir: Path) -> dict[str, Any]:
    """The metadata of a run directory's checkpoint (CheckpointError when there is none)."""
    path = checkpoint_dir(run_dir) / "meta.json"
    if not path.is_file():
        raise CheckpointError(
            f"resume={run_dir}: no checkpoint there ({path} is missing); give the directory of "
            "a run that saved one (checkpoint.every, or a run that reached its end)"
        )
    try:
        meta = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: unreadable checkpoint metadata ({exc})") from exc
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {meta.get('format')}, expected {FORMAT}")
    return meta


def restore(run_dir: Path, trainer: Trainer) -> dict[str, Any]:
    """Write a checkpoint's arrays back into `trainer` (shapes and dtypes checked); its meta."""
    meta = read_meta(run_dir)
    path = checkpoint_dir(run_dir) / "state.npz"
    try:
        with np.load(path, allow_pickle=False) as npz:
            saved = {k: npz[k] for k in npz.files}
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: unreadable checkpoint ({exc})") from exc
    if int(saved.pop("__step__", [-1])[0]) != meta["step"]:
        raise CheckpointError(f"{path} and the meta.json beside it disagree on the step")
    wanted = trainer.state_arrays(bool(meta["with_replay"]))
    missing = sorted(set(wanted) - set(saved))
    if missing:
        raise CheckpointError(f"{path}: lacks {', '.join(missing[:5])} that this config needs")
    be = trainer.backend
    for key, device in wanted.items():
        host = saved[key]
        if host.shape != tuple(device.shape) or host.dtype != device.dtype:
            raise CheckpointError(
                f"{path}: {key} is {host.dtype}{list(host.shape)} but this config has "
                f"{device.dtype}{list(device.shape)}; resume with the checkpoint's config"
            )
        be.write(device, host)
    trainer.restore_host_state(meta["host"], bool(meta["with_replay"]))
    return meta
