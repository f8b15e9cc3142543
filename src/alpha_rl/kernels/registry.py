"""Every declared kernel family, found by importing the launcher modules of this package."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

import alpha_rl.kernels as _pkg
from alpha_rl.kernels.decl import Axis, KernelDecl, Stem

_NOT_STEMS = {"decl", "registry", "runtime", "tape"}


@cache
def stems() -> dict[str, Stem]:
    """Stem name -> Stem, for every `alpha_rl.kernels.<stem>` module that defines `STEM`."""
    found: dict[str, Stem] = {}
    for info in pkgutil.iter_modules(_pkg.__path__):
        if info.name in _NOT_STEMS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{_pkg.__name__}.{info.name}")
        stem = getattr(module, "STEM", None)
        if isinstance(stem, Stem):
            if stem.name != info.name:
                raise TypeError(f"alpha_rl.kernels.{info.name} declares STEM {stem.name!r}")
            found[stem.name] = stem
    return found


def all_kernels() -> list[KernelDecl]:
    """Every declared kernel, ordered by stem and name."""
    return [k for s in sorted(stems()) for _, k in sorted(stems()[s].kernels.items())]


def build_axes() -> list[Axis]:
    """Every build axis of any stem, each once, ordered by define."""
    found = {axis.define: axis for stem in stems().values() for axis in stem.axes}
    return [found[d] for d in sorted(found)]
