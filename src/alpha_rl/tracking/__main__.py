"""`python -m alpha_rl.tracking sync <run_dir>` and `... relocate <store.db>` (see
alpha_rl.tracking.sync and alpha_rl.tracking.relocate)."""

from alpha_rl.tracking.sync import main

if __name__ == "__main__":
    raise SystemExit(main())
