"""The array interface on the numpy backend, and choosing a backend."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.backend.select import open_backend, probe_gpu
from alpha_rl.errors import BackendError


def test_numpy_backend_array_interface() -> None:
    be = NumpyBackend()
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    dev = be.upload(host)
    host[0, 0] = 99.0
    assert be.download(dev)[0, 0] == 0.0, "upload must copy"
    be.fill(dev, 2.5)
    assert be.download(dev).tolist() == [[2.5] * 3] * 2
    zeros = be.zeros((4,), np.int32)
    assert zeros.dtype == np.int32 and zeros.tolist() == [0] * 4
    assert be.alloc(5, np.uint8).shape == (5,)
    assert be.is_array(dev) and not be.is_array([1, 2])
    down = be.download(dev)
    down[0, 0] = -1
    assert be.download(dev)[0, 0] == 2.5, "download must copy"


def no_problems(arch: str) -> list[str]:
    return []


def test_copy_is_the_source_and_refuses_another_size_or_dtype() -> None:
    be = NumpyBackend()
    src, dst = be.upload(np.arange(6, dtype=np.float32)), be.zeros(6, np.float32)
    be.copy(dst, src)
    src[0] = 99.0  # a copy, not a view
    assert be.download(dst).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    with pytest.raises(ValueError, match="destination 5 x float32 and source 6 x float32"):
        be.copy(be.zeros(5, np.float32), src)
    with pytest.raises(ValueError, match="destination 6 x int32 and source 6 x float32"):
        be.copy(be.zeros(6, np.int32), src)


def test_explicit_numpy_choice() -> None:
    backend, reason = open_backend("numpy", cubin_problems=no_problems)
    assert backend.name == "numpy" and reason == "backend=numpy"


def test_unknown_choice_is_refused() -> None:
    with pytest.raises(BackendError, match="backend='tpu' is not one of auto, cuda, numpy"):
        open_backend("tpu", cubin_problems=no_problems)


@pytest.mark.skipif(
    importlib.util.find_spec("pycuda") is not None, reason="pycuda is installed here"
)
def test_auto_without_pycuda_picks_numpy_and_says_why(caplog) -> None:
    caplog.set_level("INFO")
    backend, reason = open_backend("auto", cubin_problems=no_problems)
    assert backend.name == "numpy"
    assert reason.startswith("auto: pycuda is not installed")
    assert "backend: numpy (auto: pycuda is not installed" in caplog.text
    assert not probe_gpu().usable


@pytest.mark.skipif(
    importlib.util.find_spec("pycuda") is not None, reason="pycuda is installed here"
)
def test_explicit_cuda_without_pycuda_fails_with_what_to_do() -> None:
    with pytest.raises(BackendError, match=r"backend=cuda: pycuda is not installed.*\.\[gpu\]"):
        open_backend("cuda", cubin_problems=no_problems)
