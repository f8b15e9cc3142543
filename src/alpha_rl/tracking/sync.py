"""`python -m alpha_rl.tracking sync <run_dir>`: send what a job left in unsent.jsonl.

The run is created if the job never reached the store; its terminal status and end time are the
ones the job recorded. A file sent in full is renamed `<name>.sent`; one the store stops taking
part-way is rewritten with the rest, so sync can simply be run again.
"""

from __future__ import annotations

import argparse
import logging
import sqlite3
import sys
from pathlib import Path

from alpha_rl.errors import AlphaRlError
from alpha_rl.tracking.config import MAX_METRICS_PER_REQUEST
from alpha_rl.tracking.delivery import Delivery
from alpha_rl.tracking.records import read_unsent, write_unsent
from alpha_rl.tracking.store import Store

log = logging.getLogger("alpha_rl.tracking")

UNSENT_GLOB = "unsent*.jsonl"


class StoreUnreachableError(AlphaRlError):
    """The tracking store still cannot be reached; unsent.jsonl keeps what is left."""


def unsent_files(run_dir: Path) -> list[Path]:
    """run_dir's unsent.jsonl, unsent.1.jsonl, ... oldest first (the order they must be sent)."""

    def index(path: Path) -> int:
        middle = path.name[len("unsent.") : -len(".jsonl")]
        return int(middle) if middle.isdigit() else 0

    return sorted(run_dir.glob(UNSENT_GLOB), key=index)


def sync_run(run_dir: Path) -> int:
    """Send run_dir's unsent*.jsonl to its store; the number of metric values sent."""
    run_dir = Path(run_dir).resolve()
    sent = 0
    for path in unsent_files(run_dir):
        spec, box = read_unsent(path)
        delivery = Delivery(spec, Store(spec.uri, retry_s=0), run_dir, MAX_METRICS_PER_REQUEST)
        ok = delivery.send(box)
        sent += delivery.sent_metrics
        if not ok:
            write_unsent(path, delivery.spec, box)
            raise StoreUnreachableError(
                f"MLflow store {spec.uri} is still unreachable; {len(box)} item(s) remain in "
                f"{path} ({sent} metric values sent). Run this command again later."
            )
        path.rename(path.with_name(path.name + ".sent"))
        log.info("sent %s to run %s of %s", path, delivery.spec.run_id, spec.uri)
    return sent


def _relocate(store: Path, artifacts: Path | None) -> int:
    from alpha_rl.tracking.relocate import relocate_artifacts

    try:
        moved = relocate_artifacts(store, artifacts)
    except (ValueError, sqlite3.DatabaseError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for m in moved:
        print(f"experiment {m.experiment!r}: {m.old} -> {m.new} ({m.runs} runs)")
    if not moved:
        print(f"{store}: no artifact root to move")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command line entry: `sync <run_dir>` (exit 0 when everything was sent, else 1) and
    `relocate <store.db> [--artifacts DIR]`."""
    parser = argparse.ArgumentParser(
        prog="python -m alpha_rl.tracking", description="alpha_rl MLflow tracking tools"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    sync = commands.add_parser("sync", help="send a run directory's unsent.jsonl to MLflow")
    sync.add_argument("run_dir", type=Path, help="the job's output directory")
    move = commands.add_parser(
        "relocate", help="point a copied SQLite store at the mlartifacts/ folder beside it"
    )
    move.add_argument("store", type=Path, help="the SQLite file (e.g. mlflow.db)")
    move.add_argument("--artifacts", type=Path, help="the artifact folder (default: beside it)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "relocate":
        return _relocate(args.store, args.artifacts)
    if not args.run_dir.is_dir():
        print(f"error: {args.run_dir} is not a directory", file=sys.stderr)
        return 1
    try:
        sent = sync_run(args.run_dir)
    except (StoreUnreachableError, ValueError) as exc:  # ValueError: a damaged unsent file
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"sent {sent} metric values from {args.run_dir}")
    return 0
