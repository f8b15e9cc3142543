"""`python -m alpha_rl.tracking sync <run_dir>`: send what a job left in unsent.jsonl.

The run is created if the job never reached the store; its terminal status and end time are the
ones the job recorded. A file sent in full is renamed `<name>.sent`; one the store stops taking
part-way is rewritten with the rest, so sync can simply be run again.

The same command line also offers `relocate <store.db>` (alpha_rl.tracking.relocate) and
`reap [--older-than 10m] [--mark]`: list, and with --mark end FAILED, the RUNNING runs whose
process stopped sending heartbeats (alpha_rl.tracking.reap); `server` (an MLflow server over a
database, alpha_rl.tracking.server) and `load` (many writers at once, alpha_rl.tracking.load).
"""

from __future__ import annotations

import argparse
import logging
import os
import sqlite3
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf

from alpha_rl import paths
from alpha_rl.errors import AlphaRlError
from alpha_rl.tracking import load, server
from alpha_rl.tracking.config import MAX_METRICS_PER_REQUEST, TrackingConfig
from alpha_rl.tracking.delivery import Delivery
from alpha_rl.tracking.records import read_unsent, write_unsent
from alpha_rl.tracking.store import Store, set_http_limits

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


def _duration(text: str) -> float:
    from alpha_rl.tracking.reap import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _reap(uri: str | None, older_than_s: float, experiment: str | None, mark: bool) -> int:
    from alpha_rl.tracking.reap import describe, find_dead, format_duration, mark_dead

    now, limit = time.time(), format_duration(older_than_s)
    try:
        local = TrackingConfig.from_cfg(
            OmegaConf.load(paths.conf_dir() / "tracking" / "local.yaml")
        )
        set_http_limits(local.http_timeout_s, local.http_retries)
        uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or local.uri
        dead = find_dead(uri, older_than_s, experiment, now=now)
        if mark:
            mark_dead(uri, dead)
    except AlphaRlError as exc:  # the store or experiment cannot be read; a bad local.yaml
        print(f"error: {exc}", file=sys.stderr)
        return 1
    where = uri + (f", experiment {experiment!r}" if experiment else "")
    if not dead:
        print(f"no dead runs in {where}: every RUNNING run had a heartbeat in the last {limit}")
        return 0
    for run in dead:
        print(describe(run, now))
    done = "ended them FAILED" if mark else "they stay RUNNING (--mark ends them FAILED)"
    print(f"{len(dead)} dead run(s) in {where}, silent for over {limit}: {done}")
    return 0


def _add_reap(commands: argparse._SubParsersAction) -> None:
    reap = commands.add_parser(
        "reap",
        help="list (--mark: end FAILED) RUNNING runs whose process stopped sending heartbeats",
        description="List the RUNNING runs whose last sys/heartbeat (a run without one: its "
        "start time) is older than --older-than, with their host, pid, run dir and resume "
        "command; --mark ends them FAILED with the reason as the alpha_rl.failure_reason tag. "
        "Parent runs of sweeps (tag alpha_rl.sweep_dir) log no heartbeat and are skipped.",
    )
    reap.add_argument(
        "--uri",
        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else tracking.uri of "
        "conf/tracking/local.yaml, sqlite:///mlflow.db)",
    )
    reap.add_argument(
        "--older-than",
        type=_duration,
        default="10m",
        metavar="DURATION",
        help="silence that makes a run dead: 90s, 10m, 2h, 1d (default 10m); keep it longer "
        "than a live run's longest gap between two log points plus tracking.flush_every_s",
    )
    reap.add_argument(
        "--experiment", metavar="NAME", help="only this experiment (default: all of the store)"
    )
    reap.add_argument("--mark", action="store_true", help="end the dead runs FAILED")


def main(argv: list[str] | None = None) -> int:
    """Command line entry: `sync <run_dir>` (exit 0 when everything was sent, else 1),
    `relocate <store.db> [--artifacts DIR]`, `reap [--uri URI] [--older-than 10m]
    [--experiment NAME] [--mark]` (exit 0, 1 when the store or experiment cannot be read, 2 on
    bad arguments), `server --db URI ...` (becomes `mlflow server`; 2 when refused) and
    `load --uri URI ...` (0 when every value arrived, else 1)."""
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
    _add_reap(commands)
    server.add_parser(commands)
    load.add_parser(commands)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "relocate":
        return _relocate(args.store, args.artifacts)
    if args.command == "reap":
        return _reap(args.uri, args.older_than, args.experiment, args.mark)
    if args.command == "server":
        return server.serve(args)
    if args.command == "load":
        return load.main(args)
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
