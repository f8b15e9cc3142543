"""A session: the validated ISV layout, the chosen backend, its kernel runtime and the device ISV.

Everything that can be refused (ISV clashes, impossible variant combinations, a missing GPU
with backend=cuda, stale cubins) is checked in `open_session`, before any work is done; the
backend and its CUDA context are released when the session closes, whatever happened inside.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from alpha_rl import paths
from alpha_rl.backend.base import Backend
from alpha_rl.backend.select import open_backend
from alpha_rl.build.manifest import stale_cubins
from alpha_rl.errors import ConfigError
from alpha_rl.isv import DeviceIsv
from alpha_rl.kernels.registry import build_axes
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.parts import layout_from_config


@dataclass
class Session:
    """What one job runs on."""

    cfg: DictConfig
    backend: Backend
    backend_reason: str
    runtime: KernelRuntime
    isv: DeviceIsv


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
def open_session(cfg: DictConfig, choices: Mapping[str, str] | None = None) -> Iterator[Session]:
    """Validate `cfg`, open its backend and its kernel runtime, and upload the ISV (the parts
    bind the kernels they launch)."""
    layout = layout_from_config(cfg, choices)
    defines = build_defines(cfg)
    cubins = cubin_dir(cfg)
    backend, reason = open_backend(
        cfg.backend.name,
        cubin_problems=lambda arch: stale_cubins(cubins, defines, arch),
        device=cfg.backend.device,
    )
    try:
        runtime = KernelRuntime(backend, defines, cubin_dir=cubins)
        isv = DeviceIsv(layout, backend)
        yield Session(cfg, backend, reason, runtime, isv)
    finally:
        backend.close()
