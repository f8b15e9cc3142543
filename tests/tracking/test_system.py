"""tracking.system_metrics: MLflow's system metrics in a run (on for cuda runs by default, off for
numpy ones unless asked), and its settings checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from alpha_rl.errors import ConfigError
from alpha_rl.tracking import TrackingConfig
from tests.helpers import compose_train
from tests.pipeline.test_run import client, job


@pytest.mark.slow
def test_a_numpy_run_logs_system_metrics_when_asked_and_not_by_default(tmp_path: Path) -> None:
    asked = job(tmp_path, ["tracking.system_metrics=true", "tracking.system_metrics_interval_s=0.1",
                           "steps=80"], "asked")  # fmt: skip
    plain = job(tmp_path, [], "plain")
    assert asked.status == plain.status == "FINISHED"
    keys = set(client(tmp_path).get_run(asked.run_id).data.metrics)
    assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"} <= keys
    history = client(tmp_path).get_metric_history(asked.run_id, "system/cpu_utilization_percentage")
    assert [p.step for p in history] == list(range(len(history)))  # one step per sample
    assert not any(
        k.startswith("system/") for k in client(tmp_path).get_run(plain.run_id).data.metrics
    )


def test_system_metrics_default_to_the_backend_and_are_checked() -> None:
    cfg, _ = compose_train([])
    tracking = TrackingConfig.from_cfg(cfg.tracking)
    assert tracking.system_metrics is None
    assert tracking.system_metrics_for("cuda") and not tracking.system_metrics_for("numpy")
    for key, value, match in (("system_metrics", "'yes'", "true, false or null"),
                              ("system_metrics_interval_s", "0", ">= 0.1")):  # fmt: skip
        cfg, _ = compose_train([f"tracking.{key}={value}"])
        with pytest.raises(ConfigError, match=match):
            TrackingConfig.from_cfg(cfg.tracking)
