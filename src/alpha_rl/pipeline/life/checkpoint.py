"""Checkpoints: every device array a resume needs, in a format that is never unpickled.

A run keeps its newest `checkpoint.keep` checkpoints, one directory each:
`<run dir>/checkpoint/<step, 10 digits>/` with `state.npz` (arrays by key, plus the step, read back
with allow_pickle=False) and `meta.json` (step, host counters, whether the replay is included, the
config it was written under). A checkpoint is written into `<step>.tmp/` and renamed into place
only when both files are whole, so a crash, a full disk or a read-only directory while saving
leaves every earlier checkpoint valid; the older ones are pruned only after that.

On resume the newest checkpoint that reads back whole and fits the configured run is used: one
that is truncated, corrupted, lacks arrays or disagrees with its meta.json is refused with the
reason (naming the file) and the next older one is tried, saying so.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from alpha_rl import settings
from alpha_rl.errors import CheckpointError
from alpha_rl.pipeline.step.trainer import Trainer

log = logging.getLogger("alpha_rl")

# 2: HER's counters carry the forward ring's tail (format 1 checkpoints lack it)
# 3: HER's counters also count what became of the forward ring's claims (12 words, were 8)
FORMAT = 3
DIR = "checkpoint"
STATE, META = "state.npz", "meta.json"
ON_ERROR = ("continue", "stop")


@dataclass(frozen=True)
class CheckpointConfig:
    """How many checkpoints a run keeps and what a failed write does (conf/checkpoint/)."""

    keep: int
    on_error: str  # continue: log it and train on; stop: end the run FAILED
    requeue: bool  # under submitit: a timeout/preemption checkpoints, requeues and resumes


def checkpoint_config(cfg: DictConfig) -> CheckpointConfig:
    """checkpoint.keep and checkpoint.on_error, checked."""
    where = "conf/checkpoint/"
    return CheckpointConfig(
        keep=settings.integer(cfg, "checkpoint.keep", lambda v: v >= 1, ">= 1", where),
        on_error=settings.choice(cfg, "checkpoint.on_error", ON_ERROR, where),
        requeue=settings.flag(cfg, "checkpoint.requeue", where),
    )


def checkpoint_dir(run_dir: Path) -> Path:
    """Where a run keeps its checkpoints."""
    return run_dir / DIR


def _step_dir(run_dir: Path, step: int) -> Path:
    return checkpoint_dir(run_dir) / f"{step:010d}"


def saved(run_dir: Path) -> list[Path]:
    """The run's checkpoint directories, newest first (a checkpoint of the single-directory
    layout, `checkpoint/state.npz`, counts as the oldest)."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    steps = sorted((p for p in root.iterdir() if p.is_dir() and p.name.isdigit()),
                   key=lambda p: int(p.name), reverse=True)  # fmt: skip
    return steps + ([root] if (root / META).is_file() else [])


def latest(run_dir: Path) -> Path:
    """The newest checkpoint directory of a run (CheckpointError when there is none)."""
    found = saved(run_dir)
    if not found:
        raise _none_there(run_dir)
    return found[0]


def _none_there(run_dir: Path) -> CheckpointError:
    return CheckpointError(
        f"resume={run_dir}: no checkpoint there ({checkpoint_dir(run_dir)} holds none); give the "
        "directory of a run that saved one (checkpoint.every, or a run that reached its end)"
    )


def save(run_dir: Path, trainer: Trainer, with_replay: bool, config_yaml: str,
         cfg: CheckpointConfig, identity: str | None = None) -> Path | None:  # fmt: skip
    """Write the trainer's state after its step `trainer.t` and prune beyond `cfg.keep`; the
    checkpoint's directory, or None when the write failed and on_error is `continue` (logged;
    every earlier checkpoint stays valid). `identity`: the run directory's (pipeline/life/owner.py),
    which a resume checks. `config_yaml` is written as given: pass it with secrets masked."""
    final = _step_dir(run_dir, trainer.t)
    tmp = final.with_name(final.name + ".tmp")
    be = trainer.backend
    try:
        arrays = {k: be.download(v) for k, v in trainer.state_arrays(with_replay).items()}
        arrays["__step__"] = np.array([trainer.t], np.int64)
        meta = {"format": FORMAT, "step": trainer.t, "with_replay": with_replay,
                "host": trainer.host_state(), "backend": be.name,
                "config": config_yaml, "identity": identity}  # fmt: skip
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        write_state(tmp / STATE, arrays)
        (tmp / META).write_text(json.dumps(meta, indent=1))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        older = saved(run_dir)
        kept = f"the one at {older[0]} stays valid" if older else "there is no earlier one"
        message = f"checkpoint at step {trainer.t} not written ({exc}); {kept}"
        if cfg.on_error == "stop":
            raise CheckpointError(f"{message} (checkpoint.on_error=stop)") from exc
        log.error("%s; training goes on (checkpoint.on_error=continue)", message)
        return None
    _prune(run_dir, cfg.keep)
    return final


def write_state(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """The arrays as an uncompressed .npz at `path`."""
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def _prune(run_dir: Path, keep: int) -> None:
    for old in saved(run_dir)[keep:]:
        if old == checkpoint_dir(run_dir):  # the single-directory layout: its two files
            for name in (STATE, META):
                (old / name).unlink(missing_ok=True)
        else:
            shutil.rmtree(old, ignore_errors=True)


def read_meta(run_dir: Path) -> dict[str, Any]:
    """The metadata of the newest checkpoint whose meta.json reads back (CheckpointError when
    there is none): the config a resume is checked against."""
    problems = []
    for where in saved(run_dir):
        try:
            return _meta(where)
        except CheckpointError as exc:
            problems.append(str(exc))
    if not problems:
        raise _none_there(run_dir)
    raise CheckpointError(f"resume={run_dir}: no readable checkpoint: " + "; ".join(problems))


def check_steps(run_dir: Path, meta: dict[str, Any], steps: int) -> None:
    """CheckpointError when `steps` (the run's total) is below the step of the checkpoint a
    resume would continue from (`meta`, read_meta's): such a run has nothing left to do and
    would end at the checkpoint's step, not at `steps`."""
    if steps < meta["step"]:
        raise CheckpointError(
            f"resume={run_dir}: steps={steps} is below the step of its newest checkpoint, "
            f"{meta['step']} (steps is the run's total, not the steps to add); pass "
            f"steps={meta['step']} or more"
        )


def _meta(where: Path) -> dict[str, Any]:
    path = where / META
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: unreadable checkpoint metadata ({exc})") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else meta
        raise CheckpointError(
            f"{path}: checkpoint format {got!r}, expected {FORMAT} (a checkpoint of another "
            "version of the step cannot be resumed bit for bit; start the run afresh)"
        )
    for key, kind in _META_TYPES.items():
        if key not in meta:
            raise CheckpointError(f"{path}: checkpoint metadata lacks {key!r}")
        value = meta[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise CheckpointError(f"{path}: checkpoint metadata {key}={_short(value)}, "
                                  f"expected {_kind_name(kind)}")  # fmt: skip
    if not isinstance(meta.get("identity"), str | None):
        raise CheckpointError(f"{path}: checkpoint metadata identity={_short(meta['identity'])}, "
                              "expected a string")  # fmt: skip
    return meta


# what each key of meta.json must hold (identity: a string, absent in older checkpoints)
_META_TYPES: dict[str, type | tuple[type, ...]] = {
    "step": int, "with_replay": bool, "host": dict, "config": str}  # fmt: skip


def _kind_name(kind: type | tuple[type, ...]) -> str:
    return {int: "a whole number", bool: "true or false", dict: "an object",
            str: "a string"}.get(kind, str(kind))  # type: ignore[call-overload]  # fmt: skip


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _load(where: Path, trainer: Trainer) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A checkpoint's meta and the arrays the trainer needs from it, every one checked; nothing
    is written into the trainer here."""
    meta = _meta(where)
    path = where / STATE
    try:
        with np.load(path, allow_pickle=False) as npz:
            saved_arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        why = f"{type(exc).__name__}: {exc}"
        raise CheckpointError(f"{path}: unreadable checkpoint ({why})") from exc
    step = saved_arrays.pop("__step__", np.array([-1]))
    if step.shape != (1,) or int(step[0]) != meta["step"]:
        raise CheckpointError(f"{path} and the meta.json beside it disagree on the step")
    wanted = trainer.state_arrays(bool(meta["with_replay"]))
    missing = sorted(set(wanted) - set(saved_arrays))
    if missing:
        raise CheckpointError(f"{path}: lacks {', '.join(missing[:5])} that this config needs")
    for key, device in wanted.items():
        host = saved_arrays[key]
        if host.shape != tuple(device.shape) or host.dtype != device.dtype:
            raise CheckpointError(
                f"{path}: {key} is {host.dtype}{list(host.shape)} but this config has "
                f"{device.dtype}{list(device.shape)}; resume with the checkpoint's config"
            )
    return meta, {k: saved_arrays[k] for k in wanted}


def restore(run_dir: Path, trainer: Trainer) -> dict[str, Any]:
    """Write the newest usable checkpoint's arrays back into `trainer`; its meta. A checkpoint
    that cannot be used is logged with its reason and the next older one is tried."""
    problems = []
    for where in saved(run_dir):
        try:
            meta, arrays = _load(where, trainer)
        except CheckpointError as exc:
            problems.append(str(exc))
            log.warning("resume: %s; trying an older checkpoint", exc)
            continue
        if problems:
            log.warning("resume: using the checkpoint at step %d (%s) instead", meta["step"], where)
        be = trainer.backend
        for key, device in trainer.state_arrays(bool(meta["with_replay"])).items():
            be.write(device, arrays[key])
        trainer.restore_host_state(meta["host"], bool(meta["with_replay"]))
        return meta
    if not problems:
        raise _none_there(run_dir)
    raise CheckpointError(
        f"resume={run_dir}: no usable checkpoint ({'; '.join(problems)}). Start the run afresh "
        f"without resume=, or remove the damaged directories under {checkpoint_dir(run_dir)}"
    )
