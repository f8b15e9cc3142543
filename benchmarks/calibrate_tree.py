"""The calibration's simulated studies judged by the kill check of any tree, for a before/after
table (docs/verdicts.md). Two steps, the second under the other tree's package:

    python benchmarks/calibrate_tree.py simulate /tmp/cal.pkl --seeds 5 --experiments 400
    PYTHONPATH=/tmp/before/src python benchmarks/calibrate_tree.py judge /tmp/cal.pkl

`simulate` draws the studies of every scenario of alpha_rl.killcheck.calibrate (this tree) and
pickles their run records; `judge` reads them with whatever alpha_rl is importable, judges each
study with its `judge` at its default criteria (999 bootstrap resamples, for time), and prints the
kill rates."""

from __future__ import annotations

import argparse
import pickle
import zlib

import numpy as np


def simulate(path: str, seeds: int, folds: int, experiments: int) -> None:
    from alpha_rl.killcheck.calibrate import scenarios, simulate
    from alpha_rl.killcheck.config import Criteria

    crit = Criteria.load()
    out = []
    for sc in scenarios():
        rng = np.random.default_rng([0, zlib.crc32(sc.name.encode())])
        studies = [simulate(sc, seeds, folds, crit, rng) for _ in range(experiments)]
        out.append((sc.name, sc.truth, studies))
    with open(path, "wb") as f:
        pickle.dump(out, f)


def judge(path: str) -> None:
    import alpha_rl
    from alpha_rl.killcheck.axes import axis_for
    from alpha_rl.killcheck.config import Criteria
    from alpha_rl.killcheck.judge import judge as judge_runs

    # the deciding figures do not depend on the INFO rows' bootstrap resamples: fewer, for time
    crit = Criteria.load(overrides=["resamples=999"])
    with open(path, "rb") as f:
        scenarios = pickle.load(f)
    print(f"kill check of {alpha_rl.__file__}")
    print(f"{'scenario':<44} {'KILL/treatment':>15} {'KILL any':>9} {'KEEP any':>9} "
          f"{'CANNOT':>7}")  # fmt: skip
    for name, _, studies in scenarios:
        per = anyk = keeps = cannot = total = 0
        for runs, axis_name in studies:
            axis = axis_for(axis_name, "a0" if axis_name == "calib.arm" else None)
            treatments = judge_runs(runs, axis, crit)[0]
            kills = sum(t.verdict == "KILL" for t in treatments)
            per, anyk, total = per + kills, anyk + (kills > 0), total + len(treatments)
            keeps += any(t.verdict == "KEEP" for t in treatments)
            cannot += sum(t.verdict == "CANNOT-JUDGE" for t in treatments)
        print(f"{name:<44} {per / total:>15.3f} {anyk / len(studies):>9.3f} "
              f"{keeps / len(studies):>9.3f} {cannot / total:>7.3f}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("step", choices=("simulate", "judge"))
    p.add_argument("path")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--folds", type=int, default=1)
    p.add_argument("--experiments", type=int, default=400)
    args = p.parse_args()
    if args.step == "simulate":
        simulate(args.path, args.seeds, args.folds, args.experiments)
    else:
        judge(args.path)


if __name__ == "__main__":
    main()
