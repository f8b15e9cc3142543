"""One live owner per run directory, and the identity a resume checks.

Ownership. A run (or a sweep, for its sweep directory) holds an exclusive `flock` on
`<dir>/.owner.lock` from before its first write until it ends, and names itself in
`<dir>/owner.json` (pid, host, start time, cluster job id, MLflow run id once known). A second
run into an owned directory is refused naming the owner. The kernel drops a lock whose process
died, so a free lock beside an owner.json that was never removed is a stale claim: taken over
with a warning when its process was on this host (or was an earlier start of this same cluster
job, requeued on another node), refused when it names another host, whose processes cannot be
checked from here. On a network file system whose locks are not shared between nodes the
owner.json of another host still refuses, which is the reason it names the host.

Identity. A fresh run writes `<dir>/identity.json` (a random id, its seed, a digest of the market
it trains and is evaluated on, and the MLflow run id once known) before anything else of its
own; checkpoints carry the id. A fresh run into a directory that already holds a run is refused
(`resume=` continues that run); a resume is refused when the directory's identity disagrees with
the config (seed), the market (digest), its tracking.json (run id) or its newest checkpoint.
A directory whose run stopped before recording anything (no diag.jsonl line, no checkpoint) may
be started over by the same command.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import hashlib
import json
import logging
import os
import socket
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from alpha_rl.errors import AlphaRlError, CheckpointError
from alpha_rl.tracking.records import why

log = logging.getLogger("alpha_rl")

LOCK_FILE = ".owner.lock"
OWNER_FILE = "owner.json"
IDENTITY_FILE = "identity.json"
DIAG_FILE, CHECKPOINTS = "diag.jsonl", "checkpoint"


class RunDirError(AlphaRlError):
    """A run directory is owned by another live run, holds another run, or cannot be used."""


@dataclass
class _Held:
    fd: int
    count: int


_held: dict[Path, _Held] = {}  # directories this process owns, with their claim counts


def job_id() -> str | None:
    """The cluster job this process belongs to (submitit's job id, which a requeued job keeps;
    else SLURM_JOB_ID), or None outside a cluster job."""
    if os.environ.get("SUBMITIT_EXECUTOR"):
        try:
            import submitit

            return str(submitit.JobEnvironment().job_id)
        except Exception:  # not a submitit job after all: fall back to SLURM's variables
            pass
    return os.environ.get("SLURM_JOB_ID")


def make_dir(directory: Path, what: str) -> Path:
    """`directory` made (with its parents), absolute; RunDirError naming it and the reason."""
    directory = Path(directory).expanduser().absolute()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(
            f"{what} {directory} cannot be created ({why(exc)}); choose a writable place "
            "(hydra.run.dir, hydra.sweep.dir or resume=)"
        ) from exc
    if not os.access(directory, os.W_OK | os.X_OK):
        raise RunDirError(f"{what} {directory} is not writable; choose another place "
                          "(hydra.run.dir, hydra.sweep.dir) or fix its permissions")  # fmt: skip
    return directory


def claim(directory: Path, what: str = "run directory") -> Path:
    """Own `directory` (made if absent) until `release`: RunDirError when a live process owns it.
    Claims of one process nest: the directory is released at the last `release`."""
    directory = make_dir(directory, what).resolve()
    held = _held.get(directory)
    if held is not None:
        held.count += 1
        return directory
    lock = directory / LOCK_FILE
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise RunDirError(f"{what} {directory}: cannot open {lock} ({why(exc)})") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
            raise RunDirError(f"{what} {directory}: cannot lock {lock} ({why(exc)})") from exc
        raise RunDirError(f"{what} {directory} is in use by {describe(read_owner(directory))}; "
                          "give this run another directory (hydra.run.dir / hydra.sweep.dir), "
                          "or wait for that one to end") from None  # fmt: skip
    try:
        _take_over(directory, what)
        _write_owner(directory, None)
    except BaseException:
        os.close(fd)
        raise
    _held[directory] = _Held(fd, 1)
    return directory


def release(directory: Path) -> None:
    """Give up one claim of `directory`; the last removes owner.json and drops the lock."""
    directory = Path(directory).expanduser().absolute().resolve()
    held = _held.get(directory)
    if held is None:
        return
    held.count -= 1
    if held.count > 0:
        return
    del _held[directory]
    try:
        (directory / OWNER_FILE).unlink(missing_ok=True)
    except OSError as exc:  # a full or read-only disk: the lock below is what counts
        log.warning("could not remove %s (%s)", directory / OWNER_FILE, exc)
    os.close(held.fd)


@contextmanager
def owned(directory: Path, what: str = "run directory") -> Iterator[Path]:
    """`claim` for the duration of the block (released however it ends)."""
    path = claim(directory, what)
    try:
        yield path
    finally:
        release(path)


def set_run_id(directory: Path, run_id: str | None) -> None:
    """Name the MLflow run in the owner record of a directory this process owns."""
    directory = Path(directory).resolve()
    if run_id and directory in _held:
        _write_owner(directory, run_id)


def read_owner(directory: Path) -> dict[str, Any] | None:
    """The owner record of `directory` (None when absent or unreadable)."""
    try:
        record = json.loads((Path(directory) / OWNER_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def describe(record: dict[str, Any] | None) -> str:
    """'pid 123 on host h since 2026-12-02T10:00:00 (MLflow run abc)' of an owner record."""
    if record is None:
        return "another process (its owner.json is missing or unreadable)"
    run = f", MLflow run {record['run_id']}" if record.get("run_id") else ""
    job = f", cluster job {record['job']}" if record.get("job") else ""
    return (f"pid {record.get('pid')} on host {record.get('host')} since "
            f"{record.get('started')}{job}{run}")  # fmt: skip


def _take_over(directory: Path, what: str) -> None:
    """With the lock held: an owner.json left behind by a process that died (never released)."""
    record = read_owner(directory)
    if record is None:
        if (directory / OWNER_FILE).exists():
            log.warning("%s %s: its owner.json is unreadable; taking the directory over",
                        what, directory)  # fmt: skip
        return
    me, job = socket.gethostname(), job_id()
    if job is not None and record.get("job") == job:
        log.info("%s %s: taking over from an earlier start of cluster job %s (%s)", what,
                 directory, job, describe(record))  # fmt: skip
        return
    if record.get("host") != me:
        raise RunDirError(
            f"{what} {directory} is claimed by {describe(record)}, another host, whose process "
            f"cannot be checked from here; if it is gone, delete {directory / OWNER_FILE} and "
            "start again"
        )
    log.warning("%s %s: taking over from %s, which ended without releasing it (no process "
                "holds its lock)", what, directory, describe(record))  # fmt: skip


def _write_owner(directory: Path, run_id: str | None) -> None:
    record = {"pid": os.getpid(), "host": socket.gethostname(), "started": _started(),
              "job": job_id(), "run_id": run_id}  # fmt: skip
    previous = read_owner(directory) if run_id else None
    if previous and previous.get("pid") == os.getpid():
        record["started"] = previous.get("started", record["started"])
    _write_json(directory / OWNER_FILE, record)


_START = dt.datetime.now(dt.UTC).astimezone().isoformat(timespec="seconds")


def _started() -> str:
    return _START


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """`data` into `path` whole (a temporary file renamed into place)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise RunDirError(f"cannot write {path} ({why(exc)}); free space or choose another "
                          "directory") from exc  # fmt: skip


# --- identity ---


def market_digest(*books: Any) -> str:
    """16 hex digits of sha256 over the books' prices, sizes, timestamps and tick sizes."""
    h = hashlib.sha256()
    for book in books:
        for name in ("bid_px", "ask_px", "bid_sz", "ask_sz"):
            h.update(np.ascontiguousarray(getattr(book, name), dtype=np.float64).tobytes())
        if book.timestamps is not None:
            h.update(np.ascontiguousarray(book.timestamps).tobytes())
        h.update(repr(float(book.tick_size)).encode())
    return h.hexdigest()[:16]


def holds_run(directory: Path) -> list[str]:
    """What in `directory` shows that a run recorded results there ([] when nothing): a diag.jsonl
    with a line, a checkpoint. A run stopped before its first step left neither, and the same
    command may start it over."""
    directory = Path(directory)
    found = []
    diag = directory / DIAG_FILE
    if diag.is_file() and diag.stat().st_size > 0:
        found.append(DIAG_FILE)
    checkpoints = directory / CHECKPOINTS
    if checkpoints.is_dir() and any(checkpoints.iterdir()):
        found.append(f"{CHECKPOINTS}/")
    return found


def refuse_a_used_dir(directory: Path) -> None:
    """RunDirError when a fresh run would write into a directory that holds a run already."""
    found = holds_run(directory)
    if not found:
        return
    identity = read_identity(directory)
    who = ""
    if identity is not None:
        run = f", MLflow run {identity['run_id']}" if identity.get("run_id") else ""
        who = f" (seed {identity.get('seed')}, started {identity.get('created')}{run})"
    raise RunDirError(
        f"run directory {directory} already holds a run{who}: {', '.join(found)}; continue it "
        f"with resume={directory}, or give this run another directory (hydra.run.dir)"
    )


def write_identity(directory: Path, seed: int, market: str) -> dict[str, Any]:
    """A fresh run's identity.json (before anything else of its own is written)."""
    identity = {"id": uuid.uuid4().hex, "created": _started(), "host": socket.gethostname(),
                "seed": seed, "market": market, "run_id": None}  # fmt: skip
    _write_json(Path(directory) / IDENTITY_FILE, identity)
    return identity


def read_identity(directory: Path) -> dict[str, Any] | None:
    """identity.json of `directory`; None when absent; CheckpointError naming it when damaged."""
    path = Path(directory) / IDENTITY_FILE
    if not path.exists():
        return None
    try:
        identity = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(
            f"{path}: unreadable ({exc}); the run directory's identity cannot be checked: "
            "restore the file or start afresh"
        ) from exc
    fields = {"id": str, "seed": int, "market": str}
    bad = [k for k, t in fields.items() if not isinstance(identity, dict)
           or not isinstance(identity.get(k), t) or isinstance(identity.get(k), bool)]  # fmt: skip
    if bad:
        raise CheckpointError(f"{path}: {', '.join(bad)} missing or of the wrong type; restore "
                              "the file or start afresh")  # fmt: skip
    return identity


def set_identity_run(directory: Path, identity: dict[str, Any], run_id: str | None) -> None:
    """Record the MLflow run id in identity.json once it is known (a resume keeps it)."""
    if run_id and identity.get("run_id") != run_id:
        identity["run_id"] = run_id
        _write_json(Path(directory) / IDENTITY_FILE, identity)


def check_identity(directory: Path, identity: dict[str, Any], *, seed: int, market: str,
                   run_id: str | None, checkpoint_id: str | None) -> None:  # fmt: skip
    """CheckpointError naming what disagrees when `resume=directory` would continue another run
    than the one the directory started (seed, market, MLflow run, checkpoint)."""
    where = f"resume={directory}"
    problems = []
    if identity["seed"] != seed:
        problems.append(f"the run started with seed {identity['seed']}, this config has {seed}")
    if identity["market"] != market:
        problems.append(f"its market data had digest {identity['market']}, the market built now "
                        f"has {market} (the file changed, or market settings differ)")  # fmt: skip
    if identity.get("run_id") and run_id and identity["run_id"] != run_id:
        problems.append(f"it reported to MLflow run {identity['run_id']}, its tracking.json "
                        f"names {run_id}")  # fmt: skip
    if checkpoint_id is not None and checkpoint_id != identity["id"]:
        problems.append(f"its checkpoint belongs to run {checkpoint_id}, not {identity['id']}")
    if problems:
        raise CheckpointError(f"{where}: this directory's identity ({IDENTITY_FILE}) disagrees: "
                              + "; ".join(problems) + ". Resume with the run's own config and "
                              "data, or start afresh in another directory")  # fmt: skip


# --- the Hydra callback ---


class RunDirCallback(Callback):
    """Hydra callback: a single run owns its output directory from before Hydra writes into it
    (.hydra/, the log), a multirun its sweep directory for the whole sweep; refused in one line,
    exit 2, when another live process owns it or it cannot be created."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._claim(OmegaConf.select(config, "hydra.run.dir"), "run directory")

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        release(Path(str(OmegaConf.select(config, "hydra.run.dir"))))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._claim(OmegaConf.select(config, "hydra.sweep.dir"), "sweep directory")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        release(Path(str(OmegaConf.select(config, "hydra.sweep.dir"))))

    @staticmethod
    def _claim(directory: Any, what: str) -> None:
        try:
            claim(Path(str(directory)), what)
        except RunDirError as exc:  # logging is not set up yet: say it on stderr
            print(f"error: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
