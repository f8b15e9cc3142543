"""A staged study in MLflow: one run for the study, each stage's multirun parent nested under it
(its jobs' runs under that), and at the end the verdict, the seeds each treatment needed and a
note on the study's run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from alpha_rl.errors import AlphaRlError
from alpha_rl.killcheck import report
from alpha_rl.killcheck.report import NOTE_TAG, UNDECIDED
from alpha_rl.study.state import Stage, StudyState
from alpha_rl.tracking.config import TrackingConfig
from alpha_rl.tracking.delivery import PARENT_TAG
from alpha_rl.tracking.links import open_line
from alpha_rl.tracking.parent import nested_parent
from alpha_rl.tracking.store import Rejected, Store, StoreDown, set_http_limits

STUDY_TAG = "alpha_rl.study"  # on the study's run: the preset it studies
STAGE_TAG = "alpha_rl.study_stage"  # on a stage's parent run: its look (1-based)


def _config(state: StudyState) -> TrackingConfig:
    return TrackingConfig.from_cfg(OmegaConf.create(state.tracking))


def _store(state: StudyState) -> Store:
    cfg = _config(state)
    set_http_limits(cfg.http_timeout_s, cfg.http_retries)
    return Store(state.uri, cfg.retry_s)


def _call(state: StudyState, what: str, fn: Any) -> Any:
    store = _store(state)
    try:
        return store.call(what, fn, store.experiment_id(state.experiment))
    except (StoreDown, Rejected) as exc:
        raise AlphaRlError(f"the study cannot {what} in {store.uri} ({exc}): start its tracking "
                           "store, then continue with --resume") from None  # fmt: skip


def open_study(state: StudyState, study_dir: Path) -> None:
    """The study's own MLflow run (RUNNING until the study ends)."""
    looks = ", ".join(map(str, state.progress.design.looks))
    tags = {STUDY_TAG: state.preset, "alpha_rl.study_dir": str(study_dir),
            "alpha_rl.study_axis": state.axis, "alpha_rl.study_looks": looks}  # fmt: skip
    name = f"study__{state.preset}__{study_dir.name.rsplit('__', 1)[-1]}"
    run = _call(state, "create the study's run",
                lambda c, eid: c.create_run(eid, tags=tags, run_name=name))  # fmt: skip
    state.parent = run.info.run_id


def stage_parent(state: StudyState, stage: Stage, sweep_dir: Path) -> str:
    """The parent run of a stage's multirun, nested under the study's run (the multirun takes it
    as its own from <sweep dir>/mlflow_parent.json)."""
    tags = {PARENT_TAG: str(state.parent), STAGE_TAG: str(stage.look + 1)}
    name = f"{state.preset}__stage{stage.look + 1}__seeds{stage.seeds[0]}-{stage.seeds[-1]}"
    run_id = nested_parent(sweep_dir, _config(state), name, tags)
    if run_id is None:
        raise AlphaRlError(f"the study cannot create stage {stage.look + 1}'s run in "
                           f"{state.uri}: start its tracking store, then continue with "
                           "--resume")  # fmt: skip
    return run_id


def overall_of(state: StudyState) -> str:
    """The study's verdict over its treatments' (those still open UNDECIDED), as a check's."""
    verdicts = [d["verdict"] for d in state.progress.decided.values()]
    return report.overall_of(verdicts + [UNDECIDED] * len(state.open_values))


def verdict_lines(state: StudyState) -> list[str]:
    """The study's last lines: each treatment's verdict and the seeds it needed, the verdict."""
    looks = state.progress.design.looks
    lines = []
    for value in state.values:
        found = state.progress.decided.get(value)
        label = f"{state.axis}={value}"
        if found is None:
            lines.append(f"{label}: UNDECIDED (study stopped before its last look)")
            continue
        seeds = looks[found["look"]]
        lines.append(f"{label}: {found['verdict']} at look {found['look'] + 1} ({seeds} seeds, "
                     f"{found['pairs']} pairs)")  # fmt: skip
    used = max((looks[d["look"]] for d in state.progress.decided.values()), default=0)
    n = len(state.values)
    lines.append(f"verdict: {overall_of(state)} ({n} treatment{'' if n == 1 else 's'}, {used} "
                 f"seeds at most of {looks[-1]})")  # fmt: skip
    return lines


def close_study(state: StudyState, study_dir: Path) -> str:
    """The verdict, the seeds each treatment needed and a note on the study's run, which ends
    FINISHED; the UI line printed. Returns the overall verdict."""
    verdict = overall_of(state)
    looks = state.progress.design.looks
    tags = {"kill_check.verdict": verdict, "kill_check.axis": state.axis}
    rows = ["| treatment | verdict | look | seeds |", "|---|---|---|---|"]
    for value, found in state.progress.decided.items():
        tags[f"kill_check.verdict.{value}"] = found["verdict"]
        tags[f"study.seeds.{value}"] = str(looks[found["look"]])
        rows.append(f"| {state.axis}={value} | **{found['verdict']}** | {found['look'] + 1} | "
                    f"{looks[found['look']]} |")  # fmt: skip
    text = "\n".join(
        [
            f"**Staged study** of `{state.preset}` on the `{state.axis}` axis: "
            f"**{verdict}** (looks at {', '.join(map(str, looks))} seeds)",
            "",
            *rows,
            "",
            f"Each look's table: {study_dir}/look<k>/kill_check.json",
        ]
    )
    tags[NOTE_TAG] = text

    def finish(client: Any, eid: str) -> str:
        for key, value in tags.items():
            client.set_tag(state.parent, key, value)
        client.set_terminated(state.parent, "FINISHED")
        return eid

    eid = _call(state, "record the study's verdict", finish)
    line = open_line(state.uri, eid, run_id=state.parent)
    if line:
        print(f"the study in the UI: {line}")
    return verdict
