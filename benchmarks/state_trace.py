"""Digests of every state array of the default configuration's trainer (numpy backend) after each
step, to find where two machines' runs part: run it on both, then compare the two files.

    python benchmarks/state_trace.py --steps 600 --out here.json
    python benchmarks/state_trace.py --compare here.json there.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np


def digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def trace(steps: int) -> dict:
    """{'market': ..., 'init': {array: digest}, '0': ..., ...} of the default run's first steps."""
    from hydra import compose, initialize_config_dir

    from alpha_rl import paths
    from alpha_rl.pipeline.configure.config import plan_run, with_market
    from alpha_rl.pipeline.configure.parts import layout_from_plan
    from alpha_rl.pipeline.configure.scale import market_and_config
    from alpha_rl.pipeline.step.trainer import Trainer
    from alpha_rl.session import open_session

    with initialize_config_dir(config_dir=str(paths.conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=["backend=numpy"], return_hydra_config=True)
    choices = dict(cfg.hydra.runtime.choices)
    plan = plan_run(cfg)
    market, cfg = market_and_config(cfg, plan.run.seed, plan.validation)
    sides = ("bid_px", "ask_px", "bid_sz", "ask_sz")
    out: dict = {"market": {k: digest(getattr(market.train, k)) for k in sides}}
    plan = with_market(plan, cfg)  # reward.scale from the market
    with open_session(cfg, layout_from_plan(cfg, choices, plan)) as session:
        trainer = Trainer(session, market.train, plan)
        be = trainer.backend
        out["init"] = {k: digest(be.download(v)) for k, v in trainer.state_arrays(True).items()}
        for t in range(steps):
            trainer.step()
            out[str(t)] = {k: digest(be.download(v))
                           for k, v in trainer.state_arrays(True).items()}  # fmt: skip
    return out


def compare(here: dict, there: dict) -> str:
    """Where the two traces first part, or how long they agree."""
    for key in here:
        if key in there and here[key] != there[key]:
            apart = sorted(k for k in here[key] if here[key][k] != there[key].get(k))
            return f"they part at {key}: {', '.join(apart)}"
    return f"the same over {len(set(here) & set(there))} records"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--out", type=Path)
    p.add_argument("--compare", nargs=2, type=Path, metavar=("HERE", "THERE"))
    args = p.parse_args(argv)
    if args.compare:
        here, there = (json.loads(f.read_text()) for f in args.compare)
        print(compare(here, there))
        return 0
    record = trace(args.steps)
    text = json.dumps(record)
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text + "\n")
    print(f"numpy {np.__version__}: {args.steps} steps traced", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
