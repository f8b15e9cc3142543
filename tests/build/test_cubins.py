"""The cubin build: variants, the manifest, incremental rebuilds, and refusing stale cubins."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from alpha_rl import paths
from alpha_rl.build import manifest as mf
from alpha_rl.build import nvcc as nvcc_mod
from alpha_rl.build.cli import build, main
from alpha_rl.errors import CubinError
from alpha_rl.kernels.registry import stems

QUIET = {"log": lambda *_: None}


def expected_cubins() -> list[str]:
    """Every cubin `make cubins` builds for sm_90: each stem once per variant."""
    return sorted(
        mf.cubin_relpath(stem.name, stem.variant_name(defines), "90")
        for stem in stems().values()
        for defines in stem.variants()
    )


def test_each_stem_is_built_once_per_variant(built_cubins: Path) -> None:
    names = sorted(f"sm_90/{p.name}" for p in (built_cubins / "sm_90").glob("*.cubin"))
    assert names == expected_cubins()
    assert {"sm_90/reward.rc6.cubin", "sm_90/reward.rc7.cubin", "sm_90/rng.cubin"} <= set(names)
    assert {"sm_90/experience.rc6.cubin", "sm_90/experience.rc7.cubin"} <= set(names)
    entries = json.loads((built_cubins / "manifest.json").read_text())["cubins"]
    rc7 = entries["sm_90/reward.rc7.cubin"]
    assert rc7["defines"] == {"RC_STRIDE": 7} and "-DRC_STRIDE=7" in rc7["flags"]
    assert set(rc7["inputs"]) == {
        "reward.cu",
        "common.cuh",
        "isv.cuh",
        "reduce.cuh",
        "reward_layout.cuh",
    }
    assert rc7["nvcc_version"] == nvcc_mod.nvcc_version()


@pytest.fixture(scope="module")
def built_tree(built_cubins: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A copy of cuda/ and of the session's cubins built from it (the manifest holds content
    hashes, so the copies are as fresh as the originals: test_rebuild_is_incremental checks it)."""
    root = tmp_path_factory.mktemp("tree")
    cuda = shutil.copytree(paths.cuda_dir(), root / "cuda")
    out = shutil.copytree(built_cubins, root / "cubins")
    return cuda, out


@pytest.fixture
def tree(built_tree: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """A private copy of built_tree for a test to edit (the manifest holds content hashes, so a
    copy is as fresh as the original)."""
    cuda, out = (shutil.copytree(p, tmp_path / p.name) for p in built_tree)
    return cuda, out


def test_rebuild_is_incremental(tree: tuple[Path, Path]) -> None:
    cuda, out = tree
    again = build(cuda, out, ["90"], **QUIET)
    assert again.built == [] and len(again.fresh) == len(expected_cubins())
    entries = mf.Manifest.load(out).cubins
    users = sorted(rel for rel, e in entries.items() if "reward_layout.cuh" in e["inputs"])
    assert users == [f"sm_90/{s}.rc{k}.cubin" for s in ("experience", "reward") for k in (6, 7)]
    (cuda / "reward_layout.cuh").write_text(
        (cuda / "reward_layout.cuh").read_text() + "\n// edit\n"
    )
    after_header = build(cuda, out, ["90"], **QUIET)
    assert sorted(rel for rel, _ in after_header.built) == users
    assert all("reward_layout.cuh" in why for _, why in after_header.built)


def _require(cuda: Path, out: Path, stem: str = "reward", stride: int = 7) -> Path:
    return mf.require_fresh(out, cuda, stems()[stem], {"RC_STRIDE": stride}, "90")


def test_fresh_cubin_is_accepted(tree: tuple[Path, Path]) -> None:
    cuda, out = tree
    assert _require(cuda, out) == out / "sm_90" / "reward.rc7.cubin"


def test_stale_cubin_is_refused_naming_file_and_command(tree: tuple[Path, Path]) -> None:
    cuda, out = tree
    (cuda / "common.cuh").write_text((cuda / "common.cuh").read_text() + "\n// edit\n")
    with pytest.raises(CubinError) as err:
        _require(cuda, out)
    msg = str(err.value)
    assert str(out / "sm_90" / "reward.rc7.cubin") in msg
    assert "sources changed since it was built: common.cuh" in msg
    assert "run `make cubins`" in msg


def test_missing_cubin_is_refused(tree: tuple[Path, Path]) -> None:
    cuda, out = tree
    (out / "sm_90" / "rng.cubin").unlink()
    with pytest.raises(CubinError, match=r"rng.cubin: missing; run `make cubins`"):
        mf.require_fresh(out, cuda, stems()["rng"], {}, "90")
    with pytest.raises(
        CubinError, match=r"sm_100/reward.rc7.cubin: missing; run `make cubins ARCHS=100`"
    ):
        mf.require_fresh(out, cuda, stems()["reward"], {"RC_STRIDE": 7}, "100")


def test_hand_modified_cubin_is_refused(tree: tuple[Path, Path]) -> None:
    cuda, out = tree
    cubin = out / "sm_90" / "reward.rc6.cubin"
    cubin.write_bytes(cubin.read_bytes() + b"\0")
    with pytest.raises(CubinError, match="modified after it was built"):
        _require(cuda, out, stride=6)


@pytest.mark.slow
def test_changed_flags_make_a_cubin_stale(tree: tuple[Path, Path], monkeypatch) -> None:
    cuda, out = tree
    monkeypatch.setattr(nvcc_mod, "BASE_FLAGS", (*nvcc_mod.BASE_FLAGS, "-DEXTRA=1"))
    with pytest.raises(CubinError, match="built with flags"):
        _require(cuda, out)
    assert len(build(cuda, out, ["90"], **QUIET).built) == len(expected_cubins())


def test_unknown_stride_is_refused(tree: tuple[Path, Path]) -> None:
    cuda, out = tree
    with pytest.raises(ValueError, match="RC_STRIDE=8 is not one of"):
        _require(cuda, out, stride=8)


def test_nvcc_error_is_reported_and_keeps_the_old_cubin(tree: tuple[Path, Path]) -> None:
    cuda, out = tree
    before = (out / "sm_90" / "rng.cubin").read_bytes()
    (cuda / "rng.cu").write_text((cuda / "rng.cu").read_text() + "\nthis is not C++;\n")
    report = build(cuda, out, ["90"], **QUIET)
    assert [rel for rel, _ in report.failed] == ["sm_90/rng.cubin"]
    assert "nvcc failed on" in report.failed[0][1] and "rng.cu" in report.failed[0][1]
    assert (out / "sm_90" / "rng.cubin").read_bytes() == before
    with pytest.raises(CubinError, match="sources changed"):
        mf.require_fresh(out, cuda, stems()["rng"], {}, "90")


@pytest.mark.slow
def test_cli_builds_and_reports(nvcc: str, tmp_path: Path, capsys) -> None:
    assert main(["--arch", "90", "--out", str(tmp_path)]) == 0
    count = len(expected_cubins())
    assert f"{count} built, 0 up to date, 0 failed" in capsys.readouterr().out
    assert main(["--arch", "90", "--out", str(tmp_path)]) == 0
    assert f"0 built, {count} up to date" in capsys.readouterr().out
