"""Tracker against a real SQLite store: exact delivery, outages mid-run and at open, NaN/inf."""

from __future__ import annotations

import json
import logging
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import requests
import sqlalchemy.exc
from mlflow.tracking import MlflowClient

from alpha_rl.tracking import TrackingConfig, open_tracker
from tests.tracking.conftest import BlockedStore, Outage, diag_lines, history, make_cfg

KEYS = ("loss/l_q", "trade/pnl", "perf/sps")


def _value(key: str, step: int) -> float:
    return step * 0.25 + KEYS.index(key)


def _log_steps(tracker, steps: range) -> None:
    for step in steps:
        tracker.log_point(step, {k: _value(k, step) for k in KEYS}, {"hindsight": {"n": step}})


def _assert_every_point_once(client: MlflowClient, run_id: str, steps: range) -> None:
    for key in KEYS:
        assert history(client, run_id, key) == [(s, _value(key, s)) for s in steps], key


def test_params_tags_metrics_and_texts_arrive_exactly(
    cfg: TrackingConfig, client: MlflowClient, run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Outage(monkeypatch, ["log_batch"])
    params = {f"group{i % 7}.key{i}": i * 1.5 for i in range(349)}
    params["market.path"] = "p" * 7000  # over MLflow's 6000-character limit
    tracker = open_tracker(cfg, run_dir, run_name="exact")
    tracker.log_params(params)
    tracker.set_tags({"her": "on", "backend": "numpy"})
    _log_steps(tracker, range(850))  # 2550 values over 3 keys
    tracker.log_text("seed: 0\n", "config.yaml")
    tracker.finish()

    run = client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "exact"
    stored = run.data.params
    assert len(stored) == 350
    assert stored["market.path"].startswith("p" * 5000)
    assert stored["market.path"].endswith("[truncated]") and len(stored["market.path"]) <= 6000
    assert all(stored[k] == str(v) for k, v in params.items() if k != "market.path")
    assert run.data.tags["her"] == "on" and run.data.tags["backend"] == "numpy"
    _assert_every_point_once(client, tracker.run_id, range(850))
    assert all(m <= 1000 and p <= 100 and t <= 100 for m, p, t in spy.batches), spy.batches
    assert sum(m for m, _, _ in spy.batches) == 2550
    artifacts = {a.path for a in client.list_artifacts(tracker.run_id)}
    assert artifacts == {"config.yaml", "diag.jsonl"}
    assert [line["step"] for line in diag_lines(run_dir)] == list(range(850))
    assert diag_lines(run_dir)[3] == {
        "step": 3,
        "time": diag_lines(run_dir)[3]["time"],
        "metrics": {k: _value(k, 3) for k in KEYS},
        "hindsight": {"n": 3},
    }
    saved = json.loads((run_dir / "tracking.json").read_text())
    assert saved["run_id"] == tracker.run_id and saved["experiment"] == cfg.experiment
    assert not (run_dir / "unsent.jsonl").exists()


@pytest.mark.parametrize(
    "error",
    [
        lambda: sqlalchemy.exc.OperationalError("INSERT", {}, Exception("disk I/O error")),
        lambda: requests.ConnectionError("connection refused"),
        lambda: OSError(28, "No space left on device"),
    ],
    ids=["sqlalchemy", "requests", "oserror"],
)
def test_an_outage_mid_run_loses_nothing_and_warns_once(
    uri: str,
    client: MlflowClient,
    run_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    error,
) -> None:
    outage = Outage(monkeypatch, ["log_batch", "log_text"], error=error)
    cfg = make_cfg(uri, batch_size=90, retry_s=0.0, final_retry_s=0.0)
    tracker = open_tracker(cfg, run_dir, run_name="outage")
    tracker.log_params({"seed": 0})
    outage.window["log_batch"] = range(4, 9)  # five log_batch calls in a row fail
    with caplog.at_level(logging.INFO, logger="alpha_rl.tracking"):
        _log_steps(tracker, range(300))
        tracker.log_text("table", "isv_table.txt")
        tracker.finish()

    assert outage.failures == 5
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "unreachable" in warnings[0].getMessage()
    assert sum("reachable again" in r.getMessage() for r in caplog.records) == 1
    _assert_every_point_once(client, tracker.run_id, range(300))
    assert client.get_run(tracker.run_id).info.status == "FINISHED"
    assert len(diag_lines(run_dir)) == 300
    assert not (run_dir / "unsent.jsonl").exists()


def test_a_store_down_at_open_gets_the_run_created_later(
    tmp_path: Path, run_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = BlockedStore(tmp_path)
    uri = store.uri
    cfg = store.config(retry_s=0.0, final_retry_s=0.0)
    store.block()
    with caplog.at_level(logging.WARNING, logger="alpha_rl.tracking"):
        tracker = open_tracker(cfg, run_dir, run_name="late", parent_run_id=None)
        tracker.log_params({"seed": 3, "env.num_envs": 64})
        tracker.set_tags({"backend": "numpy"})
        tracker.log_text("seed: 3\n", "config.yaml")
        _log_steps(tracker, range(40))
        assert not tracker.flush()
    assert tracker.run_id is None
    assert not (run_dir / "tracking.json").exists()
    assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 1

    store.restore()  # the store is back
    _log_steps(tracker, range(40, 60))
    assert tracker.flush()
    assert tracker.run_id is not None
    tracker.finish()

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(tracker.run_id)
    assert run.data.params == {"seed": "3", "env.num_envs": "64"}
    assert run.data.tags["backend"] == "numpy"
    _assert_every_point_once(client, tracker.run_id, range(60))
    assert {a.path for a in client.list_artifacts(tracker.run_id)} == {"config.yaml", "diag.jsonl"}
    assert json.loads((run_dir / "tracking.json").read_text())["run_id"] == tracker.run_id


def test_nan_and_inf_reach_mlflow_and_the_jsonl_stays_json(
    cfg: TrackingConfig, client: MlflowClient, run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = []
    original = MlflowClient.log_batch

    def spy(self, run_id, metrics=(), **kwargs):
        sent.extend(metrics)
        return original(self, run_id, metrics=metrics, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", spy)
    values = {"a": math.nan, "b": math.inf, "c": -math.inf, "d": np.float32("nan"), "e": 1.5}
    tracker = open_tracker(cfg, run_dir, run_name="nan")
    tracker.log_point(
        10, values, {"hindsight": {"ratio": math.nan, "arr": np.array([1.0, np.inf])}}
    )
    tracker.log_point(20, {"a": 2.0})
    tracker.finish()

    lines = diag_lines(run_dir)  # strict JSON: no NaN/Infinity literals
    assert lines[0]["metrics"] == {"a": "nan", "b": "inf", "c": "-inf", "d": "nan", "e": 1.5}
    assert lines[0]["hindsight"] == {"ratio": "nan", "arr": [1.0, "inf"]}
    by_key = {m.key: m.value for m in sent if m.step == 10}
    assert math.isnan(by_key["a"]) and math.isnan(by_key["d"])
    assert by_key["b"] == math.inf and by_key["c"] == -math.inf  # sent as floats
    assert math.isnan(history(client, tracker.run_id, "a")[0][1])
    assert history(client, tracker.run_id, "a")[1] == (20, 2.0)
    # the SQL store keeps ±inf as ±float max
    assert history(client, tracker.run_id, "b")[0][1] in (math.inf, sys.float_info.max)
    assert history(client, tracker.run_id, "c")[0][1] in (-math.inf, -sys.float_info.max)


def test_refused_items_are_kept_aside_and_the_rest_arrives(
    uri: str,
    client: MlflowClient,
    run_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    spy = Outage(monkeypatch, ["log_batch"])
    cfg = make_cfg(uri, batch_size=20, flush_every_s=1e9)  # sends at every 20 values
    tracker = open_tracker(cfg, run_dir, run_name="refused")
    with caplog.at_level(logging.WARNING, logger="alpha_rl.tracking"):
        tracker.log_params({"seed": 0, "resume": None})
        tracker.log_params({"seed": 0, "resume": "outputs/x", "env[0]": 1})  # changed, bad key
        for step in range(30):
            tracker.log_point(step, {"loss/l_q": step / 4, "reward/ema{c0}": 1.0})
        tracker.finish()

    run = client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == {"seed": "0", "resume": "None"}
    assert history(client, tracker.run_id, "loss/l_q") == [(s, s / 4) for s in range(30)]
    rejected = [json.loads(line) for line in (run_dir / "rejected.jsonl").read_text().splitlines()]
    assert sorted(r["item"][0] for r in rejected if r["kind"] == "param") == ["env[0]", "resume"]
    metric_steps = sorted(r["item"][3] for r in rejected if r["kind"] == "metric")
    assert metric_steps == list(range(30))  # every point of the refused key, none lost
    assert len([r for r in caplog.records if "refused" in r.getMessage()]) == 1
    # the first chunk is refused, then tried item by item; later chunks skip the refused key
    assert [m for m, _, _ in spy.batches if m] == [20] + [1] * 20 + [10, 10]
