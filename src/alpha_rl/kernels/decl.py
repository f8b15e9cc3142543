"""Kernel declarations: each kernel's argument list, written once.

From a declaration the runtime derives the PyCUDA prepared-call format, the dispatch to the NumPy
oracle (same names, same order), argument checking for both backends, and the parameter layout
(count, sizes, offsets) that the contract check compares with what nvcc compiled into the cubin.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

POINTER_SIZE = 8  # bytes of a device pointer on every supported target (64-bit)
# The agent axis (cuda/common.cuh, AgentAxis): every kernel's last parameter holds, per pointer
# argument in declaration order, the elements between one agent's slice and the next's; a launch
# of A agents has gridDim.y = A. ALPHA_RL_AGENT_SLOTS strides of 8 bytes, whatever the kernel.
AGENT_SLOTS = 32
AGENT_AXIS_SIZE = AGENT_SLOTS * 8
NO_AXIS = (0,) * AGENT_SLOTS  # one agent: every stride 0

# struct/PyCUDA format character per scalar dtype.
_SCALAR_FORMAT = {
    np.dtype(np.int8): "b",
    np.dtype(np.uint8): "B",
    np.dtype(np.int16): "h",
    np.dtype(np.uint16): "H",
    np.dtype(np.int32): "i",
    np.dtype(np.uint32): "I",
    np.dtype(np.int64): "q",
    np.dtype(np.uint64): "Q",
    np.dtype(np.float32): "f",
    np.dtype(np.float64): "d",
}


class Role(enum.IntEnum):
    """What a kernel does with an argument; declarations list them in this order."""

    IN = 0  # pointer, read only
    OUT = 1  # pointer, written (and possibly read)
    SCALAR = 2  # passed by value


@dataclass(frozen=True)
class Arg:
    """One kernel parameter: a device pointer (IN/OUT) or a scalar passed by value."""

    name: str
    dtype: np.dtype
    role: Role
    nullable: bool = False  # pointer may be None (NULL): the kernel must handle it
    # the elements the kernel may touch, in named dims: the kernel's scalars and build defines
    # ("n", "n*RC_STRIDE", "(mask+1)*H"); an array shorter than this is refused at the call
    shape: str | None = None

    @property
    def is_pointer(self) -> bool:
        return self.role is not Role.SCALAR

    @property
    def size(self) -> int:
        """Size in bytes of the parameter as passed (a pointer or the scalar itself)."""
        return POINTER_SIZE if self.is_pointer else self.dtype.itemsize

    @property
    def format_char(self) -> str:
        return "P" if self.is_pointer else _SCALAR_FORMAT[self.dtype]


def In(name: str, dtype: type | np.dtype, shape: str | None = None, *,
       nullable: bool = False) -> Arg:  # fmt: skip
    """A read-only device array argument (`const T* __restrict__`) of `shape` elements."""
    return Arg(name, np.dtype(dtype), Role.IN, nullable, shape)


def Out(name: str, dtype: type | np.dtype, shape: str | None = None, *,
        nullable: bool = False) -> Arg:  # fmt: skip
    """A device array the kernel writes (it may also read it) of `shape` elements."""
    return Arg(name, np.dtype(dtype), Role.OUT, nullable, shape)


def Scalar(name: str, dtype: type | np.dtype) -> Arg:
    """A scalar passed by value; callers may pass Python numbers, which are range-checked."""
    dt = np.dtype(dtype)
    if dt not in _SCALAR_FORMAT:
        raise TypeError(f"unsupported scalar dtype {dt} for argument {name!r}")
    return Arg(name, dt, Role.SCALAR)


@dataclass(frozen=True)
class Launch:
    """Launch geometry: `block` threads a block; `over` names the scalar counting the work items
    (None = one block), of which each block takes `per_block` (default: one per thread);
    `shared`: bytes of dynamic shared memory a block takes (beyond 48 KB: the launcher raises the
    function's limit to it)."""

    block: int
    over: str | None = None
    per_block: int | None = None
    blocks: Callable[[Mapping[str, Any]], int] | None = None  # blocks from the scalars, if set
    shared: int = 0

    @property
    def items_per_block(self) -> int:
        return self.per_block or self.block

    def grid(self, scalars: Mapping[str, int]) -> tuple[int, int, int]:
        """Grid for the given scalar values: ceil(n / items per block) blocks, or exactly one."""
        if self.blocks is not None:
            return (int(self.blocks(scalars)), 1, 1)
        if self.over is None:
            return (1, 1, 1)
        return (math.ceil(int(scalars[self.over]) / self.items_per_block), 1, 1)


def Grid1D(over: str, block: int = 256) -> Launch:
    """One thread per element of `over`, `block` threads a block."""
    return Launch(block=block, over=over)


def OneBlock(block: int) -> Launch:
    """A single block of exactly `block` threads (kernels that reduce over all rows)."""
    return Launch(block=block, over=None)


@dataclass(frozen=True)
class Axis:
    """A compile-time build axis: a -D define with its allowed values, a file-name label, and
    the config key whose value picks it. Its cubins export the value as `alpha_rl_axis_<define>`
    (ALPHA_RL_AXIS in cuda/common.cuh)."""

    define: str
    label: str
    values: tuple[int, ...]
    config: str  # dotted key of the composed config, e.g. "reward.stride"

    def kwarg(self) -> str:
        """The keyword-only parameter name under which oracles receive the define."""
        return self.define.lower()


# Reward components per sample (DESIGN §4): the experience and reward families are built for each.
RC_STRIDE = Axis(define="RC_STRIDE", label="rc", values=(6, 7), config="reward.stride")


@dataclass(frozen=True)
class ParamSlot:
    """Where a parameter sits in the kernel's parameter buffer."""

    ordinal: int
    offset: int
    size: int


@dataclass(frozen=True)
class KernelDecl:
    """A `extern "C" __global__` kernel of `cuda/<stem>.cu` and its argument list."""

    stem: str
    name: str
    args: tuple[Arg, ...]
    launch: Launch
    doc: str = ""

    def __post_init__(self) -> None:
        names = [a.name for a in self.args]
        if len(set(names)) != len(names):
            raise TypeError(f"{self.name}: duplicate argument names in {names}")
        roles = [a.role for a in self.args]
        if roles != sorted(roles):
            raise TypeError(f"{self.name}: declare inputs, then outputs, then scalars; got {names}")
        if self.launch.over is not None and self.launch.over not in self.scalar_names:
            raise TypeError(f"{self.name}: launch over {self.launch.over!r}, not a scalar argument")
        if sum(a.is_pointer for a in self.args) > AGENT_SLOTS:
            raise TypeError(f"{self.name}: more than {AGENT_SLOTS} pointer arguments (AgentAxis)")

    @property
    def scalar_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args if not a.is_pointer)

    def prepared_format(self) -> str:
        """The PyCUDA `prepare` argument-type string, e.g. 'PPiQ' and the agent axis's strides
        (AGENT_SLOTS int64s, passed after the declared arguments)."""
        return "".join(a.format_char for a in self.args) + "q" * AGENT_SLOTS

    def param_layout(self) -> tuple[ParamSlot, ...]:
        """Offsets under the C ABI: each parameter aligned to its own size, in order; the last,
        ordinal len(args), the agent axis (a struct of AGENT_SLOTS int64s, 8-byte aligned)."""
        slots, offset = [], 0
        sizes = [(a.size, a.size) for a in self.args] + [(AGENT_AXIS_SIZE, 8)]
        for ordinal, (size, align) in enumerate(sizes):
            offset = -(-offset // align) * align
            slots.append(ParamSlot(ordinal, offset, size))
            offset += size
        return tuple(slots)


@dataclass
class Stem:
    """A kernel family: one `cuda/<stem>.cu`, its build axes, and the kernels it defines."""

    name: str
    axes: tuple[Axis, ...] = ()
    kernels: dict[str, KernelDecl] = field(default_factory=dict)

    def kernel(self, name: str, *args: Arg, launch: Launch, doc: str = "") -> KernelDecl:
        """Declare a kernel of this stem; its C name must start with `<stem>_`."""
        if not name.startswith(self.name + "_"):
            raise TypeError(
                f"kernel {name!r} of stem {self.name!r} must be named {self.name}_<verb>"
            )
        decl = KernelDecl(self.name, name, tuple(args), launch, doc)
        self.kernels[name] = decl
        return decl

    def variants(self) -> Iterator[dict[str, int]]:
        """Every combination of axis values this stem is built for ({} when it has no axes)."""
        for values in itertools.product(*(axis.values for axis in self.axes)):
            yield {axis.define: v for axis, v in zip(self.axes, values, strict=True)}

    def variant_name(self, defines: Mapping[str, int]) -> str:
        """File-name label of a variant, e.g. 'rc7' ('' for a stem with no axes)."""
        return ".".join(f"{axis.label}{defines[axis.define]}" for axis in self.axes)

    def select(self, defines: Mapping[str, int]) -> dict[str, int]:
        """The subset of `defines` this stem is built with; every axis must be given and valid."""
        chosen = {}
        for axis in self.axes:
            if axis.define not in defines:
                raise KeyError(f"stem {self.name!r} needs a value for {axis.define}")
            value = int(defines[axis.define])
            if value not in axis.values:
                raise ValueError(f"{axis.define}={value} is not one of {axis.values}")
            chosen[axis.define] = value
        return chosen
