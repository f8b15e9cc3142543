"""The memory of agents that step together: each array A-fold, agent a's slice at a fixed stride.

A session of A agents whose shapes agree allocates through one `AgentPool`: the k-th array an
agent asks for is slice a of the pool's k-th block, a single allocation of A times its size, so
agent a's array sits a * size elements after agent 0's. That fixed stride is what lets one launch
serve every agent (the agent axis, cuda/common.cuh): the kernel moves each pointer onto its
agent's slice. Every agent still holds arrays of its own shape, reads and writes them as alone,
and checkpoints them alone.

An agent whose k-th request differs from the block's shape or dtype (its shapes are not the
others') leaves the pool: that array and every later one are allocated on their own, and the
launches that touch them go one agent at a time (kernels/tape.py), exactly as alone. Once an
agent's step is built (`seal`), what it allocates after (an evaluation's, a probe's passing
arrays) is its own too: those are freed as they would be alone, and never launched together.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from alpha_rl.backend.base import Backend, DeviceArray, RunBackend

log = logging.getLogger("alpha_rl")


class AgentPool:
    """A-fold blocks of device memory, handed out one slice per agent in allocation order."""

    def __init__(self, backend: Backend, agents: int) -> None:
        if agents < 1:
            raise ValueError(f"a pool holds at least one agent, got {agents}")
        self.backend, self.agents = backend, agents
        self.blocks: list[tuple[DeviceArray, tuple[int, ...], np.dtype]] = []
        self.taken = [0] * agents  # the blocks each agent has taken a slice of, in order
        self.left = [False] * agents  # an agent whose requests stopped matching the blocks
        self.sealed = [False] * agents  # an agent whose step's arrays are all allocated
        self._spans: dict[int, DeviceArray] = {}  # agent 0's slice (by address) -> its block

    def alloc(self, agent: int, shape: int | tuple[int, ...], dtype: Any) -> DeviceArray:
        """Agent `agent`'s next array: its slice of the next block (allocated by the first agent
        to ask), or an array of its own once it has left the pool."""
        shape = (shape,) if isinstance(shape, int | np.integer) else tuple(map(int, shape))
        dtype = np.dtype(dtype)
        if self.left[agent] or self.sealed[agent]:
            return self.backend.alloc(shape, dtype)
        k = self.taken[agent]
        if k == len(self.blocks):
            base = self.backend.alloc(self.agents * elements(shape), dtype)
            self.blocks.append((base, shape, dtype))
        base, want, want_dtype = self.blocks[k]
        if (want, want_dtype) != (shape, dtype):
            self.left[agent] = True
            log.warning(
                "agent %d's array %d is %s x %s where the pool's is %s x %s: its shapes differ "
                "from the agents' before it, so its launches go one agent at a time",
                agent, k, shape, dtype, want, want_dtype,
            )  # fmt: skip
            return self.backend.alloc(shape, dtype)
        self.taken[agent] = k + 1
        n = elements(shape)
        view = base[agent * n : (agent + 1) * n].reshape(shape)
        if agent == 0:
            self._spans[address(view)] = base
        return view

    def seal(self, agent: int) -> None:
        """Agent `agent`'s step is built: its later arrays are its own (see the docstring)."""
        self.sealed[agent] = True

    def span(self, first: DeviceArray) -> DeviceArray | None:
        """The whole block whose agent-0 slice is `first` (every agent's slice, in agent order),
        or None when `first` is not one."""
        return self._spans.get(address(first))

    def region(self, first: DeviceArray, stride: int, agents: int) -> DeviceArray | None:
        """The stretch of a block from `first` (agent 0's array, or a part of it) through the
        same place in agent `agents - 1`'s slice, `stride` elements on per agent: what one read
        of every agent's copy covers (an audit's). None when `first` is in no block."""
        if not first.flags.c_contiguous:  # a strided view: its elements are not one stretch
            return None
        start, itemsize = address(first), np.dtype(first.dtype).itemsize
        for base, _, dtype in self.blocks:
            lo = address(base)
            if dtype != first.dtype or not lo <= start < lo + base.size * itemsize:
                continue
            offset, misaligned = divmod(start - lo, itemsize)
            end = offset + (agents - 1) * stride + first.size
            return None if misaligned or end > base.size else base[offset:end]
        return None


def elements(shape: tuple[int, ...]) -> int:
    """The elements of an array of `shape` (integers: exact however multiplied)."""
    count = 1
    for extent in shape:
        count *= extent
    return count


def address(array: Any) -> int:
    """Where an array (or a launch's pointer value) starts in memory: 0 for None (NULL)."""
    if array is None:
        return 0
    if isinstance(array, np.ndarray):
        return int(array.__array_interface__["data"][0])
    if hasattr(array, "gpudata"):
        return int(array.gpudata)
    return int(array)  # already an address (a PyCUDA launch value)


class AgentBackend(RunBackend):
    """Agent `agent`'s view of a backend it shares with the other agents of its pool: its
    arrays are slices of the pool's blocks; everything else is RunBackend's (its reads wait for
    the stream it shares with them)."""

    def __init__(self, backend: Backend, stream: Any, pool: AgentPool, agent: int) -> None:
        super().__init__(backend, stream)
        self.pool, self.agent = pool, agent

    def alloc(self, shape: int | tuple[int, ...], dtype: Any) -> DeviceArray:
        return self.pool.alloc(self.agent, shape, dtype)

    def zeros(self, shape: int | tuple[int, ...], dtype: Any) -> DeviceArray:
        array = self.alloc(shape, dtype)
        self.backend.fill(array, 0)  # after every stream's work, as a fresh allocation is
        return array

    def upload(self, host: np.ndarray) -> DeviceArray:
        host = np.ascontiguousarray(host)
        array = self.alloc(host.shape, host.dtype)
        self.backend.write(array, host)
        return array
