"""A small her_ablation sweep on the numpy backend, then the kill check on its parent run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient


def test_sweep_then_kill_check_on_its_parent(tmp_path: Path) -> None:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    sweep = [sys.executable, "-m", "alpha_rl.train", "-m", "experiment=her_ablation",
             "debug=tiny", "backend=numpy", "steps=60", f"tracking.uri={uri}",
             "hydra.sweep.dir=sweep"]  # fmt: skip
    done = subprocess.run(sweep, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    check = [sys.executable, "-m", "alpha_rl.killcheck", "--tracking-uri", uri, "--sweep", "sweep",
             "--out", "report", "min_steps_with_her=50"]  # fmt: skip
    done = subprocess.run(check, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout
    # numpy runs are not audited: criteria 1-3 are NOT-EVALUATED, so the check cannot keep them
    assert done.returncode == 2, out + done.stderr[-3000:]
    assert "1 track" in out and "NOT-EVALUATED" in out and "verdict: CANNOT-JUDGE" in out
    assert "4 injections on done steps" in out and "5 no destabilisation" in out
    report = json.loads((tmp_path / "report" / "kill_check.json").read_text())
    [on] = report["treatments"]
    assert on["value"] == "on" and len(on["pairs"]) == 2 and report["unpaired"] == []
    verdicts = {r["criterion"]: r["verdict"] for r in on["criteria"]}
    assert verdicts["4 injections on done steps"] == "PASS"
    # the probe loss of real runs: both arms evaluated on the same probe set, and compared
    assert verdicts["5 no destabilisation (eval/l_q_probe)"] in ("PASS", "KILL")
    parent = json.loads((tmp_path / "sweep" / "mlflow_parent.json").read_text())["run_id"]
    client = MlflowClient(tracking_uri=uri)
    assert client.get_run(parent).data.tags["kill_check.verdict"] == "CANNOT-JUDGE"
    names = {a.path for a in client.list_artifacts(parent, "kill_check")}
    assert names == {"kill_check/kill_check.json", "kill_check/kill_check.png"}
    # the same runs judged without requiring the audit: the remaining criteria decide
    keep = subprocess.run([*check, "require_audit=false"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert keep.returncode in (0, 1) and "verdict: CANNOT-JUDGE" not in keep.stdout


def test_reward_variants_judged_on_the_beta_axis(tmp_path: Path) -> None:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    sweep = [sys.executable, "-m", "alpha_rl.train", "-m", "experiment=reward_variants",
             "debug=tiny", "backend=numpy", f"tracking.uri={uri}",
             "hydra.sweep.dir=sweep"]  # fmt: skip
    done = subprocess.run(sweep, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    check = [sys.executable, "-m", "alpha_rl.killcheck", "--tracking-uri", uri, "--sweep", "sweep",
             "--out", "report", "--axis", "beta"]  # fmt: skip
    done = subprocess.run(check, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stdout + done.stderr[-3000:]
    assert "== beta=active vs beta=sentinel: 1 pairs" in done.stdout
    report = json.loads((tmp_path / "report" / "kill_check.json").read_text())
    [active] = report["treatments"]
    verdicts = {r["criterion"]: r["verdict"] for r in active["criteria"]}
    assert verdicts["1 track"] == "NOT-APPLICABLE"
    assert verdicts["5 no destabilisation (eval/l_q_probe)"] in ("PASS", "KILL")
    assert [u["why"].split(" run")[0] for u in report["unpaired"]] == ["beta=sentinel"]  # stride 6


def test_her_components_gives_a_verdict_per_component(tmp_path: Path) -> None:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    sweep = [sys.executable, "-m", "alpha_rl.train", "-m", "experiment=her_components", "seed=0",
             "debug=tiny", "backend=numpy", f"tracking.uri={uri}",
             "hydra.sweep.dir=sweep"]  # fmt: skip
    done = subprocess.run(sweep, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    check = [sys.executable, "-m", "alpha_rl.killcheck", "--tracking-uri", uri, "--sweep", "sweep",
             "--out", "report", "min_steps_with_her=30", "require_audit=false"]  # fmt: skip
    done = subprocess.run(check, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stdout + done.stderr[-3000:]
    report = json.loads((tmp_path / "report" / "kill_check.json").read_text())
    assert [t["label"] for t in report["treatments"]] == ["her=backward", "her=forward", "her=on"]
    assert all(len(t["pairs"]) == 1 for t in report["treatments"]) and report["unpaired"] == []
    assert len({t["pairs"][0]["baseline"] for t in report["treatments"]}) == 1  # one her=off run
    for t in report["treatments"]:
        assert f"verdict {t['label']}: {t['verdict']}" in done.stdout
