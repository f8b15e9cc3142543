"""Tracking at cluster scale: 64 writer processes x 5,000 steps x 4 metrics through one MLflow
tracking server, its store SQLite or PostgreSQL, once undisturbed and once with the server killed
and restarted in the middle; the kill check's read going on beside them; every value checked.

    python3 benchmarks/tracking_load.py [--writers 64] [--steps 5000] [--stores sqlite postgresql]
                                        [--json out.json]

Each store is fresh: a new SQLite file, or a new database in a throw-away PostgreSQL cluster
(tests/postgres.py: Debian's postgresql, default settings, fsync on). The server is
`python -m alpha_rl.tracking server` with its 4 workers on 127.0.0.1. "Restart": once a third of
the values arrived, SIGKILL to every process of the server, 3 s down, started again. Writers,
server and database share this machine's cores: state them with the figures. Exit 1 when a value
did not arrive.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the throw-away cluster

from alpha_rl.tracking.load import LoadSpec, run_load
from tests.mlflow_server import TrackingServer
from tests.postgres import missing, postgres_cluster

DOWN_S = 3.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--writers", type=int, default=64)
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--keys", type=int, default=4)
    p.add_argument("--stores", nargs="+", default=["sqlite", "postgresql"])
    p.add_argument("--modes", nargs="+", default=["plain", "restart"])
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    if "postgresql" in args.stores and missing():
        print(f"error: {missing()}")
        return 2
    rows, failed = [], False
    with ExitStack() as stack:
        cluster = stack.enter_context(postgres_cluster()) if "postgresql" in args.stores else None
        for store in args.stores:
            for mode in args.modes:
                root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="load_")))
                db = (f"sqlite:///{root}/mlflow.db" if store == "sqlite"
                      else cluster.new_database(f"load_{mode}"))  # fmt: skip
                server = TrackingServer(db, root)
                during, events = server.restart_at(1 / 3, DOWN_S)
                server.start()
                try:
                    spec = LoadSpec(uri=server.url, root=root / "runs", writers=args.writers,
                                    steps=args.steps, keys=args.keys)  # fmt: skip
                    during = during if mode == "restart" else None
                    report = run_load(spec, during=during, progress=lambda m: print("  " + m))
                finally:
                    server.stop()
                print(f"[{store}, {mode}]", *report.lines(), sep="\n  ", flush=True)
                failed |= bool(report.problems)
                rows.append({"store": store, "mode": mode, **events, **asdict(report)})
    print(f"\n{'store':<11} {'mode':<8} {'values/s':>9} {'batch p50':>10} {'batch p99':>10} "
          f"{'reads':>6} {'read p99':>9} {'resends':>8}  every value")  # fmt: skip
    for r in rows:
        print(f"{r['store']:<11} {r['mode']:<8} {r['values_per_s']:>9,.0f} "
              f"{r['batch_p50_s']:>9.2f}s {r['batch_p99_s']:>9.2f}s {r['reads']:>6} "
              f"{r['read_p99_s']:>8.1f}s {r['resend_calls']:>8}  "
              f"{'yes' if not r['problems'] else 'NO'}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
