"""A session: the validated ISV layout, the chosen backend, its kernel runtime and the device ISV.

Everything that can be refused (ISV clashes, impossible variant combinations, a missing GPU
with backend=cuda, stale cubins) is checked in `open_session`, before any work is done; the
backend and its CUDA context are released when the session closes, whatever happened inside.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from alpha_rl import paths
from alpha_rl.backend.base import RunBackend
from alpha_rl.backend.pool import AgentBackend, AgentPool
from alpha_rl.backend.select import open_backend
from alpha_rl.build.manifest import stale_cubins
from alpha_rl.errors import ConfigError
from alpha_rl.isv import DeviceIsv, IsvLayout
from alpha_rl.kernels.registry import build_axes
from alpha_rl.kernels.runtime import KernelRuntime

Job = tuple[DictConfig, IsvLayout]  # a config, and its validated ISV layout (the parts' values)


@dataclass
class Session:
    """What one job runs on: its config, its view of the backend (whose reads wait for the
    run's own `stream`: backend/base.py, RunBackend), its kernel runtime and device ISV."""

    cfg: DictConfig
    backend: RunBackend
    backend_reason: str
    runtime: KernelRuntime
    isv: DeviceIsv
    group: Hashable = None  # the agents it steps with (open_sessions' `groups`); None: alone

    @property
    def stream(self) -> Any:
        """Where the run queues its device work (None: the default stream; numpy)."""
        return self.backend.stream


def build_defines(cfg: DictConfig) -> dict[str, int]:
    """The compile-time defines the configured variant needs its cubins built with: the value of
    every build axis (alpha_rl.kernels) from its config key, refused when it is not one built."""
    defines = {}
    for axis in build_axes():
        value = OmegaConf.select(cfg, axis.config)
        if isinstance(value, bool) or not isinstance(value, int) or value not in axis.values:
            raise ConfigError(
                f"{axis.config}={value!r}: the kernels are built for {axis.define} in "
                f"{', '.join(map(str, axis.values))}; choose one of those"
            )
        defines[axis.define] = value
    return defines


def cubin_dir(cfg: DictConfig) -> Path:
    """The configured cubin directory (relative paths are taken from the project root)."""
    configured = cfg.backend.get("cubin_dir")
    if not configured:
        return paths.default_cubin_dir()
    path = Path(configured)
    return path if path.is_absolute() else paths.project_root() / path


@contextmanager
def open_session(cfg: DictConfig, layout: IsvLayout) -> Iterator[Session]:
    """Validate `cfg`, open its backend and its kernel runtime, and upload the ISV of `layout`
    (pipeline.parts.layout_from_plan: the values its parts fill from the run's plan); the parts
    bind the kernels they launch."""
    with open_sessions([(cfg, layout)]) as (session,):
        yield session


@contextmanager
def open_sessions(jobs: Sequence[Job],
                  groups: Sequence[Hashable] | None = None) -> Iterator[list[Session]]:  # fmt: skip
    """One session per (cfg, layout) of `jobs`, all on one backend (one CUDA context): each
    with its own ISV and kernel runtime, so the runs share nothing on the device but the
    context, and each can run on its own stream beside the others. Every job is validated
    before the backend opens; the jobs must name the same `backend.name` and `backend.device`.

    `groups`, one key per job: the jobs of a key are agents that step together (their shapes
    agree): their arrays come from one AgentPool (agent a's each a fixed stride from agent
    0's: backend/pool.py) and they share one stream, so one launch can serve them all
    (kernels/tape.py). Without it every job is alone."""
    if not jobs:
        raise ValueError("open_sessions needs at least one job")
    if groups is not None and len(groups) != len(jobs):
        raise ValueError(f"open_sessions: {len(groups)} groups for {len(jobs)} jobs")
    first = jobs[0][0]
    for i, (cfg, _) in enumerate(jobs[1:], 1):
        for key in ("name", "device"):
            if cfg.backend.get(key) != first.backend.get(key):
                raise ConfigError(
                    f"backend.{key}: job {i} has {cfg.backend.get(key)!r} and job 0 "
                    f"{first.backend.get(key)!r}; jobs that share a process share one backend "
                    "(run them in separate processes, or give them the same backend)"
                )
    defines = [build_defines(cfg) for cfg, _ in jobs]
    cubins = [cubin_dir(cfg) for cfg, _ in jobs]

    def problems(arch: str) -> list[str]:
        found = (p for d, c in zip(defines, cubins, strict=True) for p in stale_cubins(c, d, arch))
        return list(dict.fromkeys(found))  # each once, however many jobs share a variant

    backend, reason = open_backend(
        first.backend.name, cubin_problems=problems, device=first.backend.device
    )
    try:
        sessions = []
        pools: dict[Hashable, tuple[AgentPool, object, list[int]]] = {}
        if groups is not None:
            for key in dict.fromkeys(groups):
                members = [i for i, g in enumerate(groups) if g == key]
                pools[key] = (AgentPool(backend, len(members)), backend.new_stream(), members)
        for i, ((cfg, layout), d, c) in enumerate(zip(jobs, defines, cubins, strict=True)):
            key = None if groups is None else groups[i]
            if key is None:
                own = RunBackend(backend, backend.new_stream())
            else:
                pool, stream, members = pools[key]
                own = AgentBackend(backend, stream, pool, members.index(i))
            runtime = KernelRuntime(own, d, cubin_dir=c)
            sessions.append(Session(cfg, own, reason, runtime, DeviceIsv(layout, own), key))
        yield sessions
    finally:
        backend.close()
