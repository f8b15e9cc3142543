"""The ways this machine can compute the numpy backend's floats differently, each as an
environment for a run in a process of its own: every OpenBLAS kernel the CPU can run
(OPENBLAS_CORETYPE, read when OpenBLAS loads) and NumPy with its SIMD dispatch turned off
(NPY_DISABLE_CPU_FEATURES). A run must give the same figures under each (alpha_rl.portable)."""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

# the kernels to force, each with the CPU flags (/proc/cpuinfo) it needs to run
KERNELS = {
    "Prescott": {"pni"},
    "Nehalem": {"ssse3", "sse4_1", "sse4_2", "popcnt"},
    "Sandybridge": {"avx"},
    "Haswell": {"avx2", "fma"},
    "Zen": {"avx2", "fma"},
}
NATIVE = "native"
NO_SIMD = "numpy SIMD off"
SETTINGS = [NATIVE, *KERNELS, NO_SIMD]
# each run keeps one BLAS thread: the figures do not depend on it (the fixture was written with
# the BLAS's own threads), and runs side by side under xdist do not oversubscribe the cores
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((x for x in text.splitlines() if x.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


@functools.cache
def _blas_of(coretype: str | None) -> dict:
    """NumPy's BLAS in a fresh process with OPENBLAS_CORETYPE=coretype: {'api', 'kernel'} as
    threadpoolctl reads them (kernel None where threadpoolctl is missing)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    probe = (
        "import json, numpy\n"
        "try:\n    import threadpoolctl\nexcept ImportError:\n    threadpoolctl = None\n"
        "info = [i for i in (threadpoolctl.threadpool_info() if threadpoolctl else [])\n"
        "        if i.get('user_api') == 'blas']\n"
        "cfg = numpy.show_config(mode='dicts')['Build Dependencies']['blas']\n"
        "print(json.dumps({'api': info[0]['internal_api'] if info else cfg.get('name', ''),\n"
        "                  'kernel': info[0].get('architecture') if info else None}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    return json.loads(done.stdout)


def _simd_targets() -> list[str]:
    """NumPy's SIMD dispatch targets this CPU runs (what NPY_DISABLE_CPU_FEATURES turns off)."""
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    return [name for name in __cpu_dispatch__ if __cpu_features__.get(name)]


def environment(setting: str) -> tuple[dict[str, str] | None, str]:
    """(the environment to add for `setting`, or None where this machine cannot apply it or
    it adds nothing here; why, or what it is)."""
    env, what = _environment(setting)
    return (None if env is None else {**ONE_THREAD, **env}), what


def _environment(setting: str) -> tuple[dict[str, str] | None, str]:
    if setting == NATIVE:
        return {}, f"NumPy's own BLAS kernel ({_blas_of(None)['kernel'] or 'as found'})"
    if setting == NO_SIMD:
        targets = _simd_targets()
        if not targets:
            return None, "NumPy runs no SIMD dispatch target on this CPU"
        return {"NPY_DISABLE_CPU_FEATURES": " ".join(targets)}, f"without {', '.join(targets)}"
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None, f"OpenBLAS's {setting} kernel is an x86-64 one"
    if "openblas" not in _blas_of(None)["api"].lower():
        return None, f"NumPy's BLAS here is {_blas_of(None)['api']}, not OpenBLAS"
    missing = KERNELS[setting] - _cpu_flags()
    if missing:
        return None, f"this CPU lacks {', '.join(sorted(missing))} for the {setting} kernel"
    kernel = _blas_of(setting)["kernel"]
    same = [other for other in (None, *KERNELS) if other != setting
            and (other is None or not KERNELS[other] - _cpu_flags())
            and _blas_of(other)["kernel"] == kernel and SETTINGS.index(other or NATIVE)
            < SETTINGS.index(setting)]  # fmt: skip
    if kernel is not None and same:
        return None, f"OPENBLAS_CORETYPE={setting} runs the {kernel} kernel, as {same[0] or NATIVE}"
    return {"OPENBLAS_CORETYPE": setting}, f"OpenBLAS's {kernel or setting} kernel"
