"""`alpha-rl-study EXPERIMENT [key=value ...]`: a preset's variant study run in stages of seeds
until each treatment is decided.

The first stage runs the preset's sweep (conf/experiment/EXPERIMENT.yaml) on seeds 0 ..
first_seeds - 1 and the kill check judges it; each further stage runs stage_seeds more seeds of
the treatments still UNDECIDED and of their baseline, and the check judges all the study's runs
again, until every treatment is KILLED, KEPT or CANNOT-JUDGE, or max_seeds is reached (conf/
study/default.yaml; override with study.max_seeds=20 ...). Alpha and beta are spent over the
looks (docs/verdicts.md, "Studies in stages"), so the errors hold over every look. Each stage
is a multirun under the study's MLflow run; the study's verdict, and the seeds each treatment
needed, are on that run. A study stopped at any point continues with `--resume <study dir>`
(a stage stopped part-way runs again whole; the runs of its stopped attempt are left out).
Exit status as the kill check's: 0 every treatment kept, 1 any killed, 2 any undecided or
cannot be judged (and a study that cannot start); 3 paused after the stages --stages allowed;
130 / 143 / 129 stopped by SIGINT / SIGTERM / SIGHUP (to be continued with --resume).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from alpha_rl import paths
from alpha_rl.commands import script_command
from alpha_rl.errors import AlphaRlError, ConfigError
from alpha_rl.killcheck.axes import GROUP_AXES, axis_for
from alpha_rl.killcheck.cli import exit_with_verdict, staged_design, wanted
from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.report import EXIT, overall, summary, table, write_json
from alpha_rl.killcheck.staged import Progress, judge_look
from alpha_rl.masking import hide_password
from alpha_rl.study.record import close_study, open_study, stage_parent, verdict_lines
from alpha_rl.study.state import ABANDONED, DONE, Stage, StudyState
from alpha_rl.tracking import RunReader, RunRecord
from alpha_rl.tracking.store import resolve_uri
from alpha_rl.tracking.stores import bound_requests

STOPPED = {130: "SIGINT", 143: "SIGTERM", 129: "SIGHUP"}
PAUSED = 3  # the exit status of a study that ran the stages --stages allowed and goes on later


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="alpha-rl-study", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("experiment", nargs="?", help="a sweep preset of conf/experiment/")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="overrides of the runs (backend=cuda, steps=..., hydra/launcher=packed) "
                   "and of the study (study.max_seeds=20)")  # fmt: skip
    p.add_argument("--axis", help="the variant axis the study decides (default: the preset's "
                   "swept axis: her, beta, alpha, reward or agent)")  # fmt: skip
    p.add_argument("--baseline", help="the baseline value on the axis (default: the axis's)")
    p.add_argument("--criteria", action="append", default=[], metavar="key=value",
                   help="a kill-criteria setting to change (repeatable)")  # fmt: skip
    p.add_argument("--dir", type=Path, help="the study's directory (default "
                   "outputs/study/<experiment>__<time>)")  # fmt: skip
    p.add_argument("--resume", type=Path, help="continue the study of this directory")
    p.add_argument("--stages", type=int, metavar="N", help="run at most N stages now, then "
                   "stop (exit 3), to go on with --resume (a time-limited allocation)")  # fmt: skip
    return p.parse_intermixed_args(argv)  # options before, between or after the overrides


def _split(overrides: list[str]) -> tuple[list[str], list[str]]:
    """(the study's own settings, the runs' overrides)."""
    own = [o for o in overrides if o.startswith("study.")]
    return [o.removeprefix("study.") for o in own], [o for o in overrides if o not in own]


def _compose(experiment: str, overrides: list[str]) -> object:
    from hydra import compose, initialize_config_dir

    if not (paths.conf_dir() / "experiment" / f"{experiment}.yaml").is_file():
        known = sorted(p.stem for p in (paths.conf_dir() / "experiment").glob("*.yaml"))
        raise ConfigError(f"experiment={experiment}: no such preset in conf/experiment/ "
                          f"(presets: {', '.join(known)})")  # fmt: skip
    try:
        with initialize_config_dir(config_dir=str(paths.conf_dir()), version_base="1.3"):
            return compose("train", overrides=[f"experiment={experiment}", *overrides],
                           return_hydra_config=True)  # fmt: skip
    except Exception as exc:  # Hydra's refusal of an override, in its own words
        raise ConfigError(f"alpha-rl-study {experiment} {' '.join(overrides)}: {exc}") from None


def _swept(cfg: object, experiment: str) -> dict[str, list[str]]:
    """The preset's swept keys and their values (Hydra's sweep syntax parsed)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = OmegaConf.select(cfg, "hydra.sweeper.params", default=None) or {}
    parser = OverridesParser.create()
    out = {}
    for key, value in params.items():
        override = parser.parse_override(f"{key}={value}")
        out[str(key)] = [str(v) for v in override.sweep_string_iterator()] if (
            override.is_sweep_override()) else [str(override.value())]  # fmt: skip
    if "seed" not in out:
        raise ConfigError(f"experiment={experiment} sweeps no seed: a study adds seeds to a "
                          "preset that sweeps them")  # fmt: skip
    return out


def plan(args: argparse.Namespace) -> tuple[StudyState, Path]:
    """A new study's record from the command line: the preset's axis and values, the store,
    the design (looks), the study's directory."""
    own, overrides = _split(args.overrides)
    experiment = args.experiment
    for o in overrides:
        if o.split("=", 1)[0].lstrip("+~") in ("seed", "experiment"):
            raise ConfigError(f"{o}: the study sets seed and experiment itself")
    cfg = _compose(experiment, overrides)
    swept = _swept(cfg, experiment)
    name = args.axis or next((k for k in swept if k in GROUP_AXES), None)
    if name is None or name not in swept:
        given = f"--axis {name}: not swept; " if args.axis else ""
        raise ConfigError(f"{given}experiment={experiment} sweeps {', '.join(swept)}: name the "
                          "axis the study decides with --axis (one the preset sweeps)")  # fmt: skip
    axis = axis_for(name, args.baseline)
    values = swept[name]
    if axis.baseline not in values:
        raise ConfigError(f"--axis {name}: the baseline {axis.baseline!r} is not among the "
                          f"preset's values {values}: give --baseline")  # fmt: skip
    study = OmegaConf.merge(OmegaConf.load(paths.conf_dir() / "study" / "default.yaml"),
                            OmegaConf.from_dotlist(own))  # fmt: skip
    unknown = set(study) - {"first_seeds", "stage_seeds", "max_seeds"}
    if unknown:
        raise ConfigError(f"unknown study setting(s) {sorted(unknown)}: conf/study/default.yaml "
                          "has first_seeds, stage_seeds, max_seeds")  # fmt: skip
    for key, value in study.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"study.{key}={value!r}: give a whole number of seeds "
                              "(conf/study/default.yaml)")  # fmt: skip
    crit = Criteria.load(overrides=args.criteria)
    design = staged_design(crit, study.first_seeds, study.max_seeds, study.stage_seeds)
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    study_dir = (args.dir or Path("outputs", "study", f"{experiment}__{stamp}")).resolve()
    tracking = OmegaConf.to_container(cfg.tracking, resolve=True)
    tracking["uri"] = resolve_uri(str(tracking["uri"]))  # a relative store, from here on
    state = StudyState(experiment, overrides, name, axis.baseline,
                       [v for v in values if not axis.is_baseline(v)], tracking["uri"],
                       str(tracking["experiment"]), tracking, None, list(args.criteria),
                       Progress(design))  # fmt: skip
    return state, study_dir


def _quote(value: str) -> str:
    return "'" + value.replace("'", "\\'") + "'"


def run_stage(state: StudyState, study_dir: Path, stage: Stage) -> None:
    """One stage's multirun: the open treatments and the baseline on the stage's seeds."""
    cmd = [sys.executable, "-m", "alpha_rl.train", "-m", f"experiment={state.preset}",
           *state.overrides, f"{state.axis}={','.join(map(_quote, stage.values))}",
           f"seed={','.join(map(str, stage.seeds))}", f"hydra.sweep.dir={stage.sweep_dir}",
           f"tracking.uri={state.uri}", f"tracking.experiment={state.experiment}"]  # fmt: skip
    print(f"stage {stage.look + 1}: {script_command('alpha-rl-train', cmd[3:])}", flush=True)
    code, stopped_by = _run_child(cmd)
    if code == 0:
        stage.status = DONE
        state.save(study_dir)
    if code in STOPPED or stopped_by:  # a stage that ended as the signal came is kept
        code = code if code in STOPPED else 128 + int(stopped_by)
        again = script_command("alpha-rl-study", ["--resume", str(study_dir)])
        print(f"alpha-rl-study: stopped by {STOPPED[code]} in stage {stage.look + 1}; to "
              f"continue the study: {again}", file=sys.stderr, flush=True)  # fmt: skip
        sys.exit(code)
    if code != 0:
        raise AlphaRlError(
            f"stage {stage.look + 1}'s multirun exited {code} (its "
            f"logs: {stage.sweep_dir}); mend the cause and continue with "
            f"{script_command('alpha-rl-study', ['--resume', str(study_dir)])}"
        )


def _run_child(cmd: list[str]) -> tuple[int, int | None]:
    """Run a stage's multirun in its own process group; its exit status and the stop signal the
    study passed on to it (None: none came). A stop
    signal to the study (Ctrl-C in its terminal, SIGTERM from a scheduler, SIGHUP) is passed on
    to the multirun once, whose runs stop with their checkpoints, and the study waits for it: no
    stage runs on behind a stopped study, and no run gets the signal twice (a second Ctrl-C
    stops a run at once)."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    state: dict[str, Any] = {"process": None, "signal": None, "sent": False}

    def pass_on(signum: int, _frame: object) -> None:
        state["signal"] = state["signal"] or signum
        _send(state)

    handlers = {sig: signal.signal(sig, pass_on)
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}  # fmt: skip
    try:
        state["process"] = subprocess.Popen(cmd, env=env, process_group=0)
        _send(state)  # a signal that came while it was starting
        return state["process"].wait(), state["signal"]
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _send(state: dict[str, Any]) -> None:
    if state["signal"] and state["process"] is not None and not state["sent"]:
        state["sent"] = True
        state["process"].send_signal(state["signal"])


def next_stage(state: StudyState, study_dir: Path) -> Stage:
    """The stage of the next look: its seeds, the open treatments and the baseline."""
    design, look = state.progress.design, state.progress.looks_done
    start = design.looks[look - 1] if look else 0
    attempt = sum(s.look == look for s in state.stages)
    name = f"stage{look + 1}" + (f".attempt{attempt + 1}" if attempt else "")
    stage = Stage(look, list(range(start, design.looks[look])),
                  [state.baseline, *state.open_values], str(study_dir / name), None)  # fmt: skip
    stage.parent = stage_parent(state, stage, Path(stage.sweep_dir))
    state.stages.append(stage)
    state.save(study_dir)
    return stage


def judge_stage(state: StudyState, study_dir: Path, crit: Criteria,
                read: dict[str, list[RunRecord]]) -> None:  # fmt: skip
    """Judge every finished stage's runs at the study's next look, print the look, save it.
    `read`: the runs of the stages read at earlier looks, by parent run (a finished stage's runs
    do not change); the stages not in it are read and added."""
    reader = RunReader(state.uri, "give the tracking store the study's runs went to")
    parents = state.done_parents()
    for parent in parents:
        if parent not in read:
            read[parent] = reader.runs(state.experiment, wanted, parent_run_id=parent)
    runs = [r for parent in parents for r in read[parent]]
    axis = axis_for(state.axis, state.baseline)
    progress = state.progress
    look, pairs = progress.looks_done, progress.design.looks[progress.looks_done]
    treatments, pairing, family = judge_look(progress, runs, axis, crit, set(state.values))
    print(f"\n== look {look + 1} of {len(progress.design.looks)}: {pairs} seeds")
    print(table(treatments, pairing, crit, family))
    out = study_dir / f"look{look + 1}"
    out.mkdir(parents=True, exist_ok=True)
    verdict = overall(treatments)
    write_json(out / "kill_check.json", treatments, verdict, pairing,
               {"tracking_uri": hide_password(reader.uri), "experiment": state.experiment,
                "look": look, "design": list(progress.design.looks),
                "settings": vars(crit), "tests_in_family": family})  # fmt: skip
    print(summary(treatments, verdict), flush=True)
    state.save(study_dir)


def run(args: argparse.Namespace) -> int:
    """Plan or resume the study, then stage by stage run and judge until it is decided; its
    exit status. A Ctrl-C at any point ends it with 130 and how to continue it."""
    try:
        return _run(args)
    except KeyboardInterrupt:
        where = getattr(args, "study_dir", None)
        again = (f"; to continue the study: "
                 f"{script_command('alpha-rl-study', ['--resume', str(where)])}" if where
                 else "")  # fmt: skip
        print(f"alpha-rl-study: stopped by Ctrl-C (SIGINT){again}", file=sys.stderr, flush=True)
        return 130


def _run(args: argparse.Namespace) -> int:
    if args.stages is not None and args.stages < 1:
        raise ConfigError(f"--stages {args.stages}: give at least 1 (the stages to run now)")
    bound_requests()
    if args.resume is not None:
        if args.experiment or args.overrides or args.axis or args.baseline or args.criteria:
            raise ConfigError("--resume continues a study as it was started: give only its "
                              "directory")  # fmt: skip
        study_dir = args.resume.resolve()
        state = StudyState.load(study_dir)
        args.study_dir = study_dir
        for stage in state.stages:  # a stage stopped part-way runs again whole
            if stage.status not in (DONE, ABANDONED):
                stage.status = ABANDONED
        state.save(study_dir)
    else:
        if not args.experiment:
            raise ConfigError("name the experiment preset to study (alpha-rl-study "
                              "her_components), or --resume <study dir>")  # fmt: skip
        state, study_dir = plan(args)
        study_dir.mkdir(parents=True, exist_ok=True)
        args.study_dir = study_dir
        open_study(state, study_dir)
        state.save(study_dir)
        print(
            f"study: {study_dir} (looks at {', '.join(map(str, state.progress.design.looks))}"
            f" seeds; continue a stopped study with --resume {study_dir})",
            flush=True,
        )
    crit = Criteria.load(overrides=state.criteria)
    ran, read = 0, {}
    while True:
        done = sum(s.status == DONE for s in state.stages)
        if state.progress.looks_done < done:
            judge_stage(state, study_dir, crit, read)
            continue
        if state.progress.finished or not state.open_values:
            break
        if args.stages is not None and ran >= args.stages:
            again = script_command("alpha-rl-study", ["--resume", str(study_dir)])
            print(
                f"alpha-rl-study: {ran} stage{'' if ran == 1 else 's'} run as --stages asked; "
                f"{len(state.open_values)} treatment(s) open; to continue the study: {again}"
            )
            return PAUSED
        run_stage(state, study_dir, next_stage(state, study_dir))
        ran += 1
    verdict = close_study(state, study_dir)
    for line in verdict_lines(state):
        print(line)
    return EXIT[verdict]


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    exit_with_verdict("alpha-rl-study", lambda: run(parse(argv)))


if __name__ == "__main__":
    main()
