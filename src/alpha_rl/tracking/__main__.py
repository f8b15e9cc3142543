"""`python -m alpha_rl.tracking sync <run_dir>` (see alpha_rl.tracking.sync)."""

from alpha_rl.tracking.sync import main

if __name__ == "__main__":
    raise SystemExit(main())
