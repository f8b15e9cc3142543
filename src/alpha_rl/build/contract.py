"""The contract check: every kernel's Python declaration against what nvcc compiled.

For each cubin: the kernels it contains equal the kernels its stem declares; each kernel's
parameter count, sizes and offsets equal the declaration's C-ABI layout; a `__launch_bounds__`
block shape admits the declared block; the build-info constants say the cubin was built with the
ABI version and the value of each build axis its file name claims; and every constant it exports
equals the one Python table of them (alpha_rl/abi.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from alpha_rl.abi import CONSTANTS
from alpha_rl.build import elf
from alpha_rl.errors import ContractError
from alpha_rl.kernels.decl import KernelDecl, Stem

ABI_VERSION = 2  # must equal ALPHA_RL_ABI in cuda/common.cuh
CONSTANT_PREFIX = "alpha_rl_const_"  # ALPHA_RL_EXPORT in cuda/common.cuh
AXIS_PREFIX = "alpha_rl_axis_"  # ALPHA_RL_AXIS in cuda/common.cuh


def _describe(decl: KernelDecl, ordinal: int) -> str:
    if ordinal == len(decl.args):
        return f"parameter {ordinal}, the agent axis (AgentAxis, after the declared arguments)"
    arg = decl.args[ordinal]
    kind = "pointer" if arg.is_pointer else str(arg.dtype)
    return f"parameter {ordinal} {arg.name!r} ({kind})"


def kernel_problems(decl: KernelDecl, compiled: elf.CompiledKernel) -> list[str]:
    """Differences between one declaration and its compiled parameter list."""
    problems = []
    want = decl.param_layout()
    if len(want) != len(compiled.params):
        problems.append(
            f"{decl.name}: declared {len(want)} parameters "
            f"({', '.join(a.name for a in decl.args)}, agent_axis), compiled "
            f"{len(compiled.params)}"
        )
    for slot, got in zip(want, compiled.params, strict=False):
        if (slot.offset, slot.size) != (got.offset, got.size):
            problems.append(
                f"{decl.name}: {_describe(decl, slot.ordinal)} declared {slot.size} bytes at "
                f"offset {slot.offset}, compiled {got.size} bytes at offset {got.offset}"
            )
    if compiled.max_threads is not None and decl.launch.block > compiled.max_threads[0]:
        problems.append(
            f"{decl.name}: declared block of {decl.launch.block} threads, but the kernel's "
            f"__launch_bounds__ allows at most {compiled.max_threads[0]}"
        )
    return problems


def cubin_problems(cubin: Path, stem: Stem, defines: Mapping[str, int],
                   table: Mapping[str, Mapping[str, int]] = CONSTANTS) -> list[str]:  # fmt: skip
    """Every disagreement between a stem's declarations and one of its cubins."""
    compiled = elf.compiled_kernels(cubin)
    problems = [
        f"{name}: compiled but not declared in alpha_rl.kernels.{stem.name}"
        for name in sorted(set(compiled) - set(stem.kernels))
    ]
    problems += [
        f"{name}: declared in alpha_rl.kernels.{stem.name} but not in the cubin"
        for name in sorted(set(stem.kernels) - set(compiled))
    ]
    for name in sorted(set(stem.kernels) & set(compiled)):
        problems += kernel_problems(stem.kernels[name], compiled[name])
    abi = elf.constant_i32(cubin, "alpha_rl_abi")
    if abi != ABI_VERSION:
        problems.append(f"alpha_rl_abi is {abi}, expected {ABI_VERSION} (include common.cuh)")
    problems += axis_problems(stem, defines, elf.constants_i32(cubin, AXIS_PREFIX))
    problems += constant_problems(stem.name, elf.constants_i32(cubin, CONSTANT_PREFIX), table)
    return [f"{cubin.name}: {p}" for p in problems]


def axis_problems(stem: Stem, defines: Mapping[str, int], built: Mapping[str, int]) -> list[str]:
    """Where the axis values a cubin says it was built with (`alpha_rl_axis_<DEFINE>`) and the
    variant it was loaded or checked for (`defines`, one value per axis of `stem`) disagree."""
    want = {axis.define: int(defines[axis.define]) for axis in stem.axes}
    problems = [f"{AXIS_PREFIX}{d} is {built[d]}, expected {v}"
                for d, v in sorted(want.items()) if d in built and built[d] != v]  # fmt: skip
    problems += [f"built without {AXIS_PREFIX}{d} (ALPHA_RL_AXIS), though the stem's axes name it"
                 for d in sorted(set(want) - set(built))]  # fmt: skip
    problems += [f"{AXIS_PREFIX}{d} is exported, but alpha_rl.kernels.{stem.name} declares no "
                 f"such axis" for d in sorted(set(built) - set(want))]  # fmt: skip
    return problems


def constant_problems(stem: str, exported: Mapping[str, int],
                      table: Mapping[str, Mapping[str, int]] = CONSTANTS) -> list[str]:  # fmt: skip
    """Where the constants a cubin exports and the Python table (alpha_rl/abi.py) disagree."""
    want = table.get(stem, {})
    problems = [f"{CONSTANT_PREFIX}{k} is {v} in the cubin but {want[k]} in alpha_rl/abi.py"
                for k, v in sorted(exported.items()) if k in want and want[k] != v]  # fmt: skip
    problems += [f"{CONSTANT_PREFIX}{k} is exported but not in alpha_rl/abi.py's {stem!r} table"
                 for k in sorted(set(exported) - set(want))]  # fmt: skip
    problems += [f"alpha_rl/abi.py's {k} ({stem}) is not exported by the cubin (ALPHA_RL_EXPORT)"
                 for k in sorted(set(want) - set(exported))]  # fmt: skip
    return problems


def check(cubin_dir: Path, arch: str, stems: Mapping[str, Stem]) -> None:
    """Raise ContractError listing every problem across all declared stems' cubins for `arch`."""
    from alpha_rl.build.manifest import cubin_relpath

    problems = []
    for stem in stems.values():
        for defines in stem.variants():
            cubin = cubin_dir / cubin_relpath(stem.name, stem.variant_name(defines), arch)
            if not cubin.is_file():
                problems.append(f"{cubin}: missing; run `make cubins`")
                continue
            problems += cubin_problems(cubin, stem, defines)
    if problems:
        raise ContractError(
            "kernel declarations disagree with the cubins:\n  " + "\n  ".join(problems)
        )
