"""`python -m alpha_rl.tracking sync <run_dir>`, `... relocate <store.db>`, `... reap
[--older-than 10m] [--mark]`, `... server --db URI` and `... load --uri URI` (see
alpha_rl.tracking.sync, .relocate, .reap, .server and .load)."""

from alpha_rl.tracking.sync import main

if __name__ == "__main__":
    raise SystemExit(main())
