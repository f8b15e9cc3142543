"""The kill check on MLflow stores built here with known trajectories."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from alpha_rl.killcheck.cli import parse, run

STEPS = np.arange(500, 12001, 500)  # log points up to 12k env steps
SEEDS = (0, 1, 2)


def l_q_curve(seed: int, scale: float = 1.0) -> np.ndarray:
    """A decaying loss with seed noise."""
    noise = np.random.default_rng(seed).normal(0, 0.01, STEPS.size)
    return scale * (0.2 + np.exp(-STEPS / 3000.0)) + noise


class Store:
    """An experiment of runs with chosen params, tags and metric histories."""

    def __init__(self, tmp_path: Path) -> None:
        self.uri = f"sqlite:///{tmp_path}/mlflow.db"
        self.client = MlflowClient(tracking_uri=self.uri)
        self.eid = self.client.create_experiment("alpha_rl")
        self.parent = self.client.create_run(self.eid, run_name="sweep").info.run_id

    def add(self, her: bool, seed: int, metrics: dict[str, np.ndarray], **params: str) -> str:
        run = self.client.create_run(self.eid, tags={"mlflow.parentRunId": self.parent,
                                                     "her": "on" if her else "off"})  # fmt: skip
        rid = run.info.run_id
        p = {"her.enabled": str(her), "her.backward": str(her), "her.forward": str(her),
             "seed": str(seed), "agent.lr": "0.0003", **params}  # fmt: skip
        if her:
            p |= {"her.threshold": "1.5", "isv.slots.her.her_threshold.index": "549"}
        ms = [Metric(k, float(v), 0, int(s)) for k, vals in metrics.items()
              for s, v in zip(STEPS, vals, strict=True)]  # fmt: skip
        self.client.log_batch(rid, params=[Param(k, v) for k, v in p.items()])
        for i in range(0, len(ms), 1000):
            self.client.log_batch(rid, metrics=ms[i : i + 1000])
        self.client.set_terminated(rid)
        return rid

    def ablation(self, her_l_q=None, her_extra=None, seeds=SEEDS, with_base=True,
                 base_extra=None) -> None:  # fmt: skip
        """HER and baseline runs per seed; `her_l_q(seed)` / `her_extra` change the HER runs,
        `base_extra` adds metrics to the baselines."""
        for seed in seeds:
            capture_base = np.clip(STEPS / 12000.0, 0, 1) * 0.4
            capture_her = np.clip(STEPS / 4000.0, 0, 1) * 0.4
            her = {
                "loss/l_q": her_l_q(seed) if her_l_q else l_q_curve(seed + 10),
                "her/inject_total": STEPS * 3.0,
                "her/backward_total": STEPS * 2.0,
                "trade/count": np.full(STEPS.size, 5000.0),
                "eval/capture_ratio": capture_her,
                **{f"audit/{k}": np.zeros(STEPS.size) for k in
                   ("her_track", "her_inject", "her_record", "her_forward")},
            }  # fmt: skip
            self.add(True, seed, her | (her_extra or {}))
            if with_base:
                base = {"loss/l_q": l_q_curve(seed), "eval/capture_ratio": capture_base}
                self.add(False, seed, base | (base_extra or {}))

    def check(self, tmp_path: Path, *overrides: str) -> tuple[int, dict]:
        out = tmp_path / "report"
        code = run(parse(["--tracking-uri", self.uri, "--parent", self.parent, "--out", str(out),
                          *overrides]))  # fmt: skip
        return code, json.loads((out / "kill_check.json").read_text())


def rows(report: dict) -> dict[str, str]:
    return {r["criterion"]: r["verdict"] for r in report["criteria"]}


def test_a_stable_her_ablation_is_kept(tmp_path: Path, capsys) -> None:
    store = Store(tmp_path)
    store.ablation()
    code, report = store.check(tmp_path)
    assert code == 0 and report["verdict"] == "KEEP", capsys.readouterr().out
    assert set(rows(report).values()) == {"PASS", "INFO"}
    assert (
        report["settings"]["window"] == 0.25 and report["settings"]["min_steps_with_her"] == 10000
    )
    by_name = {r["criterion"]: r for r in report["criteria"]}
    speed = by_name["speed-up to capture target"]["evidence"]["speedup"]
    assert speed["geomean"] == pytest.approx(3.0, rel=0.05)  # 0.25 reached at 3000 vs 7500+
    out = capsys.readouterr().out
    assert "verdict: KEEP" in out and "5 no destabilisation" in out
    client = store.client
    parent = client.get_run(store.parent)
    assert parent.data.tags["kill_check.verdict"] == "KEEP"
    names = {a.path for a in client.list_artifacts(store.parent, "kill_check")}
    assert names == {"kill_check/kill_check.json", "kill_check/kill_check.png"}
    assert plt.imread(tmp_path / "report" / "kill_check.png").shape[1] == 1320  # no eval/pnl
    children = client.search_runs([store.eid], "tags.`mlflow.parentRunId` != ''")
    assert {r.data.tags.get("kill_check.verdict") for r in children} == {"KEEP"}


def test_the_held_out_evaluation_at_the_end_is_reported_not_judged(tmp_path: Path) -> None:
    store = Store(tmp_path)
    pnl = lambda level: np.full(STEPS.size, level)  # noqa: E731
    store.ablation(her_extra={"eval/pnl": pnl(30_000.0)}, base_extra={"eval/pnl": pnl(45_000.0)})
    code, report = store.check(tmp_path)
    assert code == 0  # an INFO row never decides the verdict
    by_name = {r["criterion"]: r for r in report["criteria"]}
    capture = by_name["held-out capture_ratio at the end"]
    # the last 25% of 12k steps: HER at 0.4, the baseline rising 0.3 -> 0.4 (mean 0.35)
    assert capture["verdict"] == "INFO" and not capture["required"]
    assert capture["evidence"]["difference"]["mean"] == pytest.approx(0.05)
    money = by_name["held-out pnl at the end"]["evidence"]["difference"]
    assert money["mean"] == pytest.approx(-15_000.0) and money["n"] == len(SEEDS)
    assert "held-out sharpe at the end" not in by_name  # no run logged it
    tags = store.client.get_run(store.parent).data.tags
    assert tags["kill_check.held-out_pnl_at_the_end"] == "INFO"
    # a third panel for the held-out PnL: 3 x 6 inches at 110 dpi (two panels: 1320 px)
    png = plt.imread(tmp_path / "report" / "kill_check.png")
    assert png.shape[1] == 1980


def test_a_diverging_her_run_is_killed(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.ablation(her_l_q=lambda seed: l_q_curve(seed) * np.linspace(1, 40, STEPS.size))
    code, report = store.check(tmp_path)
    assert code == 1 and rows(report)["5 no destabilisation"] == "KILL"


def test_a_slightly_worse_but_noisy_her_run_is_not_killed_on_noise(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.ablation(her_l_q=lambda seed: l_q_curve(seed + 10) * 1.05)
    code, report = store.check(tmp_path)
    assert code == 0 and rows(report)["5 no destabilisation"] == "PASS"


def test_a_nan_in_her_l_q_is_killed(tmp_path: Path) -> None:
    store = Store(tmp_path)
    curve = l_q_curve(3)
    curve[-1] = np.nan
    store.ablation(her_l_q=lambda seed: curve if seed == 1 else l_q_curve(seed))
    code, report = store.check(tmp_path)
    assert code == 1 and rows(report)["5 no destabilisation"] == "KILL"


def test_zero_injections_after_10k_steps_is_killed(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.ablation(her_extra={"her/inject_total": np.zeros(STEPS.size),
                              "her/backward_total": np.zeros(STEPS.size)})  # fmt: skip
    code, report = store.check(tmp_path)
    assert code == 1 and rows(report)["4 injections on done steps"] == "KILL"


def test_audit_mismatches_are_killed(tmp_path: Path) -> None:
    store = Store(tmp_path)
    bad = np.zeros(STEPS.size)
    bad[7] = 3
    store.ablation(her_extra={"audit/her_forward": bad})
    code, report = store.check(tmp_path)
    assert code == 1
    assert rows(report)["3 forward inject"] == "KILL" and rows(report)["1 track"] == "PASS"


def test_more_backward_injections_than_closes_is_killed(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.ablation(her_extra={"trade/count": np.full(STEPS.size, 10.0)})  # 1000 per interval
    code, report = store.check(tmp_path)
    assert code == 1 and rows(report)["2 backward inject"] == "KILL"


def test_unpaired_runs_cannot_be_judged(tmp_path: Path, capsys) -> None:
    store = Store(tmp_path)
    store.ablation(with_base=False)
    store.add(False, 7, {"loss/l_q": l_q_curve(7)})  # a baseline of another seed
    code, report = store.check(tmp_path)
    assert code == 2 and report["verdict"] == "CANNOT-JUDGE"
    assert len(report["unpaired"]) == 4 and report["pairs"] == []
    assert rows(report)["5 no destabilisation"] == "NOT-EVALUATED"
    assert capsys.readouterr().out.count("unpaired:") == 4


def test_runs_differing_beyond_her_do_not_pair(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.ablation(seeds=(0,), with_base=False)
    store.add(False, 0, {"loss/l_q": l_q_curve(0)}, **{"agent.lr": "0.001"})
    code, report = store.check(tmp_path)
    assert code == 2 and len(report["unpaired"]) == 2
