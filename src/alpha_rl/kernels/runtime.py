"""Binding declared kernels to a backend.

`KernelRuntime(backend, defines).bind(decl)` gives a callable taking the kernel's arguments by
their declared names (`kernel(n=..., h=..., stream=s)`; a missing, unknown or positional one is
refused):
on the cuda backend it loads the stem's fresh cubin for the configured variant (once), checks the
build-info constants compiled into it, and makes a PyCUDA prepared call; on the numpy backend it
calls the oracle `alpha_rl.reference.<stem>.<name>` with the same arguments plus the variant's
defines as keyword arguments. Both check the arguments against the declaration first, with
converters prepared at bind time so the check stays cheap next to the launch itself.
"""

from __future__ import annotations

import importlib
import numbers
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Executor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from alpha_rl import paths
from alpha_rl.abi import CONSTANTS
from alpha_rl.backend.base import Backend
from alpha_rl.build.contract import ABI_VERSION, AXIS_PREFIX
from alpha_rl.errors import CubinError, KernelCallError
from alpha_rl.kernels.decl import NO_AXIS, Arg, KernelDecl, Stem
from alpha_rl.kernels.registry import stems

Converter = Callable[[Any], Any]
# every exported constant by name (each carries its stem's prefix), for the declared shapes
_NAMED_CONSTANTS = {name: v for table in CONSTANTS.values() for name, v in table.items()}


def _scalar_converter(decl: KernelDecl, arg: Arg) -> Converter:
    """Checks a scalar and returns it as the declared numpy type (fast paths for exact types)."""
    typ, integral = arg.dtype.type, arg.dtype.kind in "iu"
    lo, hi = (int(np.iinfo(arg.dtype).min), int(np.iinfo(arg.dtype).max)) if integral else (0, 0)

    def convert(value: Any) -> Any:
        kind = type(value)
        if kind is typ:
            return value
        if kind is int and integral:
            if not lo <= value <= hi:
                raise KernelCallError(
                    f"{decl.name}: {arg.name}={value} does not fit {arg.dtype} [{lo}, {hi}]"
                )
            return typ(value)
        if kind is bool or kind is np.bool_ or not isinstance(value, numbers.Number):
            raise KernelCallError(
                f"{decl.name}: {arg.name} must be a {arg.dtype} number, got {value!r}"
            )
        if not integral:
            return typ(value)
        if not isinstance(value, numbers.Integral):
            raise KernelCallError(f"{decl.name}: {arg.name} must be an integer, got {value!r}")
        if not lo <= int(value) <= hi:
            raise KernelCallError(
                f"{decl.name}: {arg.name}={value} does not fit {arg.dtype} [{lo}, {hi}]"
            )
        return typ(int(value))

    return convert


def _pointer_converter(
    decl: KernelDecl, arg: Arg, backend: Backend, raw: Callable[[Any], Any]
) -> Converter:
    """Checks a device array (or None where nullable) and returns what the launch passes."""
    null = raw(None)

    def convert(value: Any) -> Any:
        if value is None:
            if not arg.nullable:
                raise KernelCallError(f"{decl.name}: {arg.name} may not be None (NULL)")
            return null
        if not backend.is_array(value):
            raise KernelCallError(
                f"{decl.name}: {arg.name} must be a {backend.name} device array, "
                f"got {type(value).__name__}"
            )
        if value.dtype != arg.dtype:
            raise KernelCallError(f"{decl.name}: {arg.name} must be {arg.dtype}, got {value.dtype}")
        return raw(value)

    return convert


def arguments(decl: KernelDecl, **sources: Mapping[str, Any]) -> dict[str, Any]:
    """The array arguments of `decl` by name, each from the one source (a part's arrays by
    name: `env=`, `replay=`, `her=`) that offers it; a source offers an array it does not have
    as None (NULL, where the argument is nullable). An argument two sources offer is refused
    (one part's array would shadow the other's), as is one no source offers (a misspelt name
    would pass NULL): KernelCallError names the kernel, the argument and the sources."""
    out = {}
    for arg in decl.args:
        if not arg.is_pointer:
            continue
        having = [part for part, arrays in sources.items() if arg.name in arrays]
        if len(having) != 1:
            said = (f"is offered by {' and '.join(having)}: one would shadow the other; offer it "
                    "from one part only" if having else
                    f"is offered by none of {', '.join(sources)}: a misspelt or missing name; "
                    "offer it (None for an absent nullable array)")  # fmt: skip
            raise KernelCallError(f"{decl.name}: the argument {arg.name!r} {said}")
        out[arg.name] = sources[having[0]][arg.name]
    return out


class BoundKernel:
    """A declared kernel ready to launch on one backend: `kernel(*args, stream=None)`.

    Every argument is checked against the declaration (array kind and dtype, NULL only where
    declared nullable, scalars range-checked into their numpy dtype) by converters prepared once
    here, then handed to `launch(grid, values, stream, axis)`: device pointers as `raw(array)`
    gives them (the array itself for the oracles, its address for PyCUDA), `axis` the agent
    axis's strides (NO_AXIS: one agent). While the backend records a step (`backend.tape`), the
    checked call is appended to the tape instead (kernels/tape.py launches it).
    """

    def __init__(
        self,
        decl: KernelDecl,
        backend: Backend,
        launch: Callable[[tuple[int, int, int], list[Any], Any, tuple[int, ...]], None],
        raw: Callable[[Any], Any] = lambda array: array,
        dims: Mapping[str, int] | None = None,
    ) -> None:
        self.decl = decl
        self._backend = backend
        self._launch = launch
        self._convert = [
            _pointer_converter(decl, a, backend, raw)
            if a.is_pointer
            else _scalar_converter(decl, a)
            for a in decl.args
        ]
        names = [a.name for a in decl.args]
        self._names, self._name_set = names, set(names)
        over = decl.launch.over
        self._over = names.index(over) if over is not None else None
        self._per_block = decl.launch.items_per_block
        self._blocks = decl.launch.blocks
        self.launches = 0  # calls that launched (or ran the oracle), for tests and audits
        self.audit: Any = None  # a KernelAudit while the runtime audits this kernel
        self._scalar_names = [(i, a.name) for i, a in enumerate(decl.args) if not a.is_pointer]
        self._dims: dict[str, int] = dict(dims or {})  # named sizes besides the scalars
        self._shapes = [(i, a, compile(a.shape, f"<{decl.name}.{a.name} shape>", "eval"))
                        for i, a in enumerate(decl.args) if a.is_pointer and a.shape]  # fmt: skip

    def _check_lengths(self, args: tuple, values: list) -> None:
        """Every array at least as long as its declared shape, evaluated on this call's scalars
        and the named sizes of the stem (its build defines and exported constants);
        KernelCallError names the kernel, argument and shape."""
        dims = self._dims | {name: int(values[i]) for i, name in self._scalar_names
                                if self.decl.args[i].dtype.kind in "iu"}  # fmt: skip
        for i, arg, code in self._shapes:
            array = args[i]
            if array is None:
                continue
            need = int(eval(code, {"__builtins__": {}}, dims))
            if array.size < need:
                used = ", ".join(f"{k}={dims[k]}" for k in code.co_names)
                raise KernelCallError(
                    f"{self.decl.name}: {arg.name} has {array.size} elements, fewer than its "
                    f"shape {arg.shape} = {need} ({used})"
                )

    def __call__(self, *positional: Any, stream: Any = None, **named: Any) -> None:
        """Launch with every argument by its declared name: `kernel(n=..., h=..., stream=s)`."""
        if positional:
            raise KernelCallError(
                f"{self.decl.name}: pass the arguments by name ({', '.join(self._names)}), "
                f"got {len(positional)} positional"
            )
        if len(named) != len(self._names) or named.keys() != self._name_set:
            missing = [n for n in self._names if n not in named]
            unknown = sorted(set(named) - self._name_set)
            raise KernelCallError(
                f"{self.decl.name}: "
                + "; ".join(([f"missing {', '.join(missing)}"] if missing else [])
                            + ([f"unknown {', '.join(unknown)}"] if unknown else []))
                + f" (its arguments: {', '.join(self._names)})"
            )  # fmt: skip
        args = tuple(named[n] for n in self._names)
        values = [convert(v) for convert, v in zip(self._convert, args, strict=True)]
        if self._shapes:
            self._check_lengths(args, values)
        if self._blocks is not None:
            blocks = int(self._blocks({name: values[i] for i, name in self._scalar_names}))
            if blocks <= 0:
                return
            grid = (blocks, 1, 1)
        elif self._over is None:
            grid = (1, 1, 1)
        else:
            blocks = -(-int(values[self._over]) // self._per_block)
            if blocks <= 0:
                return
            grid = (blocks, 1, 1)
        self.launches += 1
        if self._backend.tape is not None:
            from alpha_rl.kernels.tape import Call

            self._backend.tape.append(Call(self, grid, values, args, self.audit))
        elif self.audit is not None:
            self.audit.run(self, args, values, lambda: self._launch(grid, values, stream, NO_AXIS))
        else:
            self._launch(grid, values, stream, NO_AXIS)

    @property
    def backend(self) -> Backend:
        """The backend it launches on (an agent's, in a pool)."""
        return self._backend

    @property
    def oracles(self) -> bool:
        """Whether a launch calls the NumPy oracle (the numpy backend) rather than a kernel."""
        return self._backend.name == "numpy"

    def launch_values(self, grid: tuple[int, int, int], values: list, stream: Any,
                      axis: tuple[int, ...] = NO_AXIS) -> None:  # fmt: skip
        """Launch with arguments already checked (a recorded call): `axis`, the agent axis's
        strides, one per pointer argument, padded to AGENT_SLOTS."""
        self._launch(grid, values, stream, axis)

    def __repr__(self) -> str:
        return f"<{self.decl.name} on {self._backend.name}>"


def _reference(decl: KernelDecl) -> Any:
    """The module of `decl`'s oracle: alpha_rl.reference.<its stem>."""
    return importlib.import_module(f"alpha_rl.reference.{stems()[decl.stem].name}")


def _by_name(decl: KernelDecl, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Callable:
    """`fn(*values)` for launch values in `decl`'s order, passed to it by the declared names
    (a function whose parameters are not those names fails loudly), with `kwargs` beside."""
    names = [a.name for a in decl.args]
    return lambda *values: fn(**dict(zip(names, values, strict=True)), **kwargs)


def _device_address(array: Any) -> int:
    """What a PyCUDA prepared call takes for a pointer parameter: the address, 0 for NULL."""
    return 0 if array is None else int(array.gpudata)


class KernelRuntime:
    """Binds kernel declarations to `backend` for one set of build defines (e.g. RC_STRIDE=7)."""

    def __init__(
        self, backend: Backend, defines: Mapping[str, int], *, cubin_dir: Path | None = None
    ) -> None:
        self.backend = backend
        self.defines = dict(defines)
        self._cubin_dir = cubin_dir or paths.default_cubin_dir()
        self._modules: dict[str, Any] = {}
        self.bound: list[BoundKernel] = []  # every kernel bound through this runtime
        self.cubins: dict[str, Path] = {}  # stem -> the cubin loaded for it (cuda backend)

    def bind(self, decl: KernelDecl) -> BoundKernel:
        """The launcher for `decl` on this runtime's backend."""
        stem = stems().get(decl.stem)
        if stem is None or stem.kernels.get(decl.name) is not decl:
            raise KernelCallError(f"{decl.name} is not a registered kernel of stem {decl.stem!r}")
        dims = _NAMED_CONSTANTS | stem.select(self.defines)
        if self.backend.name == "numpy":
            kernel = BoundKernel(decl, self.backend, self._oracle_launch(stem, decl), dims=dims)
        else:
            kernel = BoundKernel(decl, self.backend, self._cuda_launch(stem, decl), _device_address,
                                 dims)  # fmt: skip
        self.bound.append(kernel)
        return kernel

    def launch_counts(self) -> dict[str, int]:
        """Kernel name -> launches so far, over every kernel bound through this runtime."""
        counts: dict[str, int] = {}
        for kernel in self.bound:
            counts[kernel.decl.name] = counts.get(kernel.decl.name, 0) + kernel.launches
        return counts

    def oracle(self, decl: KernelDecl) -> Callable[..., None]:
        """The NumPy oracle of `decl` with this runtime's defines: `oracle(*values)`, the values in
        declaration order, passed to it by name (so an oracle whose parameters are not the
        declared names fails loudly)."""
        stem = stems()[decl.stem]
        fn = getattr(_reference(decl), decl.name, None)
        if fn is None:
            raise KernelCallError(f"alpha_rl.reference.{stem.name} has no oracle {decl.name}")
        kwargs = {
            axis.kwarg(): v
            for axis, v in zip(stem.axes, stem.select(self.defines).values(), strict=True)
        }
        return _by_name(decl, fn, kwargs)

    def tolerance(self, decl: KernelDecl) -> Callable[..., dict] | None:
        """The audit's bound for `decl`'s outputs, where its oracle's module declares one
        (`TOLERANCES[name]`: the values in declaration order -> {array: bound per element});
        None: compared element for element."""
        fn = getattr(_reference(decl), "TOLERANCES", {}).get(decl.name)
        return None if fn is None else _by_name(decl, fn, {})

    @contextmanager
    def recording(self) -> Iterator[list]:
        """Within the block, what this runtime's kernels and its run's copies and fills queue is
        recorded, in order, instead of run: yields the tape (kernels/tape.py runs it)."""
        if self.backend.tape is not None:
            raise KernelCallError("a step is already being recorded on this backend")
        tape: list = []
        self.backend.tape = tape
        try:
            yield tape
        finally:
            self.backend.tape = None

    @contextmanager
    def auditing(self, names: Iterable[str], judges: Executor | None = None) -> Iterator[Any]:
        """Within the block, every launch of a kernel named in `names` also runs its oracle on
        host copies of the same inputs; yields the KernelAudit holding the mismatch counts
        (`judges`: a thread pool where the oracles and comparisons run, see KernelAudit)."""
        from alpha_rl.kernels.audit import KernelAudit

        audit = KernelAudit(self, judges)
        chosen = [k for k in self.bound if k.decl.name in set(names)]
        for kernel in chosen:
            kernel.audit = audit
        try:
            yield audit
        finally:
            for kernel in chosen:
                kernel.audit = None

    def _oracle_launch(self, stem: Stem, decl: KernelDecl) -> Callable[..., None]:
        oracle = self.oracle(decl)

        def launch(_grid: tuple, args: list, _stream: Any, axis: tuple[int, ...]) -> None:
            if any(axis):
                raise KernelCallError(
                    f"{decl.name}: the oracles take one agent a call (kernels/tape.py calls "
                    "each agent's in turn)"
                )
            oracle(*args)

        return launch

    def _cuda_launch(self, stem: Stem, decl: KernelDecl) -> Callable[..., None]:
        function = self._module(stem).get_function(decl.name)
        function.prepare(decl.prepared_format())
        block, shared = (decl.launch.block, 1, 1), decl.launch.shared
        if shared > 48 * 1024:  # above the default limit a function must ask for it
            import pycuda.driver as drv

            attribute = drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES
            function.set_attribute(attribute, shared)

        def launch(grid: tuple, args: list, stream: Any, axis: tuple[int, ...]) -> None:
            function.prepared_async_call(grid, block, stream, *args, *axis, shared_size=shared)

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
        if abi != ABI_VERSION:
            raise CubinError(
                f"{path}: built for ABI {abi}, expected {ABI_VERSION}; run `make cubins`"
            )
        for define, value in chosen.items():
            built = self.backend.module_constant_i32(module, f"{AXIS_PREFIX}{define}")
            if built != value:
                raise CubinError(
                    f"{path}: compiled with {define}={built} but the config needs "
                    f"{define}={value}; run `make cubins`"
                )
        self._modules[stem.name] = module
        self.cubins[stem.name] = path
        return module
