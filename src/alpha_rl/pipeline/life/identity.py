"""What a run directory holds, and the identity a resume checks.

A fresh run writes `<dir>/identity.json` (a random id, its seed, a digest of the market it trains
and is evaluated on, its cluster job, and the MLflow run id once known) before anything else of
its own; checkpoints carry the id. A fresh run into a directory that holds a run (a diag.jsonl
line, a checkpoint) is refused, `resume=` continues that run, and so is a sweep into a sweep
directory whose jobs hold runs; a directory whose run stopped before recording anything may be
started over by the same command, and so may a cluster job requeued before its first checkpoint
(its earlier attempt's diag.jsonl is set aside, not mixed in). A resume is refused when the
directory's identity disagrees with the config (seed), the market (digest), its tracking.json
(run id) or the checkpoint it restores. RunDirCallback (conf/train.yaml's callbacks) claims a run's
or sweep's directory (pipeline/life/owner.py) and makes these refusals before Hydra writes into it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from alpha_rl.errors import CheckpointError, WriteError
from alpha_rl.masking import MASK, mask
from alpha_rl.pipeline.life.owner import RunDirError, claim, job_id, release, write_record
from alpha_rl.tracking.delivery import TRACKING_FILE
from alpha_rl.tracking.records import dumps, read_diag, replace_text, why
from alpha_rl.tracking.relocate import check_continued_store
from alpha_rl.tracking.tracker import DIAG_FILE

log = logging.getLogger("alpha_rl")

IDENTITY_FILE = "identity.json"


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
    with a line, a checkpoint (a `<step>.tmp/` of a save cut short does not count)."""
    from alpha_rl.pipeline.life.checkpoint import saved

    directory = Path(directory)
    found = []
    diag = directory / DIAG_FILE
    if diag.is_file() and diag.stat().st_size > 0:
        found.append(DIAG_FILE)
    if saved(directory):
        found.append("checkpoint/")
    return found


def refuse_a_used_dir(directory: Path) -> None:
    """RunDirError when a fresh run would write into a directory that holds a run already (see
    the module docstring for the start-overs it lets through)."""
    found = holds_run(directory)
    if not found:
        return
    identity = _identity_or_none(directory)
    job = job_id()
    if found == [DIAG_FILE] and job is not None and (identity or {}).get("job") == job:
        _set_aside(Path(directory) / DIAG_FILE, job)
        return
    who = ""
    if identity is not None:
        run = f", MLflow run {identity['run_id']}" if identity.get("run_id") else ""
        who = f" (seed {identity.get('seed')}, started {identity.get('created')}{run})"
    raise RunDirError(
        f"run directory {directory} already holds a run{who}: {', '.join(found)}; continue it "
        f"with resume={directory}, or give this run another directory (hydra.run.dir)"
    )


def refuse_a_used_sweep(sweep_dir: Path) -> None:
    """RunDirError when the job directories of `sweep_dir` hold runs of an earlier sweep."""
    sweep_dir = Path(sweep_dir)
    used = sorted(p.name for p in sweep_dir.iterdir() if p.is_dir() and holds_run(p))
    if used:
        shown = ", ".join(f"{name}/" for name in used[:5]) + (", ..." if len(used) > 5 else "")
        raise RunDirError(
            f"sweep directory {sweep_dir} already holds the runs of an earlier sweep ({shown}); "
            "give this sweep another directory (hydra.sweep.dir), or resume its runs one by "
            "one with resume="
        )


def _set_aside(diag: Path, job: str) -> None:
    """A requeued job that saved no checkpoint starts over: its earlier attempt's diag.jsonl is
    kept beside, as diag.attempt<n>.jsonl, never mixed with the new one."""
    n = 1
    while (aside := diag.with_name(f"diag.attempt{n}.jsonl")).exists():
        n += 1
    try:
        diag.rename(aside)
    except OSError as exc:
        raise RunDirError(f"cannot set {diag} aside for the requeued job's start ({exc})") from exc
    log.warning("cluster job %s was requeued before its first checkpoint: it starts over, the "
                "earlier attempt's records kept in %s", job, aside)  # fmt: skip


def write_identity(directory: Path, seed: int, market: str) -> dict[str, Any]:
    """A fresh run's identity.json (before anything else of its own is written); a seed that is
    a secret of the environment is kept masked, as `***`."""
    created = dt.datetime.now(dt.UTC).astimezone().isoformat(timespec="seconds")
    identity = {"id": uuid.uuid4().hex, "created": created, "host": socket.gethostname(),
                "job": job_id(), "seed": mask(seed), "market": market, "run_id": None}  # fmt: skip
    write_record(Path(directory) / IDENTITY_FILE, identity)
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
    if bad == ["seed"] and identity["seed"] == MASK:  # a secret's, as write_identity keeps it
        bad = []
    if bad:
        raise CheckpointError(f"{path}: {', '.join(bad)} missing or of the wrong type; restore "
                              "the file or start afresh")  # fmt: skip
    return identity


def _identity_or_none(directory: Path) -> dict[str, Any] | None:
    try:
        return read_identity(directory)
    except CheckpointError:  # only describes the holder here: a damaged one says nothing
        return None


def set_identity_run(directory: Path, identity: dict[str, Any], run_id: str | None) -> None:
    """Record the MLflow run id in identity.json once it is known (a resume keeps it); best
    effort: a file that cannot be written is a warning (the run goes on, a resume then checks
    the run id no more)."""
    if not run_id or identity.get("run_id") == run_id:
        return
    identity["run_id"] = run_id
    try:
        write_record(Path(directory) / IDENTITY_FILE, identity)
    except RunDirError as exc:
        log.warning("%s", exc)


def check_identity(directory: Path, identity: dict[str, Any], *, seed: int, market: str,
                   run_id: str | None, checkpoint_id: str | None) -> None:  # fmt: skip
    """CheckpointError naming what disagrees when `resume=directory` would continue another run
    than the one the directory started (seed, market, MLflow run, checkpoint)."""
    problems = []
    if identity["seed"] != mask(seed):  # masked as written
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
        raise CheckpointError(
            f"resume={directory}: this directory's identity ({IDENTITY_FILE}) disagrees: "
            + "; ".join(problems)
            + ". Resume with the run's own config and data, or start afresh in another directory"
        )


# --- the side files a resume reads ---


def keep_diag_until(path: Path, step: int, log_every: int) -> None:
    """Drop the diag JSONL lines after `step` (written after the checkpoint a resume starts at)
    and any torn or damaged line (read_diag warns); the file is replaced whole. A missing file
    is a warning once the run has passed a log point (every `log_every` steps): the run's record
    of its steps up to `step` is gone."""
    if not path.is_file():
        if step >= log_every:
            log.warning("resume: %s is missing: the run's record of its first %d steps "
                        "(metrics, evaluations) is gone, so its curves, summary, objective and "
                        "diag.jsonl artifact cover only the steps from here on; to keep them, "
                        "stop and put the file back (an earlier start that ended uploaded it "
                        "as the run's diag.jsonl artifact)", path, step)  # fmt: skip
        return
    kept = [r for r in read_diag(path) if r["step"] <= step]
    try:
        replace_text(path, "".join(f"{dumps(r)}\n" for r in kept))
    except OSError as exc:
        raise WriteError(f"cannot rewrite {path} for the resume ({why(exc)}); free space and "
                         "resume again") from exc  # fmt: skip


def previous_run_id(run_dir: Path) -> str | None:
    """The MLflow run id a run directory reported to (its tracking.json), if any; a damaged
    file is a CheckpointError naming it."""
    return previous_run(run_dir)[0]


def previous_run(run_dir: Path) -> tuple[str | None, str | None]:
    """(MLflow run id, store URI) a run directory reported to (its tracking.json), each None
    where not recorded; a damaged file is a CheckpointError naming it."""
    path = run_dir / TRACKING_FILE
    if not path.is_file():
        return None, None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        record, problem = None, f"unreadable ({exc})"
    else:
        problem = "not a JSON object with a run_id string"
    if isinstance(record, dict) and all(
        isinstance(record.get(key, ""), str | None) for key in ("run_id", "uri")
    ):
        return record.get("run_id") or None, record.get("uri") or None
    raise CheckpointError(
        f"{path}: {problem}; it names the MLflow run this directory reports to: restore it, "
        "or delete it to continue the run's training into a new MLflow run"
    )


def check_resume_store(run_dir: Path, uri: str) -> None:
    """TrackingReadError (one line naming both) when a resume's tracking.uri is another store
    than the one its MLflow run is in, as its tracking.json records it, unless that store is a
    relocated copy (tracking/relocate.py)."""
    run_id, recorded = previous_run(run_dir)
    if run_id is not None and recorded is not None:
        check_continued_store(run_dir, run_id, recorded, uri)


# --- the Hydra callback ---


class RunDirCallback(Callback):
    """Hydra callback: a single run owns its output directory from before Hydra writes into it
    (.hydra/, the log), a multirun its sweep directory for the whole sweep; refused in one line,
    exit 2, when another live process owns it, it cannot be created, or (without resume=) it
    holds a run already, whose .hydra/ Hydra would otherwise overwrite."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        directory = self._claim(OmegaConf.select(config, "hydra.run.dir"), "run directory")
        if OmegaConf.select(config, "resume", default=None) is None:
            self._refuse(lambda: refuse_a_used_dir(directory))

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        release(Path(str(OmegaConf.select(config, "hydra.run.dir"))))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        directory = self._claim(OmegaConf.select(config, "hydra.sweep.dir"), "sweep directory")
        self._refuse(lambda: refuse_a_used_sweep(directory))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        release(Path(str(OmegaConf.select(config, "hydra.sweep.dir"))))

    def _claim(self, directory: Any, what: str) -> Path:
        return self._refuse(lambda: claim(Path(str(directory)), what))

    @staticmethod
    def _refuse(check: Any) -> Any:
        try:
            return check()
        except RunDirError as exc:  # logging is not set up yet: say it on stderr
            print(f"error: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
