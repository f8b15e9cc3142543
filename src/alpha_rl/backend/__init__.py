"""Compute backends: `numpy` (the NumPy oracles on the CPU) and `cuda` (cubins through PyCUDA)."""

from alpha_rl.backend.base import Backend
from alpha_rl.backend.numpy import NumpyBackend

__all__ = ["Backend", "NumpyBackend"]
