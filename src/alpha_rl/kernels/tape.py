"""One launch for many agents: each agent's step recorded, the recordings lined up, then launched.

While a runtime records (`KernelRuntime.recording`), each kernel call is checked as usual and
kept as a `Call` (the bound kernel, its grid and its converted arguments), and each copy or fill
its run queues as a backend `Copy` or `Fill`. A tape per agent, in step order, is what that agent
alone would have launched.

`merge` lines up the tapes of A agents: at every position the same kernel with the same grid and
scalar arguments, and each pointer argument at a fixed stride from agent 0's (the arrays of an
AgentPool, backend/pool.py; a stride of 0 is one array all share). A merged call launches the
kernel once with gridDim.y = A and the strides as its agent axis (cuda/common.cuh), so agent a's
blocks see exactly its own arrays; on the numpy backend it calls the oracle once per agent on
that agent's arrays. A merged copy or fill of pooled arrays is one over the pool's block. Tapes
that do not line up raise `MergeError`, naming the first difference: those agents launch one at a
time (`run_alone`), each exactly as alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from alpha_rl.backend.base import Copy, DeviceArray, Fill
from alpha_rl.backend.pool import address
from alpha_rl.kernels.audit import audit_agents
from alpha_rl.kernels.decl import AGENT_SLOTS, NO_AXIS, Role

Span = Callable[[DeviceArray], DeviceArray | None]  # agent 0's pooled array -> its whole block


@dataclass(frozen=True)
class Call:
    """A checked kernel call a recorded step queued."""

    kernel: Any  # the BoundKernel
    grid: tuple[int, int, int]
    values: list  # the launch's values: scalars, device pointers as the backend passes them
    args: tuple = ()  # the arguments as called (device arrays): what an audit reads
    audit: Any = None  # the KernelAudit of the agent's run, when it audits this call

    def run(self, stream: Any) -> None:
        if self.audit is None:
            self.launch(stream)
        else:
            self.audit.run(self.kernel, self.args, self.values, lambda: self.launch(stream))

    def launch(self, stream: Any) -> None:
        self.kernel.launch_values(self.grid, self.values, stream)


@dataclass(frozen=True)
class AgentCall:
    """One call of the same kernel for A agents: gridDim.y = A, each pointer argument's stride
    (elements from one agent's slice to the next) in the agent axis."""

    calls: tuple[Call, ...]  # each agent's own, in agent order
    axis: tuple[int, ...]  # AGENT_SLOTS strides

    def run(self, stream: Any) -> None:
        if any(call.audit is not None for call in self.calls):
            audit_agents(self, lambda: self.launch(stream))
        else:
            self.launch(stream)

    def launch(self, stream: Any) -> None:
        """The kernel once for every agent (gridDim.y = A); on numpy each agent's oracle in
        turn, since the oracles take one agent a call."""
        first = self.calls[0]
        if first.kernel.oracles:
            for call in self.calls:
                call.launch(stream)
            return
        gx, _, _ = first.grid
        first.kernel.launch_values((gx, len(self.calls), 1), first.values, stream, self.axis)


class MergeError(Exception):
    """Tapes that do not line up: their agents' shapes or schedules differ (the message says
    where first)."""


def merge(tapes: Sequence[list], span: Span | None = None) -> list:
    """The agents' tapes as one: a runnable per position (see the module docstring)."""
    if len(tapes) == 1:
        return list(tapes[0])
    length = len(tapes[0])
    for agent, tape in enumerate(tapes):
        if len(tape) != length:
            raise MergeError(
                f"agent {agent} queues {len(tape)} operations a step, agent 0 {length}"
            )
    merged = []
    for position, ops in enumerate(zip(*tapes, strict=True)):
        kinds = {type(op) for op in ops}
        if len(kinds) != 1:
            raise MergeError(
                f"operation {position}: {', '.join(sorted(k.__name__ for k in kinds))}"
            )
        if isinstance(ops[0], Call):
            merged.append(_merge_calls(position, ops))
        else:
            merged.append(_merge_memory(ops, span))
    return merged


def _merge_calls(position: int, calls: Sequence[Call]) -> AgentCall:
    first = calls[0]
    decl = first.kernel.decl
    where = f"operation {position} ({decl.name})"
    for agent, call in enumerate(calls[1:], 1):
        if call.kernel.decl is not decl:
            raise MergeError(f"{where}: agent {agent} launches {call.kernel.decl.name}")
        if call.grid != first.grid:
            raise MergeError(
                f"{where}: agent {agent}'s grid is {call.grid}, agent 0's {first.grid}"
            )
    strides = []
    for i, arg in enumerate(decl.args):
        if not arg.is_pointer:
            for agent, call in enumerate(calls[1:], 1):
                if not _same(call.values[i], first.values[i]):
                    raise MergeError(f"{where}: agent {agent}'s {arg.name} is "
                                     f"{call.values[i]}, agent 0's {first.values[i]}")  # fmt: skip
            continue
        stride = _stride(where, arg.name, arg.dtype.itemsize,
                         [address(call.values[i]) for call in calls])  # fmt: skip
        if stride == 0 and arg.role == Role.OUT and address(first.values[i]):
            raise MergeError(f"{where}: {arg.name} is one array every agent writes (their "
                             "launches would race)")  # fmt: skip
        strides.append(stride)
    axis = tuple(strides) + NO_AXIS[: AGENT_SLOTS - len(strides)]
    return AgentCall(tuple(calls), axis)


def _same(a: Any, b: Any) -> bool:
    """Whether two scalar arguments are the same bits (-0.0 is not 0.0; a NaN is itself)."""
    if hasattr(a, "tobytes") and hasattr(b, "tobytes"):
        return type(a) is type(b) and a.tobytes() == b.tobytes()
    return type(a) is type(b) and a == b


def _stride(where: str, name: str, itemsize: int, addresses: list[int]) -> int:
    """Elements from each agent's `name` to the next's, the same for every agent."""
    if not any(addresses):
        return 0  # NULL for every agent
    if not all(addresses):
        raise MergeError(f"{where}: {name} is NULL for some agents only")
    step = addresses[1] - addresses[0]
    for agent, at in enumerate(addresses):
        if at != addresses[0] + agent * step:
            raise MergeError(
                f"{where}: agent {agent}'s {name} is not at a fixed stride from agent 0's (an "
                "array of its own, outside the agents' pool)"
            )
    if step % itemsize or step < 0:
        raise MergeError(f"{where}: {name}'s stride of {step} bytes is not whole elements on")
    return step // itemsize


@dataclass(frozen=True)
class Each:
    """A copy or fill the agents queue alike, run once per agent."""

    ops: tuple[Copy | Fill, ...]

    def run(self, stream: Any) -> None:
        for op in self.ops:
            op.run(stream)


def _merge_memory(ops: Sequence[Copy | Fill], span: Span | None) -> Copy | Fill | Each:
    """One copy or fill over the pool's blocks when every agent's is its slice of them."""
    first = ops[0]
    if span is not None:
        if isinstance(first, Copy):
            dst, src = span(first.dst), span(first.src)
            if _slices(ops, "dst", dst) and _slices(ops, "src", src) and dst.size == src.size:
                return Copy(first.backend, dst, src)
        else:
            whole = span(first.array)
            if _slices(ops, "array", whole) and len({op.value for op in ops}) == 1:
                return Fill(first.backend, whole, first.value)
    return Each(tuple(ops))


def _slices(ops: Sequence[Copy | Fill], field: str, whole: DeviceArray | None) -> bool:
    """Whether the ops' `field` arrays are agent 0, 1, ... of `whole`, in order and all of it."""
    if whole is None:
        return False
    arrays = [getattr(op, field) for op in ops]
    size, start = arrays[0].size, address(whole)
    if size * len(arrays) != whole.size:
        return False
    itemsize = whole.dtype.itemsize
    return all(address(a) == start + agent * size * itemsize for agent, a in enumerate(arrays))


def run(ops: Sequence, stream: Any) -> None:
    """Queue the runnables of a tape (or of merged tapes) on `stream`, in order."""
    for op in ops:
        op.run(stream)


def run_alone(tapes: Sequence[list], stream: Any) -> None:
    """Each agent's tape in turn, one agent a launch: what the agents do alone."""
    for tape in tapes:
        run(tape, stream)
