"""One live owner per run directory.

A run (or a sweep, for its sweep directory) holds an exclusive `flock` on `<dir>/.owner.lock`
from before its first write until it ends, and names itself in `<dir>/owner.json` (pid, host,
start time, cluster job and restart count, MLflow run id once known). A second run into an owned
directory is refused naming the owner. The kernel drops a lock whose process died, so a free
lock beside an owner.json that was never removed is a stale claim: taken over with a warning
when its process was on this host, or was an earlier start of this same cluster job (SLURM
requeues a job under its id, on any node, with a higher restart count); refused when it names
another host, whose processes cannot be checked from here (on a network file system whose locks
are not shared between nodes, that record is what still refuses). The claim is released when the
run ends, however it ends (an exit through SystemExit too), and owner.json removed with it.

What a run directory holds, the identity a resume checks and the Hydra callback that claims a
run's or sweep's directory before Hydra writes into it are pipeline/life/identity.py's.
"""

from __future__ import annotations

import atexit
import datetime as dt
import errno
import fcntl
import json
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alpha_rl.errors import AlphaRlError
from alpha_rl.tracking.records import replace_text, why

log = logging.getLogger("alpha_rl")

LOCK_FILE = ".owner.lock"
OWNER_FILE = "owner.json"


class RunDirError(AlphaRlError):
    """A run directory is owned by another live run, holds another run, or cannot be used."""


@dataclass
class _Held:
    fd: int
    count: int
    started: str  # when this process claimed it


_held: dict[Path, _Held] = {}  # directories this process owns, with their claim counts


def release_all() -> None:
    """Give up every claim of this process; at exit too (a refused run leaves through
    SystemExit, past Hydra's on_run_end), so that no owner.json is left behind to look like a
    crashed owner."""
    for directory, held in list(_held.items()):
        held.count = 1
        release(directory)


atexit.register(release_all)


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


def job_restart() -> str | None:
    """How many times the cluster requeued this job (SLURM_RESTART_COUNT; None before any)."""
    return os.environ.get("SLURM_RESTART_COUNT")


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
    held = _Held(fd, 1, dt.datetime.now(dt.UTC).astimezone().isoformat(timespec="seconds"))
    try:
        _take_over(directory, what)
        _write_owner(directory, held, None)
    except BaseException:
        os.close(fd)
        raise
    _held[directory] = held
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
    """Name the MLflow run in the owner record of a directory this process owns (best effort:
    a record that cannot be written is a warning, the lock is what counts)."""
    held = _held.get(Path(directory).resolve())
    if run_id and held is not None:
        try:
            _write_owner(Path(directory).resolve(), held, run_id)
        except RunDirError as exc:
            log.warning("%s", exc)


def read_owner(directory: Path) -> dict[str, Any] | None:
    """The owner record of `directory` (None when absent or unreadable)."""
    try:
        record = json.loads((Path(directory) / OWNER_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def describe(record: dict[str, Any] | None) -> str:
    """'pid 123 on host h since 2026-12-02T10:00:00+00:00, MLflow run abc' of an owner record."""
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
    job = job_id()
    if job is not None and record.get("job") == job and record.get("restart") != job_restart():
        log.info("%s %s: taking over from an earlier start of cluster job %s (%s)", what,
                 directory, job, describe(record))  # fmt: skip
        return
    if record.get("host") != socket.gethostname():
        raise RunDirError(
            f"{what} {directory} is claimed by {describe(record)}, another host, whose process "
            f"cannot be checked from here; if it is gone, delete {directory / OWNER_FILE} and "
            "start again"
        )
    log.warning("%s %s: taking over from %s, which ended without releasing it (no process "
                "holds its lock)", what, directory, describe(record))  # fmt: skip


def _write_owner(directory: Path, held: _Held, run_id: str | None) -> None:
    record = {"pid": os.getpid(), "host": socket.gethostname(), "started": held.started,
              "job": job_id(), "restart": job_restart(), "run_id": run_id}  # fmt: skip
    write_record(directory / OWNER_FILE, record)


def write_record(path: Path, data: dict[str, Any]) -> None:
    """A JSON record of the run directory written whole; RunDirError naming it on failure."""
    try:
        replace_text(path, json.dumps(data, indent=1) + "\n")
    except OSError as exc:
        raise RunDirError(f"cannot write {path} ({why(exc)}); free space or choose another "
                          "directory") from exc  # fmt: skip
