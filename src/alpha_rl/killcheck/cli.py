"""`alpha-rl-kill-check`: MLflow runs of a HER ablation -> keep / kill, a table, a report, a plot.

Exit status: 0 keep, 1 kill, 2 cannot judge (no pairs, runs too short, criteria not evaluated,
or a store / experiment / run that cannot be read).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf

from alpha_rl import paths
from alpha_rl.errors import AlphaRlError
from alpha_rl.killcheck.compare import (
    capture_key,
    judge_held_out,
    judge_speedup,
    judge_stability,
)
from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.criteria import AUDITS, Judgement, judge_audit, judge_injections
from alpha_rl.killcheck.pairs import Pairing, her_enabled, pair_runs
from alpha_rl.killcheck.report import CANNOT_JUDGE, EXIT, plot, table, verdict, write_json
from alpha_rl.tracking import RunReader, RunRecord
from alpha_rl.tracking.parent import PARENT_FILE

WANTED = ("loss/", "her/", "audit/", "trade/", "eval/")
PNG, JSON = "kill_check.png", "kill_check.json"


def parse(argv: list[str] | None) -> argparse.Namespace:
    tracking = OmegaConf.load(paths.conf_dir() / "tracking" / "local.yaml")
    p = argparse.ArgumentParser(prog="alpha-rl-kill-check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    what = "kill-criteria settings to change (conf/kill_criteria/default.yaml)"
    p.add_argument("overrides", nargs="*", metavar="key=value", help=what)
    p.add_argument("--tracking-uri", default=str(tracking.uri), help="MLflow tracking URI")
    p.add_argument("--experiment", default=str(tracking.experiment), help="MLflow experiment")
    p.add_argument("--parent", help="judge only the runs nested under this parent run id")
    p.add_argument("--sweep", type=Path, help="a multirun directory: its parent run is judged")
    p.add_argument("--filter", default="", help="an MLflow search filter string to narrow runs")
    p.add_argument("--out", type=Path, help="where the JSON and PNG go (default kill_check/<time>)")
    p.add_argument("--no-write", action="store_true", help="leave the runs' tags and artifacts")
    return p.parse_args(argv)


def parent_of_sweep(sweep: Path) -> str:
    """The parent run id a multirun directory recorded (mlflow_parent.json)."""
    path = sweep / PARENT_FILE
    if not path.is_file():
        raise AlphaRlError(f"--sweep {sweep}: no {path.name} there (not a multirun directory?)")
    return str(json.loads(path.read_text())["run_id"])


def judge(runs: list[RunRecord], crit: Criteria) -> tuple[list[Judgement], Pairing]:
    """Every row of the table, from the runs."""
    runs = [r for r in runs if r.params]  # a parent run holds no config
    pairing = pair_runs(runs, crit.pair_ignore)
    her = [r for r in runs if her_enabled(r)]
    rows = [judge_audit(name, her, crit) for name in AUDITS]
    rows += [judge_injections(her, crit), judge_stability(pairing.pairs, crit),
             judge_speedup(pairing.pairs, crit)]  # fmt: skip
    return rows + judge_held_out(pairing.pairs, crit), pairing


def write_back(reader: RunReader, rows: list[Judgement], overall: str, pairing: Pairing,
               parent: str | None, files: list[Path]) -> None:  # fmt: skip
    """The verdict as tags on the judged runs and the parent; the files as their artifacts."""
    tags = {"kill_check.verdict": overall, "kill_check.time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    tags |= {f"kill_check.{r.criterion.replace(' ', '_')}": r.verdict for r in rows}
    judged = {r.run_id for pair in pairing.pairs for r in pair}
    for run_id in sorted(judged | ({parent} if parent else set())):
        reader.set_tags(run_id, tags)
    for run_id in [parent] if parent else sorted(h.run_id for h, _ in pairing.pairs):
        reader.log_artifacts(run_id, files, "kill_check")


def run(args: argparse.Namespace) -> int:
    """Read, pair, judge, report; the exit status."""
    crit = Criteria.load(overrides=args.overrides)
    reader = RunReader(args.tracking_uri)
    parent = args.parent or (parent_of_sweep(args.sweep) if args.sweep else None)
    runs = reader.runs(args.experiment, lambda k: k.startswith(WANTED), parent_run_id=parent,
                       filter_string=args.filter)  # fmt: skip
    rows, pairing = judge(runs, crit)
    overall = verdict(rows, pairing)
    print(table(rows, overall, pairing))
    out = args.out or Path("kill_check") / time.strftime("%Y-%m-%d_%H-%M-%S")
    out.mkdir(parents=True, exist_ok=True)
    meta = {"tracking_uri": reader.uri, "experiment": args.experiment, "parent": parent,
            "filter": args.filter, "settings": vars(crit)}  # fmt: skip
    write_json(out / JSON, rows, overall, pairing, meta)
    files = [out / JSON]
    if pairing.pairs:
        key = capture_key([r for pair in pairing.pairs for r in pair])
        plot(out / PNG, pairing, key, crit.capture_target, f"HER on vs off: {overall}")
        files.append(out / PNG)
    if not args.no_write and (pairing.pairs or parent):
        write_back(reader, rows, overall, pairing, parent, files)
    print(f"report: {', '.join(str(f) for f in files)}")
    return EXIT[overall]


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    try:
        code = run(parse(argv))
    except AlphaRlError as exc:
        print(f"alpha-rl-kill-check: {exc}", file=sys.stderr)
        print(f"verdict: {CANNOT_JUDGE}", file=sys.stderr)
        code = EXIT[CANNOT_JUDGE]
    sys.exit(code)


if __name__ == "__main__":
    main()
