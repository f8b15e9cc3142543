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
from alpha_rl.tracking.links import open_line
from tests.helpers import seeded_store

pytestmark = pytest.mark.slow  # whole sweeps in subprocesses: 20-60 s each

ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}


def uri_of(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/mlflow.db"


def sweep(tmp_path: Path, *overrides: str) -> None:
    """A tiny numpy multirun into tmp_path/sweep, tracked into tmp_path/mlflow.db (made from the
    empty template: these tests are about the check)."""
    uri = seeded_store(tmp_path / "mlflow.db")
    cmd = [sys.executable, "-m", "alpha_rl.train", "-m", *overrides, "debug=tiny",
           "backend=numpy", f"tracking.uri={uri}", "hydra.sweep.dir=sweep"]  # fmt: skip
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


STABILITY = "5 no destabilisation (eval/l_q_probe)"
BROKEN, BENEFIT = "6 runs that broke (rate)", "7 no held-out harm (eval/pnl)"
DECIDED = ("PASS", "KILL", "OPEN")  # judged: harm, harmlessness or neither shown
# these sweeps run two seeds (one on some axes); the check's min_seeds 5 would leave their
# statistical criteria NOT-EVALUATED, so most checks here lower it to what the sweep has
TWO = "min_seeds=2"


def test_sweep_then_kill_check_on_its_parent(tmp_path: Path) -> None:
    sweep(tmp_path, "experiment=her_ablation", "steps=60")
    done = check(tmp_path)
    out = done.stdout
    last = out.splitlines()[-1]
    # two seeds, two pairs: fewer than min_seeds, so the statistical rows wait (UNDECIDED)
    assert done.returncode == 2, out + done.stderr[-3000:]
    assert last.startswith(f"verdict: UNDECIDED (her=on undecided: {STABILITY}: ")
    assert "2 pairs < min_seeds 5: not judged" in last
    with contextlib.chdir(tmp_path):  # the check's directory: the UI line as it reads there
        opening = open_line(uri_of(tmp_path), "1").split(", then ")[0]
    assert f"runs in the UI: {opening}, then http://127.0.0.1:5000/" in out
    report = report_of(tmp_path)
    [on] = report["treatments"]
    assert on["value"] == "on" and len(on["pairs"]) == 2 and report["unpaired"] == []
    found = {r["criterion"]: r for r in on["criteria"]}
    verdicts = {k: r["verdict"] for k, r in found.items()}
    # numpy runs executed the oracles themselves: nothing to audit, forward HER's count of
    # its lost closes read (not blocking)
    assert (verdicts["1 track"], verdicts["2 backward inject"]) == ("NOT-APPLICABLE",) * 2
    assert verdicts["3 forward inject"] == "PASS" and not found["3 forward inject"]["required"]
    # criterion 4 by half the run's 60 steps, not the default 10k
    assert verdicts["4 injections on done steps"] == "PASS"
    assert "by step 30 " in found["4 injections on done steps"]["threshold"]
    assert {verdicts[k] for k in (STABILITY, BROKEN, BENEFIT)} == {"NOT-EVALUATED"}
    parent = json.loads((tmp_path / "sweep" / "mlflow_parent.json").read_text())["run_id"]
    client = MlflowClient(tracking_uri=uri_of(tmp_path))
    tags = client.get_run(parent).data.tags
    assert (tags["kill_check.verdict"], tags["kill_check.criteria"]) == ("UNDECIDED", "default")
    names = {a.path for a in client.list_artifacts(parent, "kill_check")}
    assert names == {"kill_check/kill_check.json", "kill_check/kill_check.png"}
    # the same runs judged on their two pairs: the probe loss of real runs (both arms evaluated
    # on the same probe set), the broken rate and held-out harm decide
    judged = check(tmp_path, TWO)
    assert judged.returncode in (0, 1, 2), judged.stdout + judged.stderr[-3000:]
    assert "verdict: CANNOT-JUDGE" not in judged.stdout
    [on] = report_of(tmp_path)["treatments"]
    assert {r["criterion"]: r["verdict"] for r in on["criteria"]}[STABILITY] in DECIDED
    # non-default settings over a default verdict: reported, not recorded
    assert "not recorded on the runs: 5 of them hold a verdict of the default" in judged.stdout
    assert client.get_run(parent).data.tags["kill_check.verdict"] == "UNDECIDED"
    recorded = check(tmp_path, TWO, "--record")
    assert recorded.returncode == judged.returncode
    tags = client.get_run(parent).data.tags
    assert tags["kill_check.verdict"] == report_of(tmp_path)["verdict"] == on["verdict"]
    assert tags["kill_check.criteria"] == "non-default: min_seeds=2 (default 5)"


def judged_on_axis(tmp_path: Path, axis: str, header: str) -> tuple[dict, dict[str, str]]:
    """The kill check on the sweep along `axis` (min_seeds 2), whose one treatment's table opens
    with `header`: (the report, that treatment's verdict per criterion)."""
    done = check(tmp_path, "--axis", axis, TWO)
    assert done.returncode in (0, 1, 2), done.stdout + done.stderr[-3000:]
    assert header in done.stdout and "verdict: CANNOT-JUDGE" not in done.stdout
    report = report_of(tmp_path)
    [treatment] = report["treatments"]
    return report, {r["criterion"]: r["verdict"] for r in treatment["criteria"]}


def test_reward_variants_judged_on_the_beta_axis(tmp_path: Path) -> None:
    sweep(tmp_path, "experiment=reward_variants", "seed=0,1")
    report, verdicts = judged_on_axis(tmp_path, "beta", "== beta=active vs beta=sentinel: 2 pairs")
    assert verdicts["1 track"] == "NOT-APPLICABLE"
    # off the her axis the broken rate and held-out harm decide; criterion 5 is reported
    assert verdicts[STABILITY] == "INFO"
    assert verdicts[BROKEN] in DECIDED and verdicts[BENEFIT] in DECIDED
    unpaired = [u["why"].split(" run")[0] for u in report["unpaired"]]
    assert unpaired == ["beta=sentinel"] * 2  # stride 6


def test_learner_variants_judged_on_the_agent_axis(tmp_path: Path) -> None:
    # three of the six learners keep the test short (every name: tests/test_rainbow.py)
    sweep(tmp_path, "experiment=learner_variants", "agent=dqn,dqn_nstep3,rainbow", "seed=0,1")
    done = check(tmp_path, "--axis", "agent", TWO)
    assert done.returncode in (0, 1, 2), done.stdout + done.stderr[-3000:]
    assert "verdict: CANNOT-JUDGE" not in done.stdout
    report = report_of(tmp_path)
    labels = ["agent=dqn_nstep3", "agent=rainbow"]
    assert [t["label"] for t in report["treatments"]] == labels and report["unpaired"] == []
    bases = [{p["baseline"] for p in t["pairs"]} for t in report["treatments"]]
    assert bases[0] == bases[1] and len(bases[0]) == 2  # the two dqn runs
    for t in report["treatments"]:
        assert len(t["pairs"]) == 2 and f"verdict {t['label']}: {t['verdict']}" in done.stdout
        verdicts = {r["criterion"]: r["verdict"] for r in t["criteria"]}
        assert verdicts["1 track"] == "NOT-APPLICABLE"
        assert verdicts[STABILITY] == "INFO"  # each learner's probe loss is its own
        assert verdicts[BROKEN] in DECIDED and verdicts[BENEFIT] in DECIDED
    # the same sweep along one key: n = 3 against n = 1 (the dqn_nstep3 and rainbow runs)
    header = "== agent.n_step=3 vs agent.n_step=1:"
    assert header in check(tmp_path, "--axis", "agent.n_step").stdout


def test_aux_variants_judged_on_the_beta_and_the_alpha_axes(tmp_path: Path) -> None:
    # two of the three β arms keep the test short; the sweep is the experiment's otherwise
    sweep(tmp_path, "experiment=aux_variants", "beta=sentinel,active_controller", "seed=0")
    done = check(tmp_path, "--axis", "beta", TWO)
    assert done.returncode in (0, 1, 2), done.stdout + done.stderr[-3000:]
    report = report_of(tmp_path)
    [controlled] = report["treatments"]
    assert controlled["label"] == "beta=active_controller" and len(controlled["pairs"]) == 2
    assert report["unpaired"] == []  # one pair per alpha arm
    assert {r["criterion"]: r["verdict"] for r in controlled["criteria"]}[BENEFIT] in DECIDED
    done = check(tmp_path, "--axis", "alpha", TWO)
    assert done.returncode in (0, 1, 2), done.stdout + done.stderr[-3000:]
    report = report_of(tmp_path)
    [treatment] = report["treatments"]
    assert treatment["label"] == "alpha=on" and len(treatment["pairs"]) == 2  # per beta
    verdicts = {r["criterion"]: r["verdict"] for r in treatment["criteria"]}
    assert verdicts[STABILITY] == "INFO" and verdicts[BENEFIT] in DECIDED


def test_her_components_gives_a_verdict_per_component(tmp_path: Path) -> None:
    sweep(tmp_path, "experiment=her_components", "seed=0")
    done = check(tmp_path)
    # one seed: a pair per component, fewer than min_seeds: each undecided, saying why
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    report = report_of(tmp_path)
    assert [t["label"] for t in report["treatments"]] == ["her=backward", "her=forward", "her=on"]
    assert all(len(t["pairs"]) == 1 for t in report["treatments"]) and report["unpaired"] == []
    assert len({t["pairs"][0]["baseline"] for t in report["treatments"]}) == 1  # one her=off run
    last = done.stdout.splitlines()[-1]
    for t in report["treatments"]:
        assert f"verdict {t['label']}: UNDECIDED" in done.stdout
        blocked = f"{BROKEN}: 1 pair < min_seeds 5: not judged"
        assert blocked in t["blocked_by"] and f"{t['label']} undecided: " in last
        verdicts = {r["criterion"]: r["verdict"] for r in t["criteria"]}
        # numpy runs: nothing to audit; criterion 4 by half the run's 40 steps
        assert verdicts["1 track"] == verdicts["2 backward inject"] == "NOT-APPLICABLE"
        assert verdicts["4 injections on done steps"] == "PASS"
    assert last.startswith("verdict: UNDECIDED (her=backward undecided: ")


def test_a_walk_forward_ablation_is_judged_fold_by_fold(tmp_path: Path) -> None:
    sweep(tmp_path, "experiment=her_walk_forward", "validation.folds=3", "market.fold=0,1,2")
    done = check(tmp_path)  # six pairs: judged with the default criteria
    out = done.stdout
    assert done.returncode in (0, 1, 2) and "verdict: CANNOT-JUDGE" not in out, out
    report = report_of(tmp_path)
    [on] = report["treatments"]
    assert len(on["pairs"]) == 6 and report["unpaired"] == []  # 2 seeds x 3 folds
    found = {r["criterion"]: r for r in on["criteria"]}
    assert found[STABILITY]["verdict"] in DECIDED and found[BENEFIT]["verdict"] in DECIDED
    assert found[STABILITY]["evidence"]["strata"] == found[BENEFIT]["evidence"]["strata"] == 3
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
