"""TrackingConfig: the shipped config loads; every bad value is refused naming its key."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from omegaconf import OmegaConf

from alpha_rl import paths
from alpha_rl.errors import ConfigError
from alpha_rl.tracking import TrackingConfig


def _shipped() -> dict[str, Any]:
    node = OmegaConf.load(paths.conf_dir() / "tracking" / "local.yaml")
    return OmegaConf.to_container(node)


def test_the_shipped_config_loads() -> None:
    cfg = TrackingConfig.from_cfg(OmegaConf.load(paths.conf_dir() / "tracking" / "local.yaml"))
    assert cfg.uri == "sqlite:///mlflow.db"
    assert cfg.experiment == "alpha_rl"
    assert cfg.batch_size == 1000
    assert TrackingConfig.from_cfg(_shipped()) == cfg  # a plain mapping works too


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("uri", ""),
        ("uri", "/tmp/mlruns"),
        ("uri", "file:///tmp/mlruns"),
        ("uri", 5),
        ("experiment", ""),
        ("experiment", "x" * 501),
        ("batch_size", 0),
        ("batch_size", 1001),
        ("batch_size", 10.5),
        ("batch_size", True),
        ("flush_every_s", 0),
        ("flush_every_s", "30"),
        ("retry_s", -1),
        ("final_retry_s", float("nan")),
        ("final_retry_s", -0.5),
        ("http_timeout_s", 0),
        ("http_retries", 11),
        ("http_retries", -1),
    ],
)
def test_a_bad_value_is_refused_naming_its_key(key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=rf"tracking\.{key}\b.*conf/tracking/"):
        TrackingConfig.from_cfg(OmegaConf.create({**_shipped(), key: value}))


def test_missing_and_unknown_keys_are_named() -> None:
    data = _shipped()
    del data["retry_s"]
    with pytest.raises(ConfigError, match=r"missing key\(s\) tracking\.retry_s"):
        TrackingConfig.from_cfg(data)
    with pytest.raises(ConfigError, match=r"unknown key\(s\) tracking\.batch"):
        TrackingConfig.from_cfg({**_shipped(), "batch": 10})


def test_importing_the_package_does_not_import_mlflow() -> None:
    code = "import sys, alpha_rl, alpha_rl.tracking; print('mlflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_only_the_tracking_package_imports_mlflow() -> None:
    src = paths.project_root() / "src" / "alpha_rl"
    tracking = src / "tracking"
    offenders = [
        str(path.relative_to(src))
        for path in src.rglob("*.py")
        if tracking not in path.parents
        and any(
            line.lstrip().startswith(("import mlflow", "from mlflow"))
            for line in path.read_text().splitlines()
        )
    ]
    assert offenders == [], f"mlflow is imported outside alpha_rl.tracking: {offenders}"
