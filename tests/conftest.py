"""Shared fixtures: composed configs, cubins built into a temp dir, the CUDA backend for GPU tests.

GPU tests (marker `gpu`) are skipped on machines without a usable GPU, except when they were
asked for (`pytest -m gpu`, or ALPHA_RL_REQUIRE_GPU=1): then a missing GPU, pycuda or cubin is a
failure, so a GPU run can never pass by skipping everything. Tests that need nvcc skip without it
locally but fail under CI (CI=true), where nvcc is part of the machine.

Tests marked `slow` run first, and under `--dist loadgroup` (make test) a worker takes one test at
a time, so the longest work starts early and the short fills the gaps. Only slow tests may start
a sweep, a tracking server or a browser: `make test-fast` leaves them out, so one of those in an
unmarked test fails naming what it started.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from alpha_rl import paths

pytest_plugins = ["pytester"]  # tests/test_tiers.py runs a pytest of its own


def _gpu_required(config: pytest.Config) -> bool:
    markexpr = (config.getoption("markexpr") or "").replace(" ", "")
    return os.environ.get("ALPHA_RL_REQUIRE_GPU") == "1" or markexpr == "gpu"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: slow first
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items or _gpu_required(config):
        return
    from alpha_rl.backend.select import probe_gpu

    probe = probe_gpu()
    if not probe.usable:
        skip = pytest.mark.skip(reason=f"no usable GPU: {probe.reason}")
        for item in gpu_items:
            item.add_marker(skip)


# tests that share a costly session fixture, sent to one xdist worker together
ONE_WORKER = (
    "tests/build/",  # built_cubins: a whole nvcc build
    "tests/test_bad_overrides.py",  # refusals: ~30 refused runs, 20-25 s
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Under --dist loadgroup: xdist's load-scope scheduling (one test at a time, in collection
    order) with each ONE_WORKER path as one unit. xdist's own loadgroup reads xdist_group marks
    by renaming item._nodeid, which pytest 9 no longer reads: its groups would not hold."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return next((path for path in ONE_WORKER if nodeid.startswith(path)), nodeid)

    return Scheduling(config, log)


def words_of(args: str | bytes | os.PathLike | Sequence) -> list[str]:
    """The words of a command line as subprocess.Popen takes it."""
    if isinstance(args, (str, bytes, os.PathLike)):
        return shlex.split(os.fsdecode(args))
    return [os.fsdecode(a) for a in args]


def slow_command(words: list[str]) -> str | None:
    """What the command line `words` starts that only a test marked slow may start (a sweep, a
    tracking server, a search's confirmation, a browser), or None."""
    for i, word in enumerate(words):
        name, rest = os.path.basename(word), words[i + 1 :]
        if name in ("alpha_rl.train", "alpha-rl-train") and {"-m", "--multirun"} & set(rest):
            return "a sweep"
        if name in ("alpha_rl.tracking", "mlflow") and rest[:1] in (["server"], ["ui"]):
            return "a tracking server"
        if name in ("alpha_rl.search.confirm", "alpha-rl-confirm"):
            return "a search's confirmation (a sweep)"
        if name in ("chromium", "chromium-browser", "chrome", "headless_shell"):
            return "a browser"
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Outside tests marked slow (set-up and teardown included), starting what slow_command names
    fails the test."""
    if item.get_closest_marker("slow"):
        return (yield)
    popen = subprocess.Popen
    real = popen._execute_child

    def refused(self, args, *rest, **kwargs):
        words = words_of(args)
        what = slow_command(words)
        if what:
            pytest.fail(f"{item.nodeid} starts {what} (`{shlex.join(words)}`) but is not marked "
                        "slow: mark it @pytest.mark.slow (make test-fast leaves those out)",
                        pytrace=False)  # fmt: skip
        return real(self, args, *rest, **kwargs)

    popen._execute_child = refused
    try:
        return (yield)
    finally:
        popen._execute_child = real


def required_tool(env_var: str, name: str, in_ci: str) -> str:
    """Path of the tool `name` ($env_var, else PATH): a skip locally when absent, a failure under
    CI (CI=true), where `in_ci` says why it must be there."""
    found = os.environ.get(env_var) or shutil.which(name)
    if not found:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not on PATH, but {in_ci}")
        pytest.skip(f"{name} not on PATH")
    return found


@pytest.fixture(scope="session")
def nvcc() -> str:
    """Path of nvcc; a skip locally when absent, a failure under CI."""
    return required_tool("NVCC", "nvcc", "CI machines have it: the cubin tests must run")


@pytest.fixture(scope="session")
def built_cubins(nvcc: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every declared stem's cubins for sm_90, built from cuda/ into a fresh temp directory."""
    from alpha_rl.build.cli import build

    out = tmp_path_factory.mktemp("cubins")
    report = build(paths.cuda_dir(), out, ["90"], jobs=2, log=lambda *_: None)
    assert not report.failed, report.failed
    return out


@pytest.fixture(scope="session")
def cuda_backend(request: pytest.FixtureRequest):
    """The one CUDA backend (context) of the test process, with fresh cubins in build/cubins."""
    from alpha_rl.backend.cuda import CudaBackend
    from alpha_rl.build.cli import build

    backend = CudaBackend()
    report = build(paths.cuda_dir(), paths.default_cubin_dir(), [backend.arch], log=lambda *_: None)
    assert not report.failed, report.failed
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def postgres():
    """A throw-away PostgreSQL cluster for the session (tests/postgres.py); each test takes a
    database of its own (`postgres.new_database(name)`). A skip where PostgreSQL is not installed,
    a failure under CI."""
    from tests.postgres import postgres_cluster, require_postgres

    require_postgres()
    with postgres_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def tracking_server(tmp_path_factory: pytest.TempPathFactory):
    """One MLflow server for the session (it takes ~30 s to start): (url, store path)."""
    from tests.mlflow_server import mlflow_server

    store = tmp_path_factory.mktemp("server") / "mlflow.db"
    with mlflow_server(store) as url:
        yield url, store
