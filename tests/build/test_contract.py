"""The contract check: declarations vs the parameter lists nvcc compiled into the cubins."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from alpha_rl import paths
from alpha_rl.build import contract, elf
from alpha_rl.build.cli import build
from alpha_rl.errors import ContractError
from alpha_rl.kernels.decl import RC_STRIDE, Grid1D, In, OneBlock, Out, Scalar, Stem
from alpha_rl.kernels.registry import all_kernels, stems

FIXTURE = Path(__file__).parents[1] / "fixtures" / "cuda_contract"


def test_every_declared_kernel_matches_its_cubin(built_cubins: Path) -> None:
    contract.check(built_cubins, "90", stems())  # raises ContractError listing every problem
    for decl in all_kernels():
        stem = stems()[decl.stem]
        for defines in stem.variants():
            suffix = f".{stem.variant_name(defines)}" if stem.axes else ""
            compiled = elf.compiled_kernels(built_cubins / "sm_90" / f"{decl.stem}{suffix}.cubin")
            assert compiled[decl.name].params == decl.param_layout()


def test_every_source_has_a_declared_stem_and_back() -> None:
    sources = {p.stem for p in paths.cuda_dir().glob("*.cu")}
    assert sources == set(stems()), "each cuda/<stem>.cu needs alpha_rl/kernels/<stem>.py and back"


def test_cubins_expose_what_they_were_built_with(built_cubins: Path) -> None:
    for stride in RC_STRIDE.values:
        cubin = built_cubins / "sm_90" / f"reward.rc{stride}.cubin"
        assert elf.constants_i32(cubin, contract.AXIS_PREFIX) == {"RC_STRIDE": stride}
        assert elf.constant_i32(cubin, "alpha_rl_abi") == contract.ABI_VERSION
    assert elf.constants_i32(built_cubins / "sm_90" / "rng.cubin", contract.AXIS_PREFIX) == {}


def test_abi_version_matches_common_header() -> None:
    text = (paths.cuda_dir() / "common.cuh").read_text()
    assert f"#define ALPHA_RL_ABI {contract.ABI_VERSION}\n" in text


@pytest.fixture(scope="module")
def probe_cubin(nvcc: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture kernel compiled by the real builder (with cuda/ on the include path)."""
    out = tmp_path_factory.mktemp("probe")
    report = build(
        FIXTURE, out, ["90"], stems={}, include_dirs=[paths.cuda_dir()], log=lambda *_: None
    )
    assert not report.failed, report.failed
    return out / "sm_90" / "contract_probe.cubin"


def _probe_stem(*args) -> Stem:
    """The fixture's stem with `contract_probe_scale` declared as `args`."""
    stem = Stem("contract_probe")
    stem.kernel("contract_probe_scale", *args, launch=Grid1D("n"))
    stem.kernel("contract_probe_undeclared", Out("y", np.float32), launch=OneBlock(1))
    return stem


PROBE_TABLE = {"contract_probe": {"PROBE_WIDTH": 7}}  # the fixture's exported constant
RIGHT = (
    In("x", np.float32),
    Out("y", np.float32),
    Scalar("n", np.int32),
    Scalar("factor", np.float64),
)


def test_matching_declaration_passes(probe_cubin: Path) -> None:
    assert contract.cubin_problems(probe_cubin, _probe_stem(*RIGHT), {}, PROBE_TABLE) == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # the C signature has (x, y, n, factor); each declaration below disagrees with it
        (
            (*RIGHT[:2], Scalar("factor", np.float64), Scalar("n", np.int32)),
            "parameter 2 'factor' (float64) declared 8 bytes at offset 16, "
            "compiled 4 bytes at offset 16",
        ),
        (
            (*RIGHT[:3], Scalar("factor", np.float32)),
            "parameter 3 'factor' (float32) declared 4 bytes at offset 20, "
            "compiled 8 bytes at offset 24",
        ),
        (RIGHT[:3], "declared 4 parameters (x, y, n, agent_axis), compiled 5"),
        (
            (*RIGHT[:2], Scalar("n", np.int64), RIGHT[3]),
            "parameter 2 'n' (int64) declared 8 bytes at offset 16, compiled 4 bytes at offset 16",
        ),
    ],
)
def test_mismatched_declaration_is_caught(probe_cubin: Path, args: tuple, expected: str) -> None:
    problems = contract.cubin_problems(probe_cubin, _probe_stem(*args), {}, PROBE_TABLE)
    assert any(expected in p for p in problems), problems


def test_undeclared_and_missing_kernels_are_caught(probe_cubin: Path) -> None:
    stem = Stem("contract_probe")
    stem.kernel("contract_probe_scale", *RIGHT, launch=Grid1D("n"))
    stem.kernel(
        "contract_probe_gone", Out("y", np.float32), Scalar("n", np.int32), launch=Grid1D("n")
    )
    problems = "\n".join(contract.cubin_problems(probe_cubin, stem, {}, PROBE_TABLE))
    assert "contract_probe_undeclared: compiled but not declared" in problems
    assert (
        "contract_probe_gone: declared in alpha_rl.kernels.contract_probe but not in the cubin"
        in problems
    )


def test_a_cubin_of_the_wrong_stride_is_caught(built_cubins: Path) -> None:
    reward = stems()["reward"]
    problems = contract.cubin_problems(
        built_cubins / "sm_90" / "reward.rc6.cubin", reward, {"RC_STRIDE": 7}
    )
    assert problems == ["reward.rc6.cubin: alpha_rl_axis_RC_STRIDE is 6, expected 7"]


def test_a_cubin_without_its_stems_axis_or_with_an_undeclared_one_is_caught(
    built_cubins: Path,
) -> None:
    reward = stems()["reward"]
    axisless = Stem("reward", kernels=reward.kernels)  # a declaration that forgot the axis
    problems = contract.cubin_problems(built_cubins / "sm_90" / "reward.rc6.cubin", axisless, {})
    assert problems == [
        "reward.rc6.cubin: alpha_rl_axis_RC_STRIDE is exported, but alpha_rl.kernels.reward "
        "declares no such axis"
    ]
    rng = stems()["rng"]
    strided = Stem("rng", axes=(RC_STRIDE,), kernels=rng.kernels)
    problems = contract.cubin_problems(
        built_cubins / "sm_90" / "rng.cubin", strided, {"RC_STRIDE": 6}
    )
    assert problems == [
        "rng.cubin: built without alpha_rl_axis_RC_STRIDE (ALPHA_RL_AXIS), though the stem's "
        "axes name it"
    ]


def test_block_beyond_launch_bounds_is_caught(built_cubins: Path) -> None:
    real = stems()["reward"].kernels["reward_diagnostics"]
    stem = Stem("reward", axes=(RC_STRIDE,))
    stem.kernel(real.name, *real.args, launch=OneBlock(512))
    problems = contract.cubin_problems(
        built_cubins / "sm_90" / "reward.rc7.cubin", stem, {"RC_STRIDE": 7}
    )
    assert any("__launch_bounds__ allows at most 256" in p for p in problems), problems


def test_check_raises_with_every_problem(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match=r"rng\.cubin: missing; run `make cubins`"):
        contract.check(tmp_path, "90", stems())


def test_every_exported_constant_equals_the_python_table(built_cubins: Path) -> None:
    """The real cubins: what each exports is what alpha_rl/abi.py (and so every launcher and
    oracle) uses; and the drifted AUX_ROWS copy of the oracle is gone."""
    from alpha_rl.abi import CONSTANTS
    from alpha_rl.build import elf
    from alpha_rl.reference import dqn as dqn_ref

    exported = {}
    for cubin in sorted((built_cubins / "sm_90").glob("*.cubin")):
        stem = cubin.name.split(".")[0]
        found = elf.constants_i32(cubin, contract.CONSTANT_PREFIX)
        assert contract.constant_problems(stem, found) == [], cubin.name
        exported |= {stem: found} if found else {}
    assert exported == CONSTANTS
    assert not hasattr(dqn_ref, "AUX_ROWS")


def test_a_constant_that_differs_from_the_table_is_caught(probe_cubin: Path) -> None:
    from alpha_rl.build import elf

    found = elf.constants_i32(probe_cubin, contract.CONSTANT_PREFIX)
    assert found == {"PROBE_WIDTH": 7}
    assert (
        contract.constant_problems("contract_probe", found, {"contract_probe": {"PROBE_WIDTH": 7}})
        == []
    )
    assert contract.constant_problems(
        "contract_probe", found, {"contract_probe": {"PROBE_WIDTH": 8}}
    ) == ["alpha_rl_const_PROBE_WIDTH is 7 in the cubin but 8 in alpha_rl/abi.py"]
    assert contract.constant_problems("contract_probe", found, {}) == [
        "alpha_rl_const_PROBE_WIDTH is exported but not in alpha_rl/abi.py's 'contract_probe' table"
    ]
    assert contract.constant_problems(
        "contract_probe", {}, {"contract_probe": {"PROBE_WIDTH": 7}}
    ) == [
        "alpha_rl/abi.py's PROBE_WIDTH (contract_probe) is not exported by the cubin "
        "(ALPHA_RL_EXPORT)"
    ]
