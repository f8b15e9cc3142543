"""`python -m alpha_rl.tracking sync <run_dir>`, `... relocate <store.db>`, `... reap
[--older-than 10m] [--mark]`, `... server --db URI` and `... load --uri URI`: the command line of
the tracking tools, dispatching to alpha_rl.tracking.sync, .relocate, .reap, .server and .load
(which import nothing of it)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

from alpha_rl.errors import AlphaRlError
from alpha_rl.masking import hide_password
from alpha_rl.tracking import load, server
from alpha_rl.tracking.stores import bound_requests
from alpha_rl.tracking.sync import sync_run


def _relocate(store: Path, artifacts: Path | None) -> int:
    from alpha_rl.tracking.relocate import relocate_artifacts

    moved = relocate_artifacts(store, artifacts)
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
    local = bound_requests()
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or local.uri
    dead = find_dead(uri, older_than_s, experiment, now=now)
    if mark:
        mark_dead(uri, dead)
    where = hide_password(uri) + (f", experiment {experiment!r}" if experiment else "")
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
    """Command line entry: `sync <run_dir>` (exit 0 when everything was sent),
    `relocate <store.db> [--artifacts DIR]` and `reap [--uri URI] [--older-than 10m]
    [--experiment NAME] [--mark]` (exit 0), each exiting 2 with one line on a store, experiment
    or run it cannot read (never creating a store) and on bad arguments; `server --db URI ...`
    (runs `mlflow server` watched; 2 when refused, 128 + the signal's number when stopped) and
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
    try:
        if args.command == "relocate":
            return _relocate(args.store, args.artifacts)
        if args.command == "reap":
            return _reap(args.uri, args.older_than, args.experiment, args.mark)
        if args.command == "server":
            return server.serve(args)
        if args.command == "load":
            return load.main(args)
        return _sync(args.run_dir)
    except AlphaRlError as exc:  # a store, experiment or run that cannot be read
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _sync(run_dir: Path) -> int:
    if not run_dir.is_dir():
        raise AlphaRlError(f"{run_dir} is not a directory: give a job's output directory")
    bound_requests()
    try:
        sent = sync_run(run_dir, strict=True)
    except ValueError as exc:  # a damaged unsent file (the message names it)
        raise AlphaRlError(str(exc)) from None
    print(f"sent {sent} metric values from {run_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
