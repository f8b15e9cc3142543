"""`alpha-rl-train` / `python -m alpha_rl.train`: the Hydra entry point over conf/train.yaml.

The task itself is alpha_rl/task.py, imported here inside `main` so that a Ctrl-C at any point of
the start-up (seconds of imports, the config, the market) ends in one line and exit status 130,
never a traceback from whatever module was loading. Until the task runs, a SIGINT is held and
raised as the task starts (pipeline/life/stop.py says why); from there on the run's own handlers
take SIGINT and SIGTERM.
"""

from __future__ import annotations

import sys

from alpha_rl.pipeline.life.stop import sigint_held


def main() -> None:
    """Console entry point."""
    try:
        with sigint_held():
            from alpha_rl.task import start

            start()
    except KeyboardInterrupt:
        print("alpha-rl-train: stopped by Ctrl-C (SIGINT)", file=sys.stderr, flush=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
