"""`python -m alpha_rl.tracking sync <run_dir>`, `... relocate <store.db>` and `... reap
[--older-than 10m] [--mark]` (see alpha_rl.tracking.sync, alpha_rl.tracking.relocate and
alpha_rl.tracking.reap)."""

from alpha_rl.tracking.sync import main

if __name__ == "__main__":
    raise SystemExit(main())
