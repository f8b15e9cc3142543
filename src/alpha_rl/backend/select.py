"""Choosing the backend: `numpy`, `cuda`, or `auto` (cuda when it can run, else numpy, and why).

Whether the cubins are ready is asked of the caller (`cubin_problems`), so this layer knows
nothing of the kernels or the build above it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from alpha_rl.backend.base import Backend
from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.errors import BackendError, CubinError

log = logging.getLogger(__name__)

CHOICES = ("auto", "cuda", "numpy")


@dataclass(frozen=True)
class GpuProbe:
    """Whether a CUDA device can be used, without creating a context."""

    usable: bool
    reason: str
    arch: str | None = None
    name: str | None = None


def probe_gpu(device: int = 0) -> GpuProbe:
    """Look for pycuda and a CUDA device; never raises."""
    from alpha_rl.backend.cuda import import_pycuda

    try:
        drv = import_pycuda()
    except BackendError as exc:
        return GpuProbe(False, str(exc))
    count = drv.Device.count()
    if count <= device:
        return GpuProbe(False, f"no CUDA device {device} ({count} present)")
    dev = drv.Device(device)
    major, minor = dev.compute_capability()
    return GpuProbe(True, "GPU present", f"{major}{minor}", dev.name())


def open_backend(
    choice: str, *, cubin_problems: Callable[[str], list[str]], device: int = 0
) -> tuple[Backend, str]:
    """Create the backend `choice` asks for and say why it was chosen.

    `cubin_problems(arch)` says why the cubins for the GPU's arch cannot be loaded ([] = ready).
    `auto` falls back to numpy when no GPU, no pycuda or no fresh cubins (the reason is returned
    and logged); an explicit `cuda` raises instead, naming what is missing and what to run.
    """
    if choice not in CHOICES:
        raise BackendError(f"backend={choice!r} is not one of {', '.join(CHOICES)}")
    if choice == "numpy":
        return _chosen(NumpyBackend(), "backend=numpy")
    probe = probe_gpu(device)
    problems = cubin_problems(probe.arch) if probe.usable else []
    if choice == "cuda":
        if not probe.usable:
            raise BackendError(f"backend=cuda: {probe.reason}")
        if problems:
            raise CubinError("backend=cuda: " + "; ".join(problems))
    elif not probe.usable:
        return _chosen(NumpyBackend(), f"auto: {probe.reason}")
    elif problems:
        return _chosen(NumpyBackend(), f"auto: cubins not usable ({problems[0]})")
    from alpha_rl.backend.cuda import CudaBackend

    why = "backend=cuda" if choice == "cuda" else "auto: GPU, pycuda and fresh cubins present"
    return _chosen(CudaBackend(device), f"{why}; {probe.name}, sm_{probe.arch}")


def _chosen(backend: Backend, reason: str) -> tuple[Backend, str]:
    log.info("backend: %s (%s)", backend.name, reason)
    return backend, reason
