"""Binding declared kernels to a backend.

`KernelRuntime(backend, defines).bind(decl)` gives a callable with the kernel's argument list:
on the cuda backend it loads the stem's fresh cubin for the configured variant (once), checks the
build-info constants compiled into it, and makes a PyCUDA prepared call; on the numpy backend it
calls the oracle `alpha_rl.reference.<stem>.<name>` with the same arguments plus the variant's
defines as keyword arguments. Both check the arguments against the declaration first.
"""

from __future__ import annotations

import importlib
import numbers
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from alpha_rl import paths
from alpha_rl.backend.base import Backend
from alpha_rl.build.contract import ABI_VERSION
from alpha_rl.errors import CubinError, KernelCallError
from alpha_rl.kernels.decl import Arg, KernelDecl, Stem
from alpha_rl.kernels.registry import stems


def coerce_scalar(decl: KernelDecl, arg: Arg, value: Any) -> np.generic:
    """`value` as a numpy scalar of the declared dtype; out-of-range or wrong kinds are errors."""
    kind = arg.dtype.kind
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Number):
        raise KernelCallError(
            f"{decl.name}: {arg.name} must be a {arg.dtype} number, got {value!r}"
        )
    if kind in "iu":
        if not isinstance(value, numbers.Integral):
            raise KernelCallError(f"{decl.name}: {arg.name} must be an integer, got {value!r}")
        info = np.iinfo(arg.dtype)
        if not info.min <= int(value) <= info.max:
            raise KernelCallError(
                f"{decl.name}: {arg.name}={value} does not fit {arg.dtype} [{info.min}, {info.max}]"
            )
        return arg.dtype.type(int(value))
    return arg.dtype.type(value)


def check_args(decl: KernelDecl, backend: Backend, args: tuple[Any, ...]) -> list[Any]:
    """Arguments checked against the declaration; scalars converted to their numpy dtypes."""
    if len(args) != len(decl.args):
        names = ", ".join(a.name for a in decl.args)
        raise KernelCallError(
            f"{decl.name}({names}) takes {len(decl.args)} arguments, got {len(args)}"
        )
    checked = []
    for arg, value in zip(decl.args, args, strict=True):
        if not arg.is_pointer:
            checked.append(coerce_scalar(decl, arg, value))
        elif value is None:
            if not arg.nullable:
                raise KernelCallError(f"{decl.name}: {arg.name} may not be None (NULL)")
            checked.append(None)
        elif not backend.is_array(value):
            raise KernelCallError(
                f"{decl.name}: {arg.name} must be a {backend.name} device array, "
                f"got {type(value).__name__}"
            )
        elif value.dtype != arg.dtype:
            raise KernelCallError(f"{decl.name}: {arg.name} must be {arg.dtype}, got {value.dtype}")
        else:
            checked.append(value)
    return checked


class BoundKernel:
    """A declared kernel ready to launch on one backend: `kernel(*args, stream=None)`."""

    def __init__(self, decl: KernelDecl, backend: Backend, launch: Callable[..., None]):
        self.decl = decl
        self._backend = backend
        self._launch = launch

    def __call__(self, *args: Any, stream: Any = None) -> None:
        checked = check_args(self.decl, self._backend, args)
        scalars = {
            a.name: v for a, v in zip(self.decl.args, checked, strict=True) if not a.is_pointer
        }
        grid = self.decl.launch.grid(scalars)
        if grid[0] == 0:
            return
        self._launch(grid, checked, stream)

    def __repr__(self) -> str:
        return f"<{self.decl.name} on {self._backend.name}>"


class KernelRuntime:
    """Binds kernel declarations to `backend` for one set of build defines (e.g. RC_STRIDE=7)."""

    def __init__(
        self, backend: Backend, defines: Mapping[str, int], *, cubin_dir: Path | None = None
    ) -> None:
        self.backend = backend
        self.defines = dict(defines)
        self._cubin_dir = cubin_dir or paths.default_cubin_dir()
        self._modules: dict[str, Any] = {}

    def bind(self, decl: KernelDecl) -> BoundKernel:
        """The launcher for `decl` on this runtime's backend."""
        stem = stems().get(decl.stem)
        if stem is None or stem.kernels.get(decl.name) is not decl:
            raise KernelCallError(f"{decl.name} is not a registered kernel of stem {decl.stem!r}")
        if self.backend.name == "numpy":
            return BoundKernel(decl, self.backend, self._oracle_launch(stem, decl))
        return BoundKernel(decl, self.backend, self._cuda_launch(stem, decl))

    def _oracle_launch(self, stem: Stem, decl: KernelDecl) -> Callable[..., None]:
        oracle = getattr(
            importlib.import_module(f"alpha_rl.reference.{stem.name}"), decl.name, None
        )
        if oracle is None:
            raise KernelCallError(f"alpha_rl.reference.{stem.name} has no oracle {decl.name}")
        kwargs = {
            axis.kwarg(): v
            for axis, v in zip(stem.axes, stem.select(self.defines).values(), strict=True)
        }

        def launch(_grid: tuple, args: list, _stream: Any) -> None:
            oracle(*args, **kwargs)

        return launch

    def _cuda_launch(self, stem: Stem, decl: KernelDecl) -> Callable[..., None]:
        function = self._module(stem).get_function(decl.name)
        function.prepare(decl.prepared_format())
        block = (decl.launch.block, 1, 1)
        pointers = [a.is_pointer for a in decl.args]

        def launch(grid: tuple, args: list, stream: Any) -> None:
            raw = [
                (0 if v is None else int(v.gpudata)) if is_ptr else v
                for v, is_ptr in zip(args, pointers, strict=True)
            ]
            function.prepared_async_call(grid, block, stream, *raw)

        return launch

    def _module(self, stem: Stem) -> Any:
        """The stem's cubin for the configured variant, loaded once and its build info checked."""
        if stem.name in self._modules:
            return self._modules[stem.name]
        from alpha_rl.build.manifest import require_fresh

        chosen = stem.select(self.defines)
        path = require_fresh(self._cubin_dir, paths.cuda_dir(), stem, chosen, self.backend.arch)
        module = self.backend.load_module(path)
        abi = self.backend.module_constant_i32(module, "alpha_rl_abi")
        stride = self.backend.module_constant_i32(module, "alpha_rl_rc_stride")
        if abi != ABI_VERSION:
            raise CubinError(
                f"{path}: built for ABI {abi}, expected {ABI_VERSION}; run `make cubins`"
            )
        if stride != chosen.get("RC_STRIDE", 0):
            raise CubinError(
                f"{path}: compiled with RC_STRIDE={stride} but the config needs "
                f"RC_STRIDE={chosen.get('RC_STRIDE', 0)}; run `make cubins`"
            )
        self._modules[stem.name] = module
        return module
