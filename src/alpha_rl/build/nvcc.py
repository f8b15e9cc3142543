"""Running nvcc: locating it, its version, the flags every cubin is built with."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

from alpha_rl.errors import BuildError

# Flags every cubin is compiled with. No fast-math: the NumPy oracles must be able to agree.
# -lineinfo maps SASS back to source lines for compute-sanitizer and profilers at no run-time cost.
BASE_FLAGS: tuple[str, ...] = ("-cubin", "-O3", "-std=c++17", "-lineinfo")
DEFAULT_ARCHS: tuple[str, ...] = ("90",)  # H100 / H200; `make cubins ARCHS="90 100"` adds more


def nvcc_path() -> str:
    """The nvcc to use: $NVCC, else $CUDA_HOME/bin/nvcc, else the one on PATH."""
    explicit = os.environ.get("NVCC")
    if explicit:
        return explicit
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home and (Path(cuda_home) / "bin" / "nvcc").is_file():
        return str(Path(cuda_home) / "bin" / "nvcc")
    found = shutil.which("nvcc")
    if not found:
        raise BuildError(
            "nvcc not found: install the CUDA toolkit, put its bin/ on PATH, "
            "or set NVCC=/path/to/nvcc"
        )
    return found


@cache
def nvcc_version(nvcc: str | None = None) -> str:
    """nvcc's full version, e.g. '13.0.88'."""
    exe = nvcc or nvcc_path()
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"cannot run {exe} --version: {exc}") from exc
    match = re.search(r"V(\d+\.\d+\.\d+)", out)
    if not match:
        raise BuildError(f"cannot read the version from `{exe} --version`:\n{out}")
    return match.group(1)


def flags_for(arch: str, defines: Mapping[str, int]) -> list[str]:
    """The nvcc flags of one cubin: base flags, the target arch and the variant's defines."""
    flags = [*BASE_FLAGS, f"-arch=sm_{arch}"]
    flags += [f"-D{name}={value}" for name, value in sorted(defines.items())]
    return flags


def compile_cubin(
    source: Path, out: Path, flags: Sequence[str], include_dirs: Sequence[Path]
) -> None:
    """Compile `source` into `out` (written atomically: a failed build leaves no partial file)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    cmd = [nvcc_path(), *flags, *(f"-I{d}" for d in include_dirs), "-o", str(tmp), str(source)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(
            f"nvcc failed on {source} (exit {proc.returncode}):\n  {' '.join(cmd)}\n{proc.stderr}"
        )
    os.replace(tmp, out)
