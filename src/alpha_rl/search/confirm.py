"""`alpha-rl-confirm --parent <search run>`: a search's best configurations again, on data it never
chose by, judged against the default config.

The best `--top` completed trials of the search's study, and the default config as the baseline,
each run on `--seeds` the search never trained on and on walk-forward folds (`--folds`; by
default the folds whose test windows end before the search's held-out part begins) as one
multirun, then judged by the variant check on the `search` axis (each candidate against the
default, run by run of the same seed and fold). The report says:
- how far each candidate's objective shrank from the search to the confirmation: the winner of
  many noisy trials is partly its luck, and the shrinkage is that selection bias made visible;
- how many configurations the search tried (the multiple-testing count), and the winner's
  Deflated Sharpe Ratio (Bailey & López de Prado 2014): the probability that its held-out Sharpe
  beats the best Sharpe that many trials would show by chance.
Exit status: the variant check's (0 every candidate kept, 1 any killed, 2 cannot judge).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from alpha_rl import paths
from alpha_rl.commands import script_command
from alpha_rl.errors import AlphaRlError
from alpha_rl.killcheck.axes import axis_for, default_value
from alpha_rl.killcheck.cli import exit_with_verdict, wanted
from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.judge import judge
from alpha_rl.killcheck.report import EXIT, NOTE_TAG, note, overall, summary, table
from alpha_rl.masking import hide_password
from alpha_rl.pipeline.configure.objective import MARGIN, METRIC
from alpha_rl.search.shrinkage import Candidate, describe, report
from alpha_rl.search.storage import existing_storage
from alpha_rl.search.study import STUDY_TAG
from alpha_rl.tracking import RunReader
from alpha_rl.tracking.parent import PARENT_FILE, recorded_parent
from alpha_rl.tracking.stores import bound_requests, first_line

REMEDY = "give --tracking-uri of the MLflow store the search logged to"
GROUP = "candidate"  # the config group the confirmation writes its candidates into
# overrides of the search that the confirmation sets itself
OWN = ("hparams_search=", "seed=", "validation=", "validation.", "market.fold=", "hydra.",
       "hydra/", "search.")  # fmt: skip


def unseen_folds(search_split: float, folds: int, test_fraction: float) -> list[int]:
    """The walk-forward folds whose test windows end before the single split's held-out part."""
    return [k for k in range(folds) if 1 - (folds - k - 1) * test_fraction <= search_split + 1e-9]


def parse(argv: list[str] | None) -> argparse.Namespace:
    tracking = OmegaConf.load(paths.conf_dir() / "tracking" / "local.yaml")
    p = argparse.ArgumentParser(
        prog="alpha-rl-confirm",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="more overrides for the confirmation's runs (hydra/launcher=local_gpus, "
        "backend=cuda, steps=...)",
    )
    p.add_argument("--parent", required=True, help="the search's parent run id")
    p.add_argument("--tracking-uri", default=str(tracking.uri), help="MLflow tracking URI")
    p.add_argument("--experiment", default=str(tracking.experiment), help="MLflow experiment")
    p.add_argument("--top", type=int, default=3, help="the best trials to confirm (default 3)")
    p.add_argument(
        "--seeds",
        default="1000,1001,1002,1003,1004",
        help="seeds for the confirmation, none of them the search's",
    )
    p.add_argument(
        "--folds",
        default=None,
        help="walk-forward folds (default: those whose "
        "test windows end before the search's held-out part)",
    )
    p.add_argument(
        "--out", type=Path, help="where the runs and the report go (default outputs/confirm/<time>)"
    )
    return p.parse_args(argv)


def load_study(reader: RunReader, parent: str) -> Any:
    import optuna

    record = reader.run(parent, lambda k: False)
    study_name, storage = record.tags.get(STUDY_TAG), record.tags.get("search.storage")
    if not study_name or not storage:
        raise AlphaRlError(
            f"--parent {parent}: not the parent run of a search (no {STUDY_TAG} "
            "and search.storage tags)"
        )
    shown = hide_password(storage)
    opened = existing_storage(storage, f" (the search.storage tag of --parent {parent}): put "
                                       "the search's storage back there")  # fmt: skip
    try:
        return optuna.load_study(study_name=study_name, storage=opened)
    except KeyError as exc:
        raise AlphaRlError(f"study {study_name!r} is not in {shown}: {exc}") from exc
    except Exception as exc:  # the storage boundary: whatever Optuna or SQLAlchemy raises
        raise AlphaRlError(f"study storage {shown} cannot be read ({first_line(exc)}): put "
                           "the search's storage back (from a backup)") from exc  # fmt: skip


def candidates(study: Any, top: int) -> list[Candidate]:
    """The default config first, then the `top` best completed trials."""
    import optuna

    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not done:
        raise AlphaRlError(f"study {study.study_name!r} has no completed trial to confirm")
    best = sorted(
        done, key=lambda t: t.value, reverse=study.direction == optuna.study.StudyDirection.MAXIMIZE
    )[:top]
    return [
        Candidate("default", None, {}, math.nan),
        *(Candidate(f"trial{t.number}", t.number, dict(t.params), float(t.value)) for t in best),
    ]


def write_group(conf: Path, study_name: str, picks: list[Candidate]) -> None:
    """conf/candidate/<name>.yaml: each candidate's params (and search.study / search.trial)."""
    group = conf / GROUP
    group.mkdir(parents=True, exist_ok=True)
    for c in picks:
        node = OmegaConf.create({"search": {"study": study_name, "trial": c.trial}})
        defaults = []
        for key, value in c.params.items():
            if (paths.conf_dir() / key).is_dir():  # a config group: chosen, not set
                defaults.append(f"override /{key}: {value}")
            else:
                OmegaConf.update(node, key, value, force_add=True)
        text = "# @package _global_\n"
        if defaults:
            text += "defaults:\n" + "".join(f"  - {d}\n" for d in defaults)
        (group / f"{c.name}.yaml").write_text(text + OmegaConf.to_yaml(node))


def run_confirmation(
    args: argparse.Namespace,
    study: Any,
    picks: list[Candidate],
    out: Path,
    seeds: list[int],
    folds: list[int],
) -> Path:
    """The multirun of every candidate x seed x fold; its sweep directory."""
    fixed = [f for f in study.user_attrs.get("fixed", []) if not f.lstrip("+~").startswith(OWN)]
    extra = []
    if any("her.lookahead" in c.params for c in picks):  # every arm on the same folds
        longest = max(
            [int(c.params.get("her.lookahead", 0)) for c in picks]
            + [int(default_value("her.lookahead"))]
        )
        extra.append(f"validation.lookahead={longest}")  # the embargo's lookahead
    sweep = out / "sweep"
    cmd = [
        sys.executable,
        "-m",
        "alpha_rl.train",
        "-m",
        *fixed,
        f"hydra.searchpath=[file://{(out / 'conf').resolve()}]",
        f"+{GROUP}={','.join(c.name for c in picks)}",
        "validation=walk_forward",
        *layout_overrides(study),
        f"market.fold={','.join(map(str, folds))}",
        f"seed={','.join(map(str, seeds))}",
        *extra,
        f"tracking.uri={args.tracking_uri}",
        f"tracking.experiment={args.experiment}",
        f"hydra.sweep.dir={sweep}",
        *args.overrides,
    ]
    print("confirmation:", script_command("alpha-rl-train", cmd[3:]), flush=True)
    done = subprocess.run(cmd, env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    if done.returncode != 0:
        raise AlphaRlError(f"the confirmation's multirun exited {done.returncode} ({sweep})")
    return sweep


def layout_overrides(study: Any) -> list[str]:
    """A walk-forward search's fold layout (validation.folds, ...), for folds that are its own."""
    layout = study.user_attrs.get("walk_forward") or {}
    return [f"validation.{k}={'null' if v is None else v}" for k, v in sorted(layout.items())]


def unseen_seeds_and_folds(args: argparse.Namespace, study: Any) -> tuple[list[int], list[int]]:
    """The seeds (--seeds, none the search's own) and walk-forward folds (--folds, or every fold
    that ends before the search's held-out part) the confirmation runs on."""
    # the seeds its trials ran on (a study made before trials ran on several: its one seed)
    searched_seeds = {int(s) for s in study.user_attrs.get("seeds") or
                      [study.user_attrs.get("seed", 0)]}  # fmt: skip
    seeds = [int(s) for s in str(args.seeds).split(",") if s.strip()]
    if searched_seeds & set(seeds):
        raise AlphaRlError(
            f"--seeds {args.seeds}: seed {sorted(searched_seeds & set(seeds))} is "
            "the search's own; confirm on seeds it never ran"
        )
    if args.folds is not None:
        return seeds, [int(f) for f in str(args.folds).split(",") if f.strip()]
    wf = OmegaConf.load(paths.conf_dir() / "validation" / "walk_forward.yaml")
    if study.user_attrs.get("validation") == "walk_forward":  # the folds of its layout it never ran
        searched = set(study.user_attrs.get("folds") or [])
        layout = study.user_attrs.get("walk_forward") or {}
        folds = [k for k in range(int(layout.get("folds") or wf.folds)) if k not in searched]
        if not folds:
            raise AlphaRlError("the search ran every walk-forward fold: name the folds to "
                               "confirm on with --folds")  # fmt: skip
        return seeds, folds
    split = study.user_attrs.get("split")  # the search's own single split
    if split is None:
        split = OmegaConf.load(paths.conf_dir() / "validation" / "single.yaml").split
    folds = unseen_folds(float(split), int(wf.folds), float(wf.test_fraction))
    if not folds:
        raise AlphaRlError(
            "no walk-forward fold ends before the search's held-out part: name them with --folds"
        )
    return seeds, folds


def tag_runs(reader: RunReader, search_parent: str, rep: dict[str, Any], described: str,
             metric: str) -> None:  # fmt: skip
    """The verdict's tags on the search's parent run and the confirmation's, and the note (the
    verdict and the shrinkage) on the confirmation's."""
    confirm_parent = rep["confirm_parent"]
    tags = {
        "confirm.verdict": rep["verdict"],
        "confirm.winner": rep["winner"],
        "confirm.trials_tried": str(rep["trials_tried"]),
        "confirm.deflated_sharpe_ratio": repr(rep["deflated_sharpe_ratio"]),
        "confirm.shrinkage": repr(rep["candidates"][1]["shrinkage"]),
    }
    for run_id in (search_parent, confirm_parent):
        reader.set_tags(run_id, tags | {"confirm.parent": confirm_parent})
    shrinkage = describe(rep, metric).replace("\n", "\n\n")
    reader.set_tags(confirm_parent, {NOTE_TAG: f"{described}\n\n{shrinkage}"})


def run(args: argparse.Namespace) -> int:
    bound_requests()
    reader = RunReader(args.tracking_uri, REMEDY)
    study = load_study(reader, args.parent)
    if args.top < 1:
        raise AlphaRlError(f"--top {args.top}: confirm at least the best trial (1)")
    picks = candidates(study, args.top)
    seeds, folds = unseen_seeds_and_folds(args, study)
    out = (args.out or Path("outputs", "confirm") / time.strftime("%Y-%m-%d_%H-%M-%S")).resolve()
    write_group(out / "conf", study.study_name, picks)
    sweep = run_confirmation(args, study, picks, out, seeds, folds)
    confirm_parent = recorded_parent(sweep)
    if confirm_parent is None:
        raise AlphaRlError(f"the confirmation's multirun {sweep} recorded no parent run "
                           f"({PARENT_FILE}): see its jobs' logs there")  # fmt: skip
    runs = reader.runs(args.experiment, lambda k: wanted(k) or k == METRIC,
                       parent_run_id=confirm_parent)  # fmt: skip
    crit = Criteria.load()
    owned = tuple({k for c in picks for k in c.params} | {"validation."})
    treatments, pairing, family = judge(runs, axis_for("search", owns=owned), crit)
    verdict = overall(treatments)
    print(table(treatments, pairing, crit, family))
    search_runs = {}
    for t in study.trials:
        run_id = t.user_attrs.get("mlflow_run_id")
        if run_id and t.state.name == "COMPLETE":
            search_runs[t.number] = reader.run(run_id, lambda k: k.startswith("eval/"))
    rep = report(study, picks, [r for r in runs if r.params], search_runs)
    rep |= {
        "verdict": verdict,
        "seeds": seeds,
        "folds": folds,
        "search_parent": args.parent,
        "confirm_parent": confirm_parent,
        "sweep": str(sweep),
    }
    objective = study.user_attrs.get("objective", {})
    metric = str(objective.get("metric", METRIC))
    if metric == MARGIN:  # the margin over the baseline the search declared (and resolved)
        baseline = study.user_attrs.get("baseline") or objective.get("baseline", "auto")
        metric = f"{MARGIN} over {baseline}"
    print(describe(rep, metric))
    (out / "confirm.json").write_text(json.dumps(rep, indent=2, default=str) + "\n")
    described = note(treatments, verdict, "search", time.strftime("%Y-%m-%dT%H:%M:%S"))
    tag_runs(reader, args.parent, rep, described, metric)
    print(f"report: {out / 'confirm.json'}")
    print(summary(treatments, verdict))
    return EXIT[verdict]


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    exit_with_verdict("alpha-rl-confirm", lambda: run(parse(argv)))


if __name__ == "__main__":
    main()
