"""Each learner preset computes the same figures under every BLAS kernel this machine can run and
with NumPy's SIMD code turned off (tests/blas_settings.py): a short run of each (debug=tiny, its
network 64 wide) in one sweep per setting, each job's l_q history, logged figures and last
checkpoint compared bit for bit with the native setting's. The default run is held to the same
by tests/test_readme.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from alpha_rl import paths
from alpha_rl.docsite.readme import fingerprint
from tests.blas_settings import NATIVE, SETTINGS, environment

PRESETS = sorted(p.stem for p in (paths.conf_dir() / "agent").glob("*.yaml"))


def sweep(workdir: Path, env: dict[str, str]) -> dict[str, dict]:
    """The fingerprint of each preset's short run, swept in `workdir` under `env`."""
    out = workdir / "sweep"
    store = f"tracking.uri=sqlite:///{workdir / 'mlflow.db'}"
    command = [sys.executable, "-m", "alpha_rl.train", "-m", f"agent={','.join(PRESETS)}",
               "backend=numpy", "debug=tiny", "steps=120", "agent.hidden=[64,64]",
               f"hydra.sweep.dir={out}", store]  # fmt: skip
    workdir.mkdir(parents=True)
    done = subprocess.run(command, cwd=workdir, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=1800)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {preset: fingerprint(out / str(job)) for job, preset in enumerate(PRESETS)}


@pytest.mark.slow
def test_each_learner_preset_computes_the_same_under_every_kernel(tmp_path: Path) -> None:
    assert {"dqn", "dqn_c51", "dqn_noisy", "rainbow"} <= set(PRESETS)
    want = sweep(tmp_path / NATIVE, environment(NATIVE)[0])
    tried = []
    for setting in SETTINGS[1:]:
        env, what = environment(setting)
        if env is None:
            continue
        got = sweep(tmp_path / setting.replace(" ", "_"), env)
        differ = [preset for preset in PRESETS if got[preset] != want[preset]]
        assert not differ, f"under {what}, {', '.join(differ)} computed other figures"
        tried.append(setting)
    assert tried or sys.platform != "linux", "no other setting to compare with"
