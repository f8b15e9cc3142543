"""`alpha-rl-kill-check`: MLflow runs of a variant study -> a keep / kill verdict per treatment,
a table, a JSON report, a plot.

Runs are paired along one axis (`--axis her` by default; beta, reward, agent or any config key):
each treatment value against the baseline value, run by run of the same config and seed. A
treatment is KILLED (harm shown), KEPT (harmlessness shown on every deciding criterion),
UNDECIDED (neither yet: the table says how many pairs would decide; alpha-rl-study adds them) or
CANNOT-JUDGE. Exit status: 0 every treatment kept, 1 any killed (the table says which), 2
undecided or cannot judge (no pairs, too few, a required criterion not evaluated, or a store /
experiment / run that cannot be read: a missing store, which is never created, a damaged one, a
server that does not answer).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from omegaconf import OmegaConf

from alpha_rl import paths
from alpha_rl.errors import AlphaRlError
from alpha_rl.killcheck.axes import axis_for
from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.judge import judge
from alpha_rl.killcheck.pairs import Pairing
from alpha_rl.killcheck.plot import plot
from alpha_rl.killcheck.report import (
    CANNOT_JUDGE,
    EXIT,
    NOTE_TAG,
    Treatment,
    note,
    overall,
    summary,
    table,
    write_json,
)
from alpha_rl.killcheck.sequential import Design
from alpha_rl.killcheck.speed import capture_key
from alpha_rl.masking import hide_password
from alpha_rl.tracking import RunReader, RunRecord
from alpha_rl.tracking.links import open_line
from alpha_rl.tracking.parent import PARENT_FILE, recorded_parent
from alpha_rl.tracking.stores import bound_requests
from alpha_rl.tracking.view import VIEW_TAG

WANTED = ("loss/", "her/", "audit/", "trade/", "eval/")
BASELINE_FIGURES = "eval/baseline/"  # of the baselines' figures, only their net PnL is read


def wanted(key: str) -> bool:
    """The metrics the check reads back (a history request each)."""
    if key.startswith(BASELINE_FIGURES):
        return key.endswith("/pnl")
    return key.startswith(WANTED)


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
    p.add_argument(
        "--out",
        type=Path,
        help="where the JSON and PNG go (default "
        "<sweep>/kill_check/<time> for one --sweep, else outputs/kill_check/<time>)",
    )
    p.add_argument("--no-write", action="store_true", help="leave the runs' tags and artifacts")
    p.add_argument(
        "--record",
        action="store_true",
        help="with non-default settings, overwrite a verdict the default settings "
        "recorded on the runs (without it such a check reports but does not record)",
    )
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="no store: simulate studies through this check with these settings and "
        "print its false-KILL rates, coverage and power (see --seeds, --folds)",
    )
    p.add_argument(
        "--sequential",
        action="store_true",
        help="--calibrate: studies in stages as alpha-rl-study runs them (--seeds the first "
        "stage, conf/study/default.yaml the rest)",
    )
    p.add_argument(
        "--max-seeds", type=int, help="--calibrate --sequential: the most seeds (study.max_seeds)"
    )
    p.add_argument("--seeds", type=int, default=5, help="--calibrate: pairs per fold (5)")
    p.add_argument("--folds", type=int, default=1, help="--calibrate: folds (1: a single split)")
    p.add_argument(
        "--experiments",
        type=int,
        default=400,
        help="--calibrate: simulated studies per scenario (400)",
    )
    return p.parse_args(argv)


def parent_of_sweep(sweep: Path) -> str:
    """The parent run id a multirun directory recorded (mlflow_parent.json)."""
    run_id = recorded_parent(sweep)
    if run_id is None:
        raise AlphaRlError(f"--sweep {sweep}: no {PARENT_FILE} there (not a multirun directory?)")
    return run_id


def _tag_key(text: str) -> str:
    return re.sub(r"[^\w.\-/]", "_", text)


CRITERIA_TAG = "kill_check.criteria"  # "default" or "non-default: key=value (default x), ..."


def write_back(reader: RunReader, treatments: list[Treatment], verdict: str, pairing: Pairing,
               parents: list[str], files: list[Path], changed: str) -> None:  # fmt: skip
    """The verdicts as tags (a treatment's runs its own, the baselines and parents the overall
    and each treatment's); the files as artifacts of the parents (else of the treatment runs)."""
    stamp = {"kill_check.time": time.strftime("%Y-%m-%dT%H:%M:%S"),
             "kill_check.axis": pairing.axis.name,
             CRITERIA_TAG: f"non-default: {changed}" if changed else "default"}  # fmt: skip
    per = {f"kill_check.verdict.{_tag_key(t.value)}": t.verdict for t in treatments}
    for t in treatments:
        tags = stamp | {"kill_check.verdict": t.verdict, "kill_check.role": "treatment"}
        tags |= {f"kill_check.{_tag_key(r.criterion)}": r.verdict for r in t.rows}
        for run_id in sorted({a.run_id for a, _ in t.pairs}):
            reader.set_tags(run_id, tags)
    summary_tags = stamp | per | {"kill_check.verdict": verdict}
    for run_id in sorted({b.run_id for _, b in pairing.pairs}):
        reader.set_tags(run_id, summary_tags | {"kill_check.role": "baseline"})
    described = note(treatments, verdict, pairing.axis.name, stamp["kill_check.time"], changed)
    for run_id in parents:
        reader.set_tags(run_id, summary_tags | {NOTE_TAG: described})
    for run_id in parents or sorted({a.run_id for a, _ in pairing.pairs}):
        reader.log_artifacts(run_id, files, "kill_check")


def default_verdicts(pairing: Pairing, parents: list[str], reader: RunReader) -> list[str]:
    """The runs `write_back` would tag (and the parents) that hold a verdict recorded with the
    default settings."""
    runs = {r.run_id: r for pair in pairing.pairs for r in pair}.values()
    held = [r.run_id for r in runs if _recorded_default(r.tags)]
    for run_id in parents:
        if _recorded_default(reader.run(run_id, lambda k: False).tags):
            held.append(run_id)
    return held


def _recorded_default(tags: dict[str, str]) -> bool:
    return "kill_check.verdict" in tags and tags.get(CRITERIA_TAG, "default") == "default"


def run(args: argparse.Namespace) -> int:
    """Read, pair, judge, report; the exit status."""
    crit = Criteria.load(overrides=args.overrides)
    if args.calibrate:
        from alpha_rl.killcheck.calibrate import calibrate

        design = staged_design(crit, args.seeds, args.max_seeds) if args.sequential else None
        print(calibrate(crit, args.seeds, args.folds, args.experiments, design))
        if design is None:
            from alpha_rl.killcheck.coverage import coverage_text

            print(coverage_text(args.seeds, crit.confidence, max(args.experiments // 2, 50)))
        return 0
    if args.sequential or args.max_seeds is not None:
        raise AlphaRlError("--sequential and --max-seeds go with --calibrate")
    axis = axis_for(args.axis, args.baseline)
    bound_requests()
    reader = RunReader(args.tracking_uri, REMEDY)
    parents = [*args.parent, *(parent_of_sweep(s) for s in args.sweep)]
    runs: list[RunRecord] = []
    for parent in parents or [None]:
        runs += reader.runs(args.experiment, wanted, parent_run_id=parent,
                            filter_string=args.filter)  # fmt: skip
    runs = list({r.run_id: r for r in runs}.values())  # a parent named twice
    treatments, pairing, family = judge(runs, axis, crit)
    verdict = overall(treatments)
    print(table(treatments, pairing, crit, family))
    out = args.out or report_dir(args.sweep)
    out.mkdir(parents=True, exist_ok=True)
    changed = crit.non_default_text()
    meta = {"tracking_uri": hide_password(reader.uri), "experiment": args.experiment,
            "parents": parents, "filter": args.filter, "settings": vars(crit),
            "non_default": crit.non_default(), "tests_in_family": family}  # fmt: skip
    write_json(out / JSON, treatments, verdict, pairing, meta)
    files = [out / JSON]
    if pairing.pairs:
        keys = {"stability": crit.stability_metric,
                "capture": capture_key([r for pair in pairing.pairs for r in pair])}  # fmt: skip
        plot(out / PNG, treatments, pairing, keys, summary(treatments, verdict))
        files.append(out / PNG)
    print(f"report: {', '.join(str(f) for f in files)}")
    if not args.no_write and (pairing.pairs or parents):
        held = default_verdicts(pairing, parents, reader) if changed and not args.record else []
        if held:
            print(f"not recorded on the runs: {len(held)} of them hold a verdict of the default "
                  f"criteria, which these settings ({changed}) would overwrite; give --record "
                  "to record it anyway")  # fmt: skip
        else:
            write_back(reader, treatments, verdict, pairing, parents, files, changed)
    opening = ui_line(reader, args.experiment, write=not args.no_write)
    if opening:
        print(f"runs in the UI: {opening}")
    print(summary(treatments, verdict))
    return EXIT[verdict]


def staged_design(crit: Criteria, first: int | None = None, most: int | None = None,
                  step: int | None = None) -> Design:  # fmt: skip
    """The looks of a staged study: conf/study/default.yaml's stages, its first stage, its most
    seeds and its stage size replaced where given, the spending function's g from the
    criteria."""
    study = OmegaConf.load(paths.conf_dir() / "study" / "default.yaml")
    first = int(study.first_seeds if first is None else first)
    most = int(study.max_seeds if most is None else most)
    step = int(study.stage_seeds if step is None else step)
    if not 2 <= first <= most:
        raise AlphaRlError(f"a staged study needs 2 <= first stage ({first}) <= max seeds "
                           f"({most}): give --seeds / --max-seeds (study.first_seeds, "
                           "study.max_seeds) that fit")  # fmt: skip
    if step < 1:
        raise AlphaRlError(f"study.stage_seeds={step}: give at least 1")
    return Design.stages(first, step, most, crit.spending_gamma)


def report_dir(sweeps: list[Path]) -> Path:
    """Where a report goes unless --out says: <sweep>/kill_check/<time> for one sweep, else
    outputs/kill_check/<time> (never the working directory itself)."""
    base = Path(sweeps[0]) if len(sweeps) == 1 else Path("outputs")
    return base / "kill_check" / time.strftime("%Y-%m-%d_%H-%M-%S")


def ui_line(reader: RunReader, experiment: str, write: bool) -> str | None:
    """How to open the experiment's runs in the UI (None for a store no UI of ours serves, or one
    that stopped answering); write: the experiment is first given the runs view it lacks."""
    try:
        found = reader.experiment(experiment)
        if write:
            reader.label_experiment(found)
    except AlphaRlError:  # the verdict stands without the line
        return None
    return open_line(reader.uri, found.experiment_id, view=write or VIEW_TAG in found.tags)


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
