"""Kernel declarations: derived formats and layouts, and agreement with the NumPy oracles."""

from __future__ import annotations

import importlib
import inspect
import struct

import numpy as np
import pytest

from alpha_rl.kernels.decl import (
    AGENT_AXIS_SIZE,
    AGENT_SLOTS,
    RC_STRIDE,
    Grid1D,
    In,
    OneBlock,
    Out,
    Scalar,
    Stem,
)
from alpha_rl.kernels.registry import all_kernels, stems


def test_prepared_format_and_c_abi_layout() -> None:
    stem = Stem("probe")
    decl = stem.kernel(
        "probe_k",
        In("a", np.float32),
        Out("b", np.uint8),
        Scalar("n", np.int32),
        Scalar("seed", np.uint64),
        Scalar("x", np.float32),
        launch=Grid1D("n"),
    )
    assert decl.prepared_format() == "PPiQf" + "q" * AGENT_SLOTS  # then the agent axis
    layout = [(s.offset, s.size) for s in decl.param_layout()]
    assert layout == [(0, 8), (8, 8), (16, 4), (24, 8), (32, 4), (40, AGENT_AXIS_SIZE)]
    # PyCUDA packs the arguments with struct's native alignment: the same bytes as the C ABI
    assert struct.calcsize(decl.prepared_format()) == 40 + AGENT_AXIS_SIZE


def test_a_kernel_has_at_most_agent_slots_pointers() -> None:
    args = [In(f"a{i}", np.float32) for i in range(AGENT_SLOTS + 1)]
    with pytest.raises(TypeError, match="more than 32 pointer arguments"):
        Stem("probe").kernel("probe_many", *args, launch=OneBlock(32))


def test_declaration_rules() -> None:
    stem = Stem("probe")
    with pytest.raises(TypeError, match="inputs, then outputs, then scalars"):
        stem.kernel("probe_a", Scalar("n", np.int32), In("a", np.float32), launch=Grid1D("n"))
    with pytest.raises(TypeError, match="must be named probe_<verb>"):
        stem.kernel("other_a", In("a", np.float32), launch=OneBlock(32))
    with pytest.raises(TypeError, match="launch over 'm'"):
        stem.kernel("probe_b", In("a", np.float32), Scalar("n", np.int32), launch=Grid1D("m"))
    with pytest.raises(TypeError, match="duplicate argument names"):
        stem.kernel("probe_c", In("a", np.float32), Out("a", np.float32), launch=OneBlock(32))


def test_grid_covers_every_element() -> None:
    launch = Grid1D("n", block=256)
    assert [launch.grid({"n": n})[0] for n in (0, 1, 256, 257, 1000)] == [0, 1, 1, 2, 4]
    assert OneBlock(256).grid({"n": 10**6}) == (1, 1, 1)


def test_variants_and_names() -> None:
    stem = Stem("probe", axes=(RC_STRIDE,))
    assert list(stem.variants()) == [{"RC_STRIDE": 6}, {"RC_STRIDE": 7}]
    assert stem.variant_name({"RC_STRIDE": 7}) == "rc7"
    assert stem.select({"RC_STRIDE": 6, "OTHER": 1}) == {"RC_STRIDE": 6}
    assert Stem("plain").select({"RC_STRIDE": 6}) == {} and list(Stem("plain").variants()) == [{}]


@pytest.mark.parametrize("decl", all_kernels(), ids=lambda d: d.name)
def test_oracle_has_the_kernels_argument_list(decl) -> None:
    oracle = getattr(importlib.import_module(f"alpha_rl.reference.{decl.stem}"), decl.name)
    params = inspect.signature(oracle).parameters.values()
    positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    keyword_only = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    assert positional == [a.name for a in decl.args]
    assert keyword_only == [axis.kwarg() for axis in stems()[decl.stem].axes]
    assert oracle.__doc__, f"{decl.name}'s oracle must state its math in a docstring"
