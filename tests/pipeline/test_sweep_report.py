"""A multirun's last lines: its runs counted by how they ended, and the kill check (or the
confirmation) that judges it, with the axis each preset varies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alpha_rl.commands import script_command
from alpha_rl.pipeline.report.sweep_report import (
    OUTCOME_FILE,
    job_states,
    next_commands,
    sweep_lines,
    write_outcome,
)
from tests.helpers import compose_train


@pytest.mark.parametrize(("preset", "axes"), [
    ("her_ablation", [[]]),
    ("her_components", [[]]),
    ("her_walk_forward", [[]]),  # market.fold pairs runs, it is no axis
    ("learner_variants", [["--axis", "agent"]]),
    ("aux_variants", [["--axis", "beta"], ["--axis", "alpha"]]),
    ("reward_variants", [["--axis", "beta"]]),
])  # fmt: skip
def test_each_preset_is_judged_on_the_axes_it_varies(preset: str, axes: list[list[str]]) -> None:
    cfg, _ = compose_train([f"experiment={preset}"])
    assert next_commands(cfg, Path("multirun/x")) == [
        script_command("alpha-rl-kill-check", ["--sweep", "multirun/x", *axis]) for axis in axes
    ]


def test_another_store_and_experiment_are_named_in_the_command() -> None:
    cfg, _ = compose_train(["experiment=her_ablation", "tracking.uri=http://host:5000",
                            "tracking.experiment=my study"])  # fmt: skip
    assert next_commands(cfg, Path("multirun/a b")) == [
        script_command("alpha-rl-kill-check", ["--sweep", "multirun/a b", "--tracking-uri",
                                               "http://host:5000", "--experiment", "my study"])
    ]  # fmt: skip


def test_a_search_is_followed_by_its_confirmation(tmp_path: Path) -> None:
    cfg, _ = compose_train(["hparams_search=her_optuna"])
    (tmp_path / "mlflow_parent.json").write_text(json.dumps({"run_id": "abc123"}))
    confirm = script_command("alpha-rl-confirm", ["--parent", "abc123"])
    assert next_commands(cfg, tmp_path) == [confirm]


def test_jobs_are_counted_by_how_they_ended(tmp_path: Path) -> None:
    for job, status in enumerate(["FINISHED", "FAILED", "FINISHED", "KILLED"]):
        (tmp_path / str(job)).mkdir()
        write_outcome(tmp_path / str(job), status, 10, None)
    (tmp_path / "4").mkdir()  # killed hard: no outcome
    (tmp_path / "5").mkdir()  # did not start
    (tmp_path / "6").mkdir()
    (tmp_path / "6" / OUTCOME_FILE).write_text("{torn")
    states = job_states(tmp_path, [{"job": "5", "error": "bad key"}])
    assert states == {"FINISHED": 2, "FAILED": 1, "KILLED": 1, "no end recorded": 2,
                      "did not start": 1}  # fmt: skip


def test_seeds_alone_leave_nothing_to_judge(tmp_path: Path) -> None:
    cfg, _ = compose_train([f"hydra.sweep.dir={tmp_path}", "tracking.uri=databricks://lab"])
    write_outcome(tmp_path, "FINISHED", 1, None)  # the sweep dir itself is no job
    (tmp_path / "0").mkdir()
    write_outcome(tmp_path / "0", "FINISHED", 5, None)
    assert sweep_lines(cfg, []) == [
        f"sweep {tmp_path}: 1 job: 1 FINISHED",
        "nothing to judge: the sweep varies nothing (a kill check compares the arms of a variant)",
    ]
