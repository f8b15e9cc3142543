"""`python -m alpha_rl.tracking sync <run_dir>`: send what a job left in unsent.jsonl.

The run is created if the job never reached the store; its terminal status and end time are the
ones the job recorded. A file sent in full is renamed `<name>.sent`; one the store stops taking
part-way is rewritten with the rest, so sync can simply be run again. Before anything is sent,
sync tells a store that is gone or damaged, and a run that is not in it (the store was replaced),
from a store that does not answer now: only the last is worth trying again later. It creates a
store only for a run that never reached one (as the job would have).

The same command line also offers `relocate <store.db>` (alpha_rl.tracking.relocate) and
`reap [--older-than 10m] [--mark]`: list, and with --mark end FAILED, the RUNNING runs whose
process stopped sending heartbeats (alpha_rl.tracking.reap); `server` (an MLflow server over a
database, alpha_rl.tracking.server) and `load` (many writers at once, alpha_rl.tracking.load).
"""

from __future__ import annotations

import logging
from pathlib import Path

from alpha_rl.errors import AlphaRlError
from alpha_rl.tracking.config import MAX_METRICS_PER_REQUEST
from alpha_rl.tracking.delivery import Delivery
from alpha_rl.tracking.reader import RunReader
from alpha_rl.tracking.records import RunSpec, read_unsent, write_unsent
from alpha_rl.tracking.store import Store, sqlite_file
from alpha_rl.tracking.stores import (
    NotInStoreError,
    StoreDownError,
    TrackingReadError,
    store_name,
)

log = logging.getLogger("alpha_rl.tracking")

UNSENT_GLOB = "unsent*.jsonl"


class StoreUnreachableError(AlphaRlError):
    """The tracking store does not answer now; unsent.jsonl keeps what is left: try later."""


def unsent_files(run_dir: Path) -> list[Path]:
    """run_dir's unsent.jsonl, unsent.1.jsonl, ... oldest first (the order they must be sent)."""

    def index(path: Path) -> int:
        middle = path.name[len("unsent.") : -len(".jsonl")]
        return int(middle) if middle.isdigit() else 0

    return sorted(run_dir.glob(UNSENT_GLOB), key=index)


def check_destination(spec: RunSpec, path: Path) -> None:
    """Refuse, before anything of `path` is sent, a store that is gone or cannot be read and a
    run that is not in it (TrackingReadError), or a store that does not answer now
    (StoreUnreachableError). A run that never reached the store may find no SQLite file: sync
    creates it there, as the job would have."""
    db = sqlite_file(spec.uri)
    if spec.run_id is None and db is not None and not db.exists():
        return
    keeps = f"{path} keeps what is unsent"
    logged = f"run {spec.run_id} was logged" if spec.run_id else "the job logged"
    try:
        reader = RunReader(spec.uri, f"{logged} there: put that store back")
        if spec.run_id is None:
            reader.ping()
        else:
            reader.run(spec.run_id, lambda key: False)
    except StoreDownError as exc:
        raise StoreUnreachableError(f"{exc} ({keeps})") from None
    except NotInStoreError:
        raise TrackingReadError(
            f"run {spec.run_id} is not in tracking store {store_name(spec.uri)}: the store was "
            f"replaced, or is another one than the job logged to; put back the one that holds "
            f"the run ({keeps})"
        ) from None
    except TrackingReadError as exc:
        raise type(exc)(f"{exc} ({keeps})") from None


def sync_run(run_dir: Path, strict: bool = False) -> int:
    """Send run_dir's unsent*.jsonl to its store; the number of metric values sent. `strict`
    (the command) first refuses a store that is gone or cannot be read and a run not in it
    (check_destination); without it (a resume sending an earlier attempt's leftovers, best
    effort) whatever stops the sending is StoreUnreachableError."""
    run_dir = Path(run_dir).resolve()
    sent = 0
    for path in unsent_files(run_dir):
        spec, box = read_unsent(path)
        if strict:
            check_destination(spec, path)
        # tracking.json goes to the run's own directory, also when the data waited elsewhere
        # (a fallback directory, its disk full), so that a resume continues this MLflow run
        home = Path(spec.run_dir) if spec.run_dir and Path(spec.run_dir).is_dir() else run_dir
        delivery = Delivery(spec, Store(spec.uri, retry_s=0), home, MAX_METRICS_PER_REQUEST)
        ok = delivery.send(box)
        sent += delivery.sent_metrics
        if not ok:
            write_unsent(path, delivery.spec, box)
            raise StoreUnreachableError(
                f"tracking store {store_name(spec.uri)} does not answer; {len(box)} item(s) "
                f"remain in {path} ({sent} metric values sent): run this command again later"
            )
        path.rename(path.with_name(path.name + ".sent"))
        log.info("sent %s to run %s of %s", path, delivery.spec.run_id, store_name(spec.uri))
    return sent
