"""The cuda backend: arrays, cubin loading with build-info checks, one context per process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from alpha_rl import paths
from alpha_rl.build.contract import ABI_VERSION
from alpha_rl.errors import BackendError, CubinError
from alpha_rl.kernels import reward
from alpha_rl.kernels.registry import stems
from alpha_rl.kernels.runtime import KernelRuntime

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    ("dtype", "value"),
    [
        (np.float32, -1.25),
        (np.int32, -7),
        (np.uint32, 0xDEADBEEF),
        (np.uint8, 200),
        (np.float16, 0.5),
        (np.float64, 3.5),
        (np.int64, -(2**40)),
    ],
)
def test_array_interface(cuda_backend, dtype, value) -> None:
    host = np.arange(37).astype(dtype)
    dev = cuda_backend.upload(host)
    np.testing.assert_array_equal(cuda_backend.download(dev), host)
    cuda_backend.fill(dev, value)
    np.testing.assert_array_equal(cuda_backend.download(dev), np.full(37, value, dtype=dtype))
    zeros = cuda_backend.zeros((3, 5), dtype)
    assert zeros.shape == (3, 5) and not cuda_backend.download(zeros).any()
    assert cuda_backend.is_array(dev) and not cuda_backend.is_array(host)


def test_second_backend_in_the_process_is_refused(cuda_backend) -> None:
    from alpha_rl.backend.cuda import CudaBackend

    with pytest.raises(BackendError, match="one CUDA context per process"):
        CudaBackend()


def test_loaded_cubins_report_their_stride(cuda_backend) -> None:
    for stride in (6, 7):
        runtime = KernelRuntime(cuda_backend, {"RC_STRIDE": stride})
        module = runtime._module(stems()["reward"])
        assert cuda_backend.module_constant_i32(module, "alpha_rl_axis_RC_STRIDE") == stride
        assert cuda_backend.module_constant_i32(module, "alpha_rl_abi") == ABI_VERSION


def test_cubin_of_the_wrong_stride_is_refused_at_load(cuda_backend, tmp_path: Path) -> None:
    # a cubin that passes the manifest check but was compiled for the other stride
    cubins = tmp_path / "cubins"
    shutil.copytree(paths.default_cubin_dir(), cubins)
    arch_dir = cubins / f"sm_{cuda_backend.arch}"
    shutil.copy(arch_dir / "reward.rc6.cubin", arch_dir / "reward.rc7.cubin")
    manifest = json.loads((cubins / "manifest.json").read_text())
    key = f"sm_{cuda_backend.arch}/reward.rc7.cubin"
    manifest["cubins"][key]["cubin_sha256"] = manifest["cubins"][key.replace("rc7", "rc6")][
        "cubin_sha256"
    ]
    (cubins / "manifest.json").write_text(json.dumps(manifest))
    runtime = KernelRuntime(cuda_backend, {"RC_STRIDE": 7}, cubin_dir=cubins)
    with pytest.raises(
        CubinError, match="compiled with RC_STRIDE=6 but the config needs RC_STRIDE=7"
    ):
        runtime.bind(reward.DIAGNOSTICS)


def _python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=paths.project_root(),
    )


def test_context_is_released_and_can_be_reopened_in_one_process() -> None:
    # what a multirun in one process does: open, work, close, and again; no warnings at exit
    proc = _python("""
        import numpy as np
        from alpha_rl.backend.cuda import CudaBackend
        from alpha_rl.kernels import reward
        from alpha_rl.kernels.runtime import KernelRuntime
        for job in range(3):
            with CudaBackend() as be:
                diagnostics = KernelRuntime(be, {"RC_STRIDE": 7}).bind(reward.DIAGNOSTICS)
                isv = be.upload(np.array([1.0] + [0.0] * 7, np.float32))
                # 10 flat envs; diag 3 rows of 4 + 7, partial one block's 6 + 7 + 33 sums
                diagnostics(rc=be.upload(np.ones(70, np.float32)),
                            reward=be.upload(np.ones(10, np.float32)),
                            prev_dir=be.upload(np.zeros(10, np.int32)), isv=isv,
                            diag=be.zeros(33, np.float32), partial=be.zeros(46, np.float32),
                            done=be.zeros(1, np.uint64), n=10, ema_idx=1, aux_ema_idx=-1,
                            abs_idx=-1, ratio_idx=-1, alpha_idx=0)
                assert be.download(isv)[1:7].tolist() == [1.0] * 6
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
    assert proc.stderr == "", proc.stderr


def test_train_with_auto_picks_cuda_here(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "alpha_rl.train",
            "backend=auto",
            "debug=tiny",
            f"hydra.run.dir={tmp_path}",
            f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=paths.project_root(),
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "backend: cuda (auto: GPU, pycuda and fresh cubins present;" in out
    assert "run FINISHED after 40 steps" in out
