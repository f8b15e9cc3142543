"""Helpers shared by the tests."""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from alpha_rl import paths


def compose_train(overrides: list[str] | None = None) -> tuple[DictConfig, dict[str, str]]:
    """The real conf/train.yaml composed with `overrides`; returns (cfg, Hydra runtime choices)."""
    with initialize_config_dir(config_dir=str(paths.conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=list(overrides or []), return_hydra_config=True)
    return cfg, dict(cfg.hydra.runtime.choices)


def compose_fixed(overrides: list[str] | None = None) -> tuple[DictConfig, dict[str, str]]:
    """compose_train with a fixed reward.scale, for ISV layouts built without a market
    (reward.scale=auto is resolved from the market's training ticks by the run)."""
    return compose_train(["reward.scale=1.0", *(overrides or [])])


@functools.cache
def empty_store() -> Path:
    """An SQLite file with MLflow's schema and nothing else, made once per test process (making
    one runs MLflow's schema migrations: seconds, which a copy of it skips)."""
    from mlflow.tracking import MlflowClient

    where = Path(tempfile.mkdtemp(prefix="alpha_rl_empty_store_"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    MlflowClient(tracking_uri=f"sqlite:///{where}/mlflow.db")
    return where / "mlflow.db"


def seeded_store(path: Path) -> str:
    """The URI of an SQLite store at `path`: a copy of empty_store() unless a store is there
    already. For tests whose subject is not how a store is made."""
    if not path.exists():
        shutil.copyfile(empty_store(), path)
    return f"sqlite:///{path}"


def by_name(decl, *values) -> dict:
    """`values` in the order `decl` declares its arguments, keyed by the declared names: the
    keyword arguments of a bound kernel, for tests that build the list from the declaration."""
    names = [a.name for a in decl.args]
    if len(values) != len(names):
        raise TypeError(f"{decl.name} takes {len(names)} arguments ({names}), got {len(values)}")
    return dict(zip(names, values, strict=True))


def device_and_oracle(backend, decl, oracle, host: dict, scalars: list) -> tuple[dict, dict]:
    """`decl` launched on `backend` and its `oracle` on copies of the same arrays (`host`, by
    argument name; None for a NULL pointer) and `scalars`: (what the device wrote, what the
    oracle wrote), each array by name."""
    from alpha_rl.kernels.runtime import KernelRuntime

    want = {k: None if v is None else v.copy() for k, v in host.items()}
    oracle(*(want[a.name] for a in decl.args if a.is_pointer), *scalars)
    dev = {k: None if v is None else backend.upload(v) for k, v in host.items()}
    pointers = [dev[a.name] for a in decl.args if a.is_pointer]
    KernelRuntime(backend, {}).bind(decl)(**by_name(decl, *pointers, *scalars))
    return {k: None if v is None else backend.download(v) for k, v in dev.items()}, want


def write_quotes(path: Path, bid: np.ndarray) -> Path:
    """An L1 quotes CSV at `path`: one row a minute from 2024-01-01, the ask a cent above `bid`,
    sizes 5 and 6 lots."""
    frame = pd.DataFrame({"timestamp": pd.date_range("2024-01-01", periods=len(bid), freq="min"),
                          "bid_px_0": bid, "ask_px_0": bid + 0.01,
                          "bid_sz_0": 5.0, "ask_sz_0": 6.0})  # fmt: skip
    frame.to_csv(path, index=False)
    return path


def wait_for_step(run_dir: Path, step: int, proc: subprocess.Popen) -> None:
    """Until the run's diag.jsonl reaches env step `step`; AssertionError when `proc` ends first."""
    diag = run_dir / "diag.jsonl"
    while proc.poll() is None:
        lines = diag.read_text().split("\n") if diag.is_file() else []
        if any(line and json.loads(line)["step"] >= step for line in lines):
            return
        time.sleep(0.1)
    raise AssertionError(f"the run ended before step {step}: {proc.communicate()[0][-2000:]}")


def start_train(where: Path, *overrides: str, multirun: bool = False,
                sigint: signal.Handlers = signal.SIG_DFL) -> subprocess.Popen:  # fmt: skip
    """`python -m alpha_rl.train [-m] backend=numpy debug=tiny <overrides>` started in `where`,
    its store `where`/mlflow.db, stdout and stderr together as text. SIGINT's disposition in it
    is `sigint` whatever this process's is (SIG_IGN: as a shell's background job starts it)."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    command = [sys.executable, "-m", "alpha_rl.train", *(["-m"] if multirun else []),
               "backend=numpy", "debug=tiny", f"tracking.uri=sqlite:///{where}/mlflow.db",
               *overrides]  # fmt: skip
    return subprocess.Popen(command, cwd=where, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))  # fmt: skip


def train_in_process(where: Path, *args: str) -> tuple[int, str]:
    """`alpha-rl-train <args>` run in this process, in the directory `where`: (its exit status,
    what it printed). For commands refused at start, where a process of their own would cost
    seconds of imports each; Hydra's and the run's process-wide state is put back after."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from alpha_rl.pipeline.life import owner
    from alpha_rl.train import main

    argv, cwd, root = sys.argv, os.getcwd(), logging.getLogger()
    handlers, level = root.handlers[:], root.level
    out, code = io.StringIO(), 0
    sys.argv = ["alpha-rl-train", *args]
    try:
        os.chdir(where)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            main()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    finally:
        sys.argv = argv
        os.chdir(cwd)
        owner.release_all()
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = None
        root.handlers[:] = handlers
        root.setLevel(level)
    return code, out.getvalue()


def write_fx_like(path: Path, hours: int = 6000, seed: int = 0) -> Path:
    """An hourly EURUSD-like quotes CSV in a broker export's shape: day-first local stamps
    (`03.01.2017 00:00:00.000`), the market shut from Friday 22:00 to Sunday 22:00, mids near 1.10
    moving ~8 pips an hour, a one-pip spread (0.0001) on a 0.00001 grid, Bid / Ask / volumes."""
    rng = np.random.default_rng(seed)
    stamps = pd.date_range("2017-01-02 00:00", periods=int(hours * 1.4), freq="h")
    weekday, hour = stamps.day_of_week, stamps.hour
    open_ = ~((weekday == 5) | ((weekday == 4) & (hour >= 22)) | ((weekday == 6) & (hour < 22)))
    stamps = stamps[open_][:hours]
    mid = 1.10 + np.cumsum(rng.normal(0.0, 0.0008, stamps.size))
    bid = np.round(mid - 0.00005, 5)
    frame = pd.DataFrame({"Local time": stamps.strftime("%d.%m.%Y %H:%M:%S.000"),
                          "Bid": bid, "Ask": np.round(bid + 0.0001, 5),
                          "BidVolume": 5.0, "AskVolume": 5.0})  # fmt: skip
    frame.to_csv(path, index=False)
    return path


# the FX-like file's market and money: 100,000 units a lot (1 USD a pip), 0.5 USD a fill
FX_LIKE = [
    "market=file", "market.tick_size=0.00001", "market.timestamp_format=%d.%m.%Y %H:%M:%S.%f",
    "market.columns={Bid: bid_px_0, Ask: ask_px_0, BidVolume: bid_sz_0, AskVolume: ask_sz_0, "
    "Local time: timestamp}", "market.session_gap=3h", "env.multiplier=100000",
    "env.fee_per_lot=0.5",
]  # fmt: skip


def paste(command: str, where: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """`command` as a user pastes it into a fresh shell in `where`: bash with nothing activated,
    the system's PATH and HOME only; stdout and stderr together."""
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/")}
    return subprocess.run(["/bin/bash", "-c", command], cwd=where, env=env, timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip


def as_project_venv(monkeypatch) -> Path:
    """This process as if it ran from the project's .venv, in the project directory (how
    alpha_rl.commands then writes a command: as its make target); the venv's bin/."""
    venv = paths.project_root() / ".venv"
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.chdir(paths.project_root())
    return venv / "bin"
