"""Whole jobs on the numpy backend, tracked into a SQLite MLflow store made for each test."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from alpha_rl.errors import CheckpointError, ConfigError
from alpha_rl.pipeline.evaluation import evaluate
from alpha_rl.pipeline.life import checkpoint
from alpha_rl.pipeline.life import run as pipeline_run
from alpha_rl.pipeline.life.record import Point
from alpha_rl.pipeline.life.run import Job, run_job
from alpha_rl.tracking.reap import HEARTBEAT
from tests.helpers import compose_train, seeded_store

TINY = ["backend=numpy", "debug=tiny"]
ANNEAL = "replay.beta_anneal_updates=29"  # the 40-step run's own, so a run's halves share it


def job(tmp_path: Path, overrides: list[str], name: str = "run"):
    """A run of conf/train.yaml on numpy (debug=tiny, `overrides`) in tmp_path/`name`, tracked
    into tmp_path/mlflow.db (made from the empty template: these tests are about the run)."""
    uri = seeded_store(tmp_path / "mlflow.db")
    cfg, choices = compose_train([*TINY, f"tracking.uri={uri}", *overrides])
    return run_job(cfg, Job(tmp_path / name, choices))


def client(tmp_path: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")


def history(tmp_path: Path, run_id: str, key: str) -> list[tuple[int, float]]:
    points = client(tmp_path).get_metric_history(run_id, key)
    return sorted((p.step, p.value) for p in points)


def theta(run_dir: Path) -> np.ndarray:
    with np.load(checkpoint.latest(run_dir) / "state.npz", allow_pickle=False) as npz:
        return npz["learner.theta"]


def test_a_run_records_metrics_params_tags_and_artifacts(tmp_path: Path) -> None:
    out = job(tmp_path, [])
    assert out.status == "FINISHED" and out.steps == 40
    run = client(tmp_path).get_run(out.run_id)
    l_q = history(tmp_path, out.run_id, "loss/l_q")
    assert [s for s, _ in l_q] == [15, 20, 25, 30, 35, 40]  # every log step after learn_start 10
    for key in ("her/inject_count_step", "her/inject_total", "her/threshold",
                "her/priority_boost", "trade/capture_ratio", "replay/synthetic_frac",
                "reward/ema_c0", "perf/sps", "eval/pnl", "eval/sharpe"):  # fmt: skip
        assert history(tmp_path, out.run_id, key), key
    assert run.data.params["agent.lr"] == "0.0003" and len(run.data.params) > 100
    # PER's beta anneals over the run's own 30 updates (steps 10..39): 1 at the last one
    assert run.data.params["replay.beta_anneal_updates_resolved"] == "29"
    beta = history(tmp_path, out.run_id, "replay/beta")
    assert beta[-1] == (40, 1.0) and beta[0][1] < 1.0
    tags = run.data.tags
    assert (tags["her"], tags["reward_stride"], tags["beta"]) == ("on", "7", "sentinel")
    assert tags["backend"] == "numpy" and tags["audit"].startswith("not audited")
    assert tags["git_sha"] and run.info.status == "FINISHED"
    names = {a.path for a in client(tmp_path).list_artifacts(out.run_id)}
    assert {"config.yaml", "isv_table.txt", "diag.jsonl"} <= names
    lines = [json.loads(x) for x in (out.run_dir / "diag.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [5, 10, 15, 20, 25, 30, 35, 40]
    assert lines[-1]["hindsight"]["inject_total"] > 0


@pytest.mark.slow
def test_stride6_and_stride7_with_beta_sentinel_train_identically(tmp_path: Path) -> None:
    six = job(tmp_path, ["reward_variant=stride6"], "six")
    seven = job(tmp_path, ["reward_variant=stride7_sentinel"], "seven")
    a, b = history(tmp_path, six.run_id, "loss/l_q"), history(tmp_path, seven.run_id, "loss/l_q")
    assert len(a) == 6 and a == b
    np.testing.assert_array_equal(theta(six.run_dir), theta(seven.run_dir))
    # the check can tell them apart: active β pays c6 at the closes its aux head agrees with,
    # so the stored rewards differ. With 8 envs x 40 steps such a close is chance (whether one
    # happens depends on the trajectory): 64 envs, every row kept, give several (5 here)
    wide = ["env.num_envs=64", "replay.capacity_log2=13", "her.closed_ring=64"]
    runs = [job(tmp_path, [*wide, f"reward_variant={v}"], v)
            for v in ("stride7_sentinel", "stride7_active")]  # fmt: skip
    rewards = [np.load(checkpoint.latest(out.run_dir) / "state.npz")["replay.s_reward"]
               for out in runs]  # fmt: skip
    assert (rewards[0] != rewards[1]).any(), "active β should change the stored rewards"


def test_resume_continues_the_same_run_and_equals_an_unbroken_one(tmp_path: Path, unbroken) -> None:
    half = job(tmp_path, ["steps=20", ANNEAL], "half")
    assert theta(half.run_dir).shape == unbroken.theta.shape
    resumed = job(tmp_path, [f"resume={half.run_dir}", ANNEAL], "ignored")
    assert resumed.run_id == half.run_id and resumed.run_dir == half.run_dir
    assert resumed.steps == 40
    assert history(tmp_path, half.run_id, "loss/l_q") == unbroken.l_q
    np.testing.assert_array_equal(theta(half.run_dir), unbroken.theta)
    steps = [json.loads(x)["step"] for x in (half.run_dir / "diag.jsonl").read_text().split()]
    assert steps == sorted(set(steps))


def test_an_extended_run_keeps_the_beta_anneal_of_its_first_steps(tmp_path: Path) -> None:
    half = job(tmp_path, ["steps=20"], "half")  # 10 updates: beta 1 at the 10th
    job(tmp_path, [f"resume={half.run_dir}", "steps=40"], "ignored")
    beta = history(tmp_path, half.run_id, "replay/beta")
    assert [s for s, _ in beta] == [15, 20, 25, 30, 35, 40]
    assert beta[0][1] < 1.0 and [b for _, b in beta[1:]] == [1.0] * 5
    params = client(tmp_path).get_run(half.run_id).data.params
    assert params["replay.beta_anneal_updates_resolved"] == "9"


def test_resume_refuses_a_changed_config(tmp_path: Path) -> None:
    half = job(tmp_path, ["steps=20"], "half")
    with pytest.raises(CheckpointError, match=r"agent\.lr: 0\.0003 -> 0\.001"):
        job(tmp_path, [f"resume={half.run_dir}", "agent.lr=0.001"])
    with pytest.raises(CheckpointError, match="nowhere: no such run directory; give the"):
        job(tmp_path, [f"resume={tmp_path / 'nowhere'}"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no checkpoint there"):
        job(tmp_path, [f"resume={tmp_path / 'empty'}"])


def test_a_bad_config_fails_before_anything_is_allocated(tmp_path, monkeypatch) -> None:
    def touched(*_a, **_k):
        raise AssertionError("the market or the backend was touched before the config check")

    monkeypatch.setattr(pipeline_run, "market_and_config", touched)
    monkeypatch.setattr(pipeline_run, "open_sessions", touched)
    with pytest.raises(ConfigError, match=r"eval\.num_envs"):
        job(tmp_path, ["eval.num_envs=0"])
    with pytest.raises(ConfigError, match=r"replay\.capacity_log2"):
        job(tmp_path, ["replay.capacity_log2=2"])
    with pytest.raises(ConfigError, match=r"reward\.scale='big' must be auto .* or a number > 0"):
        job(tmp_path, ["reward.scale=big"])
    with pytest.raises(ConfigError, match=r"reward\.typical_range"):
        job(tmp_path, ["reward.typical_range=[10,1]"])


def test_a_diverging_run_ends_failed_with_its_reason(tmp_path: Path) -> None:
    out = job(tmp_path, ["agent.lr=1e30", "agent.grad_clip=0", "checkpoint.every=10"])
    assert out.status == "FAILED" and "NaN or infinite" in (out.reason or "")
    run = client(tmp_path).get_run(out.run_id)
    assert run.info.status == "FAILED"
    l_q = history(tmp_path, out.run_id, "loss/l_q")
    assert l_q[-1][0] == 15 and not np.isfinite(l_q[-1][1])  # the NaN point itself is recorded
    assert "NaN or infinite" in run.data.tags["alpha_rl.failure_reason"]
    meta = json.loads((checkpoint.latest(out.run_dir) / "meta.json").read_text())
    assert meta["step"] == 10  # the last good state is kept


def test_a_store_outage_mid_run_loses_nothing(tmp_path: Path, monkeypatch) -> None:
    real = MlflowClient.log_batch
    calls = {"n": 0}

    def flaky(self, *args, **kwargs):
        calls["n"] += 1
        if 2 <= calls["n"] <= 6:
            raise ConnectionError("tracking store unreachable")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", flaky)
    out = job(tmp_path, ["tracking.batch_size=10", "tracking.retry_s=0"])
    assert calls["n"] > 6, "the outage window was never reached"
    monkeypatch.setattr(MlflowClient, "log_batch", real)
    lines = [json.loads(x) for x in (out.run_dir / "diag.jsonl").read_text().splitlines()]
    for line in lines:
        for key, value in line["metrics"].items():
            stored = dict(history(tmp_path, out.run_id, key))
            assert line["step"] in stored, (key, line["step"])
            if value is not None and np.isfinite(value):
                assert stored[line["step"]] == pytest.approx(value, rel=1e-6), key


def test_forward_her_judges_from_its_first_lookahead_with_the_auto_ring(tmp_path, caplog) -> None:
    # 512 envs exploring close ~200 trades a step: more in one 30-step lookahead than the fixed
    # ring of 4096 (the old default) holds, which then loses every one before it comes due
    wide = ["env.num_envs=512", "her=forward", "her.lookahead=30", "steps=60", "log_every=5",
            "replay.capacity_log2=14", "eval.every=0", "eval.first=[]"]  # fmt: skip
    auto = job(tmp_path, wide, "auto")
    params = client(tmp_path).get_run(auto.run_id).data.params
    assert params["her.closed_ring"] == "auto" and params["her.closed_ring_resolved"] == "16384"
    forward = dict(history(tmp_path, auto.run_id, "her/forward_total"))
    assert forward[30] == 0 and forward[35] > 0  # judged on the step each close comes due
    assert {v for _, v in history(tmp_path, auto.run_id, "her/forward_overwritten_total")} == {0}
    closes = dict(history(tmp_path, auto.run_id, "her/forward_closes_total"))
    judged = dict(history(tmp_path, auto.run_id, "her/forward_judged_total"))
    assert closes[60] > 4096 * 2 and 0 < judged[60] < closes[60]
    assert not [r for r in caplog.records if "forward HER lost" in r.getMessage()]

    fixed = job(tmp_path, [*wide, "her.closed_ring=4096"], "fixed")
    assert {v for _, v in history(tmp_path, fixed.run_id, "her/forward_total")} == {0}
    lost = dict(history(tmp_path, fixed.run_id, "her/forward_overwritten_total"))
    share = dict(history(tmp_path, fixed.run_id, "her/forward_overwritten_share"))
    assert lost[60] > 0 and share[60] > 0.5
    first = min(step for step, v in share.items() if v > 0.01)
    warned = [r.getMessage() for r in caplog.records if "forward HER lost" in r.getMessage()]
    assert len(warned) == 1  # at the first log point past her.max_overwritten, once
    assert any(
        "her.closed_ring=4096 holds fewer than the 15872 closes 512 envs can make in one "
        "lookahead" in r.getMessage()
        for r in caplog.records
    )  # predicted at the start
    assert f"closed by step {first} " in warned[0]
    assert "her.max_overwritten=0.01: its ring of 4096" in warned[0] and "16384" in warned[0]


def _points(run_dir: Path) -> list[dict]:
    """diag.jsonl's lines less what the clock decides (the time, perf/*, the heartbeat)."""
    lines = [json.loads(line) for line in (run_dir / "diag.jsonl").read_text().splitlines()]
    for line in lines:
        line.pop("time")
        line["metrics"] = {k: v for k, v in line["metrics"].items()
                           if not k.startswith("perf/") and k != HEARTBEAT}  # fmt: skip
    return lines


def test_an_evaluation_whose_ledgers_come_late_writes_the_same_points(
    tmp_path: Path, monkeypatch
) -> None:
    """A run steps on while its evaluation's ledgers are computed (in a pack's workers): the
    evaluation's log point is written once they are done, whole and before any later point, so
    diag.jsonl and the store hold what ledgers computed at once give, line for line."""
    (tmp_path / "now").mkdir(), (tmp_path / "late").mkdir()
    now = job(tmp_path / "now", ["eval.every=10", "log_every=5"])
    slow = ThreadPoolExecutor(1)  # each ledger done 0.3 s after it is asked for

    def late(pool, fn, *args):
        return slow.submit(lambda: (time.sleep(0.3), fn(*args))[1])

    monkeypatch.setattr(evaluate, "submitted", late)
    written, write = [], Point.write

    def spy(self, tracker, summary, progress):
        written.append((self.t, progress.done, self.reading.waiting() is not None))
        return write(self, tracker, summary, progress)

    monkeypatch.setattr(Point, "write", spy)
    then = job(tmp_path / "late", ["eval.every=10", "log_every=5"])
    slow.shutdown()
    # it stepped on while the ledgers were computed, and wrote each point at a later step
    assert written and all(now > t for t, now, _ in written) and any(w for *_, w in written)
    assert now.status == then.status == "FINISHED"
    points = _points(then.run_dir)
    assert [p["step"] for p in points] == sorted({p["step"] for p in points})  # each step once
    assert sum("eval/pnl" in p["metrics"] for p in points) >= 4
    assert points == _points(now.run_dir)
    for key in ("eval/pnl", "eval/l_q_probe", "loss/l_q"):
        assert history(tmp_path / "late", then.run_id, key) == history(tmp_path / "now",
                                                                       now.run_id, key)  # fmt: skip
