"""The agent axis on the host: pooled arrays at fixed strides (backend/pool.py), recorded steps
and their merging into one launch per kernel (kernels/tape.py)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from alpha_rl.backend.base import Copy, Fill, RunBackend
from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.backend.pool import AgentBackend, AgentPool, address
from alpha_rl.kernels import rng
from alpha_rl.kernels.decl import AGENT_SLOTS
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.kernels.tape import AgentCall, Call, Each, MergeError, merge, run
from alpha_rl.rng import Stream


def agents(count: int) -> tuple[AgentPool, list[AgentBackend]]:
    pool = AgentPool(NumpyBackend(), count)
    return pool, [AgentBackend(pool.backend, "stream", pool, a) for a in range(count)]


def test_an_agents_arrays_are_its_slices_of_the_pools_blocks() -> None:
    pool, backends = agents(3)
    arrays = [(be.zeros(5, np.float32), be.upload(np.full((2, 3), a, np.int32)))
              for a, be in enumerate(backends)]  # fmt: skip
    for a, (x, y) in enumerate(arrays):
        assert x.shape == (5,) and y.shape == (2, 3) and (y == a).all() and not x.any()
        assert address(x) == address(arrays[0][0]) + a * 5 * 4  # a fixed stride: 5 floats
        assert address(y) == address(arrays[0][1]) + a * 6 * 4
    x0 = arrays[0][0]
    assert pool.span(x0).size == 15 and pool.span(arrays[1][0]) is None  # agent 0's only
    arrays[1][0][:] = 7.0  # an agent writes its own slice only
    assert not arrays[0][0].any() and not arrays[2][0].any()


def test_an_agent_whose_shapes_differ_leaves_the_pool(caplog) -> None:
    pool, (first, second) = agents(2)
    first.zeros(4, np.float32), first.zeros(8, np.float32)
    with caplog.at_level(logging.WARNING, logger="alpha_rl"):
        own = second.zeros(4, np.float32), second.zeros(16, np.float32), second.zeros(8, np.uint8)
    assert "agent 1's array 1 is (16,) x float32 where the pool's is (8,) x float32" in caplog.text
    assert pool.left == [False, True] and len(pool.blocks) == 2
    assert address(own[0]) == address(pool.blocks[0][0]) + 4 * 4  # before: still its slice
    assert own[1].size == 16 and own[2].dtype == np.uint8  # after: arrays of its own


def recorded_fill(backends, n: int = 6, seeds=None, offset: int = 0) -> list[list]:
    """Each agent's rng_fill of its own arrays (and a copy, and a fill), recorded."""
    tapes = []
    for be, seed in zip(backends, seeds or [9] * len(backends), strict=True):
        runtime = KernelRuntime(be, {})
        fill = runtime.bind(rng.FILL)
        u32, uniform = be.zeros(n, np.uint32), be.zeros(n, np.float32)
        scratch = be.zeros(n, np.float32)
        with runtime.recording() as tape:
            fill(out_u32=u32, out_uniform=uniform, n=n, seed=seed, rng_stream=Stream.TEST,
                 offset=offset)  # fmt: skip
            be.copy(scratch, uniform)
            be.fill(u32, 3)
        assert not uniform.any(), "recorded, not run"
        tapes.append((tape, u32, uniform, scratch))
    return tapes


def test_recorded_steps_merge_into_one_call_per_kernel_with_each_arrays_stride() -> None:
    pool, backends = agents(3)
    recorded = recorded_fill(backends, offset=4)
    tapes = [r[0] for r in recorded]
    assert [type(op) for op in tapes[0]] == [Call, Copy, Fill]
    ops = merge(tapes, pool.span)
    call, copy, fill = ops
    assert isinstance(call, AgentCall) and len(call.axis) == AGENT_SLOTS
    assert call.axis[:2] == (6, 6) and not any(call.axis[2:])  # 6 elements from agent to agent
    assert isinstance(copy, Copy) and copy.dst.size == 18  # one copy over the blocks
    assert isinstance(fill, Fill) and fill.array.size == 18
    run(ops, stream=None)
    want = np.zeros(6, np.float32)
    alone = KernelRuntime(NumpyBackend(), {}).bind(rng.FILL)
    alone(out_u32=np.zeros(6, np.uint32), out_uniform=want, n=6, seed=9,
          rng_stream=Stream.TEST, offset=4)  # fmt: skip
    for _, u32, uniform, scratch in recorded:  # each agent what its launch alone writes
        np.testing.assert_array_equal(uniform, want)
        np.testing.assert_array_equal(scratch, want)
        assert (u32 == 3).all()


def test_steps_that_differ_do_not_merge_and_say_where() -> None:
    pool, backends = agents(2)
    tapes = [r[0] for r in recorded_fill(backends, seeds=(9, 10))]
    with pytest.raises(MergeError, match=r"operation 0 \(rng_fill\): agent 1's seed is 10, "
                                         "agent 0's 9"):  # fmt: skip
        merge(tapes, pool.span)
    with pytest.raises(MergeError, match="agent 1 queues 2 operations a step, agent 0 3"):
        merge([tapes[0], tapes[1][:2]], pool.span)
    pool, backends = agents(2)
    tapes = [r[0] for r in recorded_fill(backends)]
    with pytest.raises(MergeError, match="operation 1: Copy, Fill"):
        merge([tapes[0], [tapes[1][0], tapes[1][2], tapes[1][1]]], pool.span)


def test_arrays_outside_the_pool_do_not_merge() -> None:
    plain = [RunBackend(NumpyBackend(), "stream") for _ in range(3)]
    tapes = [r[0] for r in recorded_fill(plain)]
    with pytest.raises(MergeError, match=r"agent .'s out_u32 is not at a fixed stride"):
        merge(tapes)
    _, backends = agents(2)
    tapes = [r[0] for r in recorded_fill(backends)]
    memory = merge([[op] for op in (tapes[0][1], tapes[1][1])])  # no pool: a copy each
    assert isinstance(memory[0], Each) and len(memory[0].ops) == 2


def test_one_agent_runs_its_tape_as_recorded() -> None:
    _, backends = agents(1)
    tape = recorded_fill(backends)[0][0]
    assert merge([tape]) == tape


def test_one_array_every_agent_writes_does_not_merge() -> None:
    """Agents that pass the very same array as an output (stride 0) would race on it in one
    launch: refused, naming the argument."""
    _, backends = agents(2)
    shared = backends[0].zeros(6, np.uint32)
    tapes = []
    for be in backends:
        runtime = KernelRuntime(be, {})
        fill = runtime.bind(rng.FILL)
        with runtime.recording() as tape:
            fill(out_u32=shared, out_uniform=be.zeros(6, np.float32), n=6, seed=9,
                 rng_stream=Stream.TEST, offset=0)  # fmt: skip
        tapes.append(tape)
    with pytest.raises(MergeError, match=r"out_u32 is one array every agent writes"):
        merge(tapes)


def test_a_strided_view_is_no_stretch_of_a_block() -> None:
    pool, backends = agents(2)
    x = [be.zeros(8, np.float32) for be in backends]
    assert pool.region(x[0][1:3], 8, 2).size == 8 + 2  # from agent 0's x[1] to agent 1's x[2]
    assert pool.region(x[0][::2], 8, 2) is None
