"""`alpha-rl-kill-check`: MLflow runs of a variant study -> a keep / kill verdict per treatment,
a table, a JSON report, a plot.

Runs are paired along one axis (`--axis her` by default; beta, reward, agent or any config key):
each treatment value against the baseline value, run by run of the same config and seed. Exit
status:
0 every treatment kept, 1 any killed (the table says which), 2 cannot judge (no pairs, runs too
short, a required criterion not evaluated, or a store / experiment / run that cannot be read:
a missing store, which is never created, a damaged one, a server that does not answer).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from omegaconf import OmegaConf

from alpha_rl import paths
from alpha_rl.errors import AlphaRlError
from alpha_rl.killcheck.aggregate import stratum
from alpha_rl.killcheck.axes import Axis, axis_for
from alpha_rl.killcheck.compare import judge_folds, judge_held_out, judge_stability, literal_row
from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.criteria import her_criteria
from alpha_rl.killcheck.pairs import Pair, Pairing, pair_runs
from alpha_rl.killcheck.report import (
    CANNOT_JUDGE,
    EXIT,
    NOTE_TAG,
    Treatment,
    note,
    overall,
    plot,
    summary,
    table,
    write_json,
)
from alpha_rl.killcheck.speed import capture_key, judge_area, judge_speed
from alpha_rl.tracking import RunReader, RunRecord
from alpha_rl.tracking.parent import PARENT_FILE
from alpha_rl.tracking.secrets import hide_password
from alpha_rl.tracking.stores import bound_requests

WANTED = ("loss/", "her/", "audit/", "trade/", "eval/")
REMEDY = "give --tracking-uri of an existing MLflow store"
PNG, JSON = "kill_check.png", "kill_check.json"


def parse(argv: list[str] | None) -> argparse.Namespace:
    tracking = OmegaConf.load(paths.conf_dir() / "tracking" / "local.yaml")
    p = argparse.ArgumentParser(prog="alpha-rl-kill-check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    what = "kill-criteria settings to change (conf/kill_criteria/default.yaml)"
    p.add_argument("overrides", nargs="*", metavar="key=value", help=what)
    p.add_argument("--tracking-uri", default=str(tracking.uri), help="MLflow tracking URI")
    p.add_argument("--experiment", default=str(tracking.experiment), help="MLflow experiment")
    p.add_argument(
        "--axis",
        default="her",
        help="the variant axis: her (default), beta, reward, agent or a config key",
    )
    p.add_argument("--baseline", help="the baseline value on the axis (her: off, beta: "
                   "sentinel, reward: stride6, agent: dqn, a config key: its default)")  # fmt: skip
    p.add_argument(
        "--parent",
        action="append",
        default=[],
        help="judge the runs nested under this parent run id (repeatable)",
    )
    p.add_argument(
        "--sweep",
        type=Path,
        action="append",
        default=[],
        help="a multirun directory: its parent run's runs are judged (repeatable)",
    )
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


def seed_warnings(label: str, base: str, pairs: list[Pair], crit: Criteria) -> list[str]:
    """A warning when an arm has fewer than `min_seeds` runs in a fold (of the single split)."""

    def fewest(runs: list[RunRecord]) -> int:
        per: dict[str, set[str]] = {}
        for run in runs:
            per.setdefault(stratum(run), set()).add(run.run_id)
        return min((len(ids) for ids in per.values()), default=0)

    counts = {label: fewest([t for t, _ in pairs]), base: fewest([b for _, b in pairs])}
    few = {k: n for k, n in counts.items() if n < crit.min_seeds}
    if not few:
        return []
    shown = ", ".join(f"{k} {n}" for k, n in few.items())
    where = " of a fold" if len({stratum(t) for t, _ in pairs}) > 1 else ""
    return [f"fewer than {crit.min_seeds} runs in an arm{where} ({shown}): its intervals and IQM "
            "rest on too few seeds to be read with confidence"]  # fmt: skip


def judge_treatment(axis: Axis, value: str, pairs: list[Pair], crit: Criteria) -> Treatment:
    """Every row of one treatment against the baseline."""
    label, base = axis.label(value), axis.label(axis.baseline)
    rows = her_criteria(axis, [t for t, _ in pairs], crit)
    rows += [judge_stability(pairs, crit), literal_row(pairs, axis, crit),
             judge_speed(pairs, (label, base), crit)]  # fmt: skip
    rows += [row for key in ("eval/capture_ratio", "eval/pnl")
             if (row := judge_area(pairs, key, crit)) is not None]  # fmt: skip
    rows += judge_held_out(pairs, (label, base), crit)
    rows += judge_folds(pairs, crit)
    return Treatment(value, label, pairs, rows, seed_warnings(label, base, pairs, crit))


def judge(runs: list[RunRecord], axis: Axis, crit: Criteria) -> tuple[list[Treatment], Pairing]:
    """Every treatment of the axis, judged, and the pairing."""
    runs = [r for r in runs if r.params]  # a parent run holds no config
    pairing = pair_runs(runs, axis, crit.pair_ignore)
    treatments = [judge_treatment(axis, v, pairs, crit) for v, pairs in pairing.arms.items()]
    return treatments, pairing


def _tag_key(text: str) -> str:
    return re.sub(r"[^\w.\-/]", "_", text)


def write_back(reader: RunReader, treatments: list[Treatment], verdict: str, pairing: Pairing,
               parents: list[str], files: list[Path]) -> None:  # fmt: skip
    """The verdicts as tags (a treatment's runs its own, the baselines and parents the overall
    and each treatment's); the files as artifacts of the parents (else of the treatment runs)."""
    stamp = {"kill_check.time": time.strftime("%Y-%m-%dT%H:%M:%S"),
             "kill_check.axis": pairing.axis.name}  # fmt: skip
    per = {f"kill_check.verdict.{_tag_key(t.value)}": t.verdict for t in treatments}
    for t in treatments:
        tags = stamp | {"kill_check.verdict": t.verdict, "kill_check.role": "treatment"}
        tags |= {f"kill_check.{_tag_key(r.criterion)}": r.verdict for r in t.rows}
        for run_id in sorted({a.run_id for a, _ in t.pairs}):
            reader.set_tags(run_id, tags)
    summary_tags = stamp | per | {"kill_check.verdict": verdict}
    for run_id in sorted({b.run_id for _, b in pairing.pairs}):
        reader.set_tags(run_id, summary_tags | {"kill_check.role": "baseline"})
    described = note(treatments, verdict, pairing.axis.name, stamp["kill_check.time"])
    for run_id in parents:
        reader.set_tags(run_id, summary_tags | {NOTE_TAG: described})
    for run_id in parents or sorted({a.run_id for a, _ in pairing.pairs}):
        reader.log_artifacts(run_id, files, "kill_check")


def run(args: argparse.Namespace) -> int:
    """Read, pair, judge, report; the exit status."""
    crit = Criteria.load(overrides=args.overrides)
    axis = axis_for(args.axis, args.baseline)
    bound_requests()
    reader = RunReader(args.tracking_uri, REMEDY)
    parents = [*args.parent, *(parent_of_sweep(s) for s in args.sweep)]
    runs: list[RunRecord] = []
    for parent in parents or [None]:
        runs += reader.runs(args.experiment, lambda k: k.startswith(WANTED),
                            parent_run_id=parent, filter_string=args.filter)  # fmt: skip
    runs = list({r.run_id: r for r in runs}.values())  # a parent named twice
    treatments, pairing = judge(runs, axis, crit)
    verdict = overall(treatments)
    print(table(treatments, verdict, pairing))
    out = args.out or Path("kill_check") / time.strftime("%Y-%m-%d_%H-%M-%S")
    out.mkdir(parents=True, exist_ok=True)
    meta = {"tracking_uri": hide_password(reader.uri), "experiment": args.experiment,
            "parents": parents, "filter": args.filter, "settings": vars(crit)}  # fmt: skip
    write_json(out / JSON, treatments, verdict, pairing, meta)
    files = [out / JSON]
    if pairing.pairs:
        keys = {"stability": crit.stability_metric,
                "capture": capture_key([r for pair in pairing.pairs for r in pair])}  # fmt: skip
        plot(out / PNG, treatments, pairing, keys, summary(treatments, verdict))
        files.append(out / PNG)
    if not args.no_write and (pairing.pairs or parents):
        write_back(reader, treatments, verdict, pairing, parents, files)
    print(f"report: {', '.join(str(f) for f in files)}")
    return EXIT[verdict]


def exit_with_verdict(prog: str, work: Callable[[], int]) -> None:
    """Run a verdict command and exit with its status; an AlphaRlError is printed in its one line
    and exits as CANNOT-JUDGE (2), and so does a failure of ours (with its traceback): a crash
    must never read as 1, a treatment killed."""
    try:
        code = work()
    except AlphaRlError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        print(f"verdict: {CANNOT_JUDGE}", file=sys.stderr)
        code = EXIT[CANNOT_JUDGE]
    except Exception:  # a bug: its traceback, and no verdict
        traceback.print_exc()
        print(f"verdict: {CANNOT_JUDGE}", file=sys.stderr)
        code = EXIT[CANNOT_JUDGE]
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    exit_with_verdict("alpha-rl-kill-check", lambda: run(parse(argv)))


if __name__ == "__main__":
    main()
