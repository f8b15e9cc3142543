"""A staged study end to end on the numpy backend: stages of seeds as multiruns under the study's
MLflow run, a Ctrl-C in the middle of a stage, and `--resume` going on from the store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from alpha_rl.study.cli import main, parse, plan
from tests.helpers import seeded_store

ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
SMALL = ["debug=tiny", "backend=numpy", "study.first_seeds=2", "study.stage_seeds=2",
         "study.max_seeds=6"]  # fmt: skip


def study_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "alpha_rl.study.cli", *args]


@pytest.mark.slow
def test_a_study_stopped_in_a_stage_resumes_and_decides_from_its_store(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = seeded_store(tmp_path / "mlflow.db")
    study = tmp_path / "study"
    args = ["her_ablation", *SMALL, f"tracking.uri={uri}", "--criteria", "min_seeds=2",
            "--dir", str(study)]  # fmt: skip
    first = subprocess.Popen(study_cmd(*args), cwd=tmp_path, env=ENV, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)  # fmt: skip
    seen = []
    for line in first.stdout:  # the first stage runs and is judged; stop the second
        seen.append(line)
        if line.startswith("stage 2: "):
            os.killpg(first.pid, signal.SIGINT)  # a Ctrl-C in the terminal: the whole group
            break
    out, err = first.communicate(timeout=600)
    assert first.returncode == 130, "".join(seen) + out + err[-3000:]
    assert "== look 1 of 3: 2 seeds" in "".join(seen)
    again = f"--resume {study}"
    # the multirun stopped by the Ctrl-C, or the study while it was starting the multirun
    assert (
        "alpha-rl-study: stopped by SIGINT in stage 2; to continue the study: " in err
        or "alpha-rl-study: stopped by Ctrl-C (SIGINT); to continue the study: " in err
    )
    assert again in err and "Traceback" not in err
    state = json.loads((study / "study.json").read_text())
    assert [s["status"] for s in state["stages"]] == ["done", "running"]
    assert state["progress"]["looks_done"] == 1
    # the study goes on from its record: stage 2 again (its stopped attempt left out), one
    # stage at a time where an allocation is short
    paused = subprocess.run(study_cmd("--resume", str(study), "--stages", "1"), cwd=tmp_path,
                            env=ENV, text=True, capture_output=True, timeout=900)  # fmt: skip
    assert paused.returncode == 3, paused.stderr[-3000:]
    assert "1 stage run as --stages asked; 1 treatment(s) open; to continue the study: " in (
        paused.stdout)  # fmt: skip
    done = subprocess.run(study_cmd("--resume", str(study)), cwd=tmp_path, env=ENV, text=True,
                          capture_output=True, timeout=900)  # fmt: skip
    assert done.returncode in (0, 1, 2), done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("verdict: ") and "(1 treatment, " in lines[-1]
    assert lines[-2].startswith("her=on: ")
    state = json.loads((study / "study.json").read_text())
    statuses = [(Path(s["sweep_dir"]).name, s["status"]) for s in state["stages"]]
    assert statuses[:3] == [("stage1", "done"), ("stage2", "abandoned"),
                            ("stage2.attempt2", "done")]  # fmt: skip
    looks = state["progress"]["looks_done"]
    assert looks == len([s for s in statuses if s[1] == "done"]) >= 2
    client = MlflowClient(tracking_uri=uri)
    parent = client.get_run(state["parent"])
    assert parent.info.status == "FINISHED" and parent.data.tags["alpha_rl.study"] == "her_ablation"
    verdict = lines[-1].split()[1]
    assert parent.data.tags["kill_check.verdict"] == verdict
    assert "**Staged study**" in parent.data.tags["mlflow.note.content"]
    # each stage's multirun under the study's run, its runs under the stage
    for stage in state["stages"]:
        run = client.get_run(stage["parent"])
        assert run.data.tags["mlflow.parentRunId"] == state["parent"]
    # the last look judged only the stages that ran to their end
    kept = {s["parent"] for s in state["stages"] if s["status"] == "done"}
    report = json.loads((study / f"look{looks}" / "kill_check.json").read_text())
    judged = {p[k] for t in report["treatments"] for p in t["pairs"]
              for k in ("treatment", "baseline")}  # fmt: skip
    parents = {client.get_run(r).data.tags["mlflow.parentRunId"] for r in judged}
    assert judged and parents <= kept


def test_a_study_is_refused_before_anything_runs(tmp_path: Path, capsys) -> None:
    """Mistakes a user can make, each one line naming what to do, exit 2, nothing run."""
    cases = [
        (["nosuch"], "experiment=nosuch: no such preset in conf/experiment/"),
        (["her_ablation", "seed=3"], "seed=3: the study sets seed and experiment itself"),
        (["her_ablation", "study.nosuch=1"], "unknown study setting(s) ['nosuch']"),
        (["her_ablation", "--axis", "beta"], "name the axis the study decides with --axis"),
        (["her_ablation", "study.max_seeds=1"], "a staged study needs 2 <= first stage (5)"),
        (["her_ablation", "study.max_seeds=abc"], "study.max_seeds='abc': give a whole number"),
        (["her_ablation", "study.stage_seeds=2.5"], "study.stage_seeds=2.5: give a whole number"),
        (["her_ablation", "--stages", "0"], "--stages 0: give at least 1"),
        (["--resume", str(tmp_path)], "no study.json there"),
        ([], "name the experiment preset to study"),
    ]
    for argv, said in cases:
        with pytest.raises(SystemExit) as stop:
            main([*argv, "--dir", str(tmp_path / "s")] if argv and argv[0] != "--resume"
                 else argv)  # fmt: skip
        err = capsys.readouterr().err
        assert stop.value.code == 2 and said in err and "Traceback" not in err, (argv, err)
    assert not (tmp_path / "s").exists()


def test_a_study_plans_its_axis_values_and_looks_from_the_preset() -> None:
    state, where = plan(parse(["her_components", "study.max_seeds=20", "steps=100"]))
    assert (state.axis, state.baseline, state.values) == ("her", "off", ["backward", "forward",
                                                                         "on"])  # fmt: skip
    assert state.progress.design.looks == (5, 10, 15, 20)
    assert state.overrides == ["steps=100"] and where.parent.name == "study"
    # options may stand between the overrides, as a user types them
    args = parse(["her_components", "--stages", "2", "steps=100", "--axis", "her"])
    assert (args.stages, args.axis, args.overrides) == (2, "her", ["steps=100"])
    state, _ = plan(parse(["aux_variants"]))
    assert (state.axis, state.baseline) == ("beta", "sentinel")
    assert state.values == ["active", "active_controller"]
