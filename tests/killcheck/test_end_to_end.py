"""Small sweeps on the numpy backend, then the kill check on their parent run."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from alpha_rl.killcheck import cli

pytestmark = pytest.mark.slow  # whole sweeps in subprocesses: 20-60 s each

ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}


def uri_of(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/mlflow.db"


def sweep(tmp_path: Path, *overrides: str) -> None:
    """A tiny numpy multirun into tmp_path/sweep, tracked into tmp_path/mlflow.db."""
    cmd = [sys.executable, "-m", "alpha_rl.train", "-m", *overrides, "debug=tiny",
           "backend=numpy", f"tracking.uri={uri_of(tmp_path)}",
           "hydra.sweep.dir=sweep"]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def check(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """The kill check on that sweep (report into tmp_path/report), run as its command line runs
    but in this process (a subprocess would import MLflow again for every check)."""
    argv = ["--tracking-uri", uri_of(tmp_path), "--sweep", "sweep", "--out", "report", *args]
    out, err = io.StringIO(), io.StringIO()
    with (
        contextlib.chdir(tmp_path),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            cli.main(argv)
        except SystemExit as exc:
            code = exc.code
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def report_of(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "report" / "kill_check.json").read_text())


def test_sweep_then_kill_check_on_its_parent(tmp_path: Path) -> None:
    sweep(tmp_path, "experiment=her_ablation", "steps=60")
    done = check(tmp_path, "min_steps_with_her=50")
    out = done.stdout
    # numpy runs are not audited: criteria 1-3 are NOT-EVALUATED, so the check cannot keep them
    assert done.returncode == 2, out + done.stderr[-3000:]
    assert "1 track" in out and "NOT-EVALUATED" in out and "verdict: CANNOT-JUDGE" in out
    assert "4 injections on done steps" in out and "5 no destabilisation" in out
    report = report_of(tmp_path)
    [on] = report["treatments"]
    assert on["value"] == "on" and len(on["pairs"]) == 2 and report["unpaired"] == []
    verdicts = {r["criterion"]: r["verdict"] for r in on["criteria"]}
    assert verdicts["4 injections on done steps"] == "PASS"
    # the probe loss of real runs: both arms evaluated on the same probe set, and compared
    assert verdicts["5 no destabilisation (eval/l_q_probe)"] in ("PASS", "KILL")
    parent = json.loads((tmp_path / "sweep" / "mlflow_parent.json").read_text())["run_id"]
    client = MlflowClient(tracking_uri=uri_of(tmp_path))
    assert client.get_run(parent).data.tags["kill_check.verdict"] == "CANNOT-JUDGE"
    names = {a.path for a in client.list_artifacts(parent, "kill_check")}
    assert names == {"kill_check/kill_check.json", "kill_check/kill_check.png"}
    # the same runs judged without requiring the audit: the remaining criteria decide
    keep = check(tmp_path, "min_steps_with_her=50", "require_audit=false")
    assert keep.returncode in (0, 1) and "verdict: CANNOT-JUDGE" not in keep.stdout


def judged_on_axis(tmp_path: Path, axis: str, header: str) -> tuple[dict, dict[str, str]]:
    """The kill check on the sweep along `axis`, whose one treatment's table opens with `header`:
    (the report, that treatment's verdict per criterion)."""
    done = check(tmp_path, "--axis", axis)
    assert done.returncode in (0, 1), done.stdout + done.stderr[-3000:]
    assert header in done.stdout
    report = report_of(tmp_path)
    [treatment] = report["treatments"]
    return report, {r["criterion"]: r["verdict"] for r in treatment["criteria"]}


def test_reward_variants_judged_on_the_beta_axis(tmp_path: Path) -> None:
    sweep(tmp_path, "experiment=reward_variants")
    report, verdicts = judged_on_axis(tmp_path, "beta", "== beta=active vs beta=sentinel: 1 pairs")
    assert verdicts["1 track"] == "NOT-APPLICABLE"
    assert verdicts["5 no destabilisation (eval/l_q_probe)"] in ("PASS", "KILL")
    assert [u["why"].split(" run")[0] for u in report["unpaired"]] == ["beta=sentinel"]  # stride 6


def test_learner_variants_judged_on_the_agent_axis(tmp_path: Path) -> None:
    # three of the six learners keep the test short (every name: tests/test_rainbow.py)
    sweep(tmp_path, "experiment=learner_variants", "agent=dqn,dqn_nstep3,rainbow", "seed=0")
    done = check(tmp_path, "--axis", "agent")
    assert done.returncode in (0, 1), done.stdout + done.stderr[-3000:]
    report = report_of(tmp_path)
    labels = ["agent=dqn_nstep3", "agent=rainbow"]
    assert [t["label"] for t in report["treatments"]] == labels and report["unpaired"] == []
    assert len({t["pairs"][0]["baseline"] for t in report["treatments"]}) == 1  # one dqn run
    for t in report["treatments"]:
        assert len(t["pairs"]) == 1 and f"verdict {t['label']}: {t['verdict']}" in done.stdout
        verdicts = {r["criterion"]: r["verdict"] for r in t["criteria"]}
        assert verdicts["1 track"] == "NOT-APPLICABLE"
        assert verdicts["5 no destabilisation (eval/l_q_probe)"] in ("PASS", "KILL")
    # the same sweep along one key: n = 3 against n = 1 (the dqn_nstep3 and rainbow runs)
    header = "== agent.n_step=3 vs agent.n_step=1:"
    assert header in check(tmp_path, "--axis", "agent.n_step").stdout


def test_aux_variants_judged_on_the_beta_and_the_alpha_axes(tmp_path: Path) -> None:
    # two of the three β arms keep the test short; the sweep is the experiment's otherwise
    sweep(tmp_path, "experiment=aux_variants", "beta=sentinel,active_controller", "seed=0")
    done = check(tmp_path, "--axis", "beta")
    assert done.returncode in (0, 1), done.stdout + done.stderr[-3000:]
    report = report_of(tmp_path)
    [controlled] = report["treatments"]
    assert controlled["label"] == "beta=active_controller" and len(controlled["pairs"]) == 2
    assert report["unpaired"] == []  # one pair per alpha arm
    done = check(tmp_path, "--axis", "alpha")
    assert done.returncode in (0, 1), done.stdout + done.stderr[-3000:]
    report = report_of(tmp_path)
    [treatment] = report["treatments"]
    assert treatment["label"] == "alpha=on" and len(treatment["pairs"]) == 2  # per beta
    verdicts = {r["criterion"]: r["verdict"] for r in treatment["criteria"]}
    assert verdicts["5 no destabilisation (eval/l_q_probe)"] in ("PASS", "KILL")


def test_her_components_gives_a_verdict_per_component(tmp_path: Path) -> None:
    sweep(tmp_path, "experiment=her_components", "seed=0")
    done = check(tmp_path, "min_steps_with_her=30", "require_audit=false")
    assert done.returncode in (0, 1), done.stdout + done.stderr[-3000:]
    report = report_of(tmp_path)
    assert [t["label"] for t in report["treatments"]] == ["her=backward", "her=forward", "her=on"]
    assert all(len(t["pairs"]) == 1 for t in report["treatments"]) and report["unpaired"] == []
    assert len({t["pairs"][0]["baseline"] for t in report["treatments"]}) == 1  # one her=off run
    for t in report["treatments"]:
        assert f"verdict {t['label']}: {t['verdict']}" in done.stdout


def test_a_walk_forward_ablation_is_judged_fold_by_fold(tmp_path: Path) -> None:
    sweep(tmp_path, "experiment=her_walk_forward", "validation.folds=3", "market.fold=0,1,2")
    done = check(tmp_path, "min_steps_with_her=30", "require_audit=false")
    out = done.stdout
    assert done.returncode in (0, 1), out + done.stderr[-3000:]
    report = report_of(tmp_path)
    [on] = report["treatments"]
    assert len(on["pairs"]) == 6 and report["unpaired"] == []  # 2 seeds x 3 folds
    client = MlflowClient(tracking_uri=uri_of(tmp_path))
    for pair in on["pairs"]:
        t, b = (client.get_run(pair[k]).data for k in ("treatment", "baseline"))
        assert t.params["market.fold"] == b.params["market.fold"] == t.tags["fold"]
        assert (t.params["seed"], t.params["fold.test_start"]) == (
            b.params["seed"], b.params["fold.test_start"])  # fmt: skip
        assert t.params["validation.embargo_resolved"] == "9"  # debug=tiny: horizon 4 + 5
        assert t.params["units.pnl"].startswith("USD: price move (USD) x env.multiplier 100")
    for fold in range(3):
        assert f"fold {fold} " in out and "held-out pnl difference" in out
    assert "over 6 pairs in 3 folds" in out
