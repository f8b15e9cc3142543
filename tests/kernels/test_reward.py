"""reward_diagnostics on the GPU against its NumPy oracle, for both strides, odd sizes and sizes
about its blocks of REWARD_ROWS = 512 envs: each ISV slot group, the decomposition, the skips."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.kernels import reward
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.reference import reward as ref

pytestmark = pytest.mark.gpu

SIZES = (1, 31, 32, 33, 511, 512, 513, 1000, 4097, 65537)
ISV_SIZE = 80
# alpha, 6 component EMAs, the aux-align EMA, 6 abs EMAs, 6 ratios
SLOTS = {"ema_idx": 40, "aux_ema_idx": 50, "abs_idx": 56, "ratio_idx": 64, "alpha_idx": 3}
GROUPS = ("ema_idx", "aux_ema_idx", "abs_idx", "ratio_idx")  # the slot indices -1 skips
# float32 partial sums over n rows against a float64 mean: error ~ sqrt(n) * eps * |rc|
TOL = {"rtol": 1e-5, "atol": 3e-6}


def _case(n: int, stride: int, seed: int) -> dict[str, np.ndarray]:
    """Host inputs over n envs (rc with zeros in it, every position before the step) and an ISV."""
    gen = np.random.default_rng(seed * 100_003 + n)
    rc = gen.normal(0.0, 2.0, size=n * stride).astype(np.float32)
    rc[::5] = 0.0
    rew = gen.normal(size=n).astype(np.float32)
    prev_dir = gen.integers(-1, 2, size=n).astype(np.int32)
    if n > 100:
        prev_dir[prev_dir == -1] = 0  # an empty row must come back as zeros
    isv = gen.uniform(0.1, 1.0, size=ISV_SIZE).astype(np.float32)
    isv[SLOTS["alpha_idx"]] = 0.3
    return {"rc": rc, "reward": rew, "prev_dir": prev_dir, "isv": isv}


def _written(slots: dict, stride: int) -> np.ndarray:
    """The ISV slots reward_diagnostics writes with these slot indices (-1: its group skipped;
    the aux-align EMA at stride 7 only; the ratios only with the abs EMAs)."""
    idx: list[int] = []
    if slots["ema_idx"] >= 0:
        idx += range(slots["ema_idx"], slots["ema_idx"] + ref.RC_CORE)
    if ref.has_aux_align(stride) and slots["aux_ema_idx"] >= 0:
        idx.append(slots["aux_ema_idx"])
    if slots["abs_idx"] >= 0:
        idx += range(slots["abs_idx"], slots["abs_idx"] + ref.RC_CORE)
        if slots["ratio_idx"] >= 0:
            idx += range(slots["ratio_idx"], slots["ratio_idx"] + ref.RC_CORE)
    return np.array(sorted(idx), dtype=np.int64)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32)


def _bind(cuda_backend, stride: int):
    return KernelRuntime(cuda_backend, {"RC_STRIDE": stride}).bind(reward.DIAGNOSTICS)


def _scratch(cuda_backend, n: int, stride: int) -> dict:
    """Device scratch of a launch over n envs: zeroed per-block sums and blocks-done counter."""
    partial = np.zeros(ref.blocks(n) * ref.block_sums(stride), np.float32)
    return {"partial": cuda_backend.upload(partial),
            "done": cuda_backend.upload(np.zeros(1, np.uint64))}  # fmt: skip


def _launch(kernel, cuda_backend, host: dict, scratch: dict, n: int, slots: dict, stride: int):
    """One launch on device copies of `host` (isv None: NULL) with diag poisoned; every array
    after it, downloaded. Checks that the launch left its blocks-done counter at 0."""
    dev = {name: None if a is None else cuda_backend.upload(a) for name, a in host.items()}
    diag = np.full(ref.DECOMP_ROWS * ref.decomp_cols(stride), np.nan, np.float32)
    dev["diag"] = cuda_backend.upload(diag)
    kernel(**dev, **scratch, n=n, **slots)
    assert cuda_backend.download(scratch["done"]).tolist() == [0], "done not reset"
    return {name: None if a is None else cuda_backend.download(a) for name, a in dev.items()}


def _oracle(host: dict, n: int, slots: dict, stride: int) -> dict:
    want = {name: None if a is None else a.copy() for name, a in host.items()}
    want["diag"] = np.full(ref.DECOMP_ROWS * ref.decomp_cols(stride), np.nan, np.float32)
    scratch = {"partial": np.zeros(ref.blocks(n) * ref.block_sums(stride), np.float32),
               "done": np.zeros(1, np.uint64)}  # fmt: skip
    ref.reward_diagnostics(**want, **scratch, n=n, **slots, rc_stride=stride)
    return want


def _check(got: dict, host: dict, n: int, slots: dict, stride: int) -> dict:
    """`got` against the oracle: the written slots and diag within TOL, every other ISV slot
    bit-identical to before the launch. Returns the oracle's arrays."""
    want = _oracle(host, n, slots, stride)
    written = _written(slots, stride)
    left = np.setdiff1d(np.arange(ISV_SIZE), written)
    np.testing.assert_array_equal(_bits(got["isv"][left]), _bits(host["isv"][left]))
    np.testing.assert_allclose(got["isv"][written], want["isv"][written], **TOL)
    np.testing.assert_allclose(got["diag"], want["diag"], **TOL)
    return want


@pytest.mark.parametrize("stride", [6, 7])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("seed", [0, 1])
def test_reward_diagnostics_matches_reference(cuda_backend, stride: int, n: int, seed: int) -> None:
    kernel, host = _bind(cuda_backend, stride), _case(n, stride, seed)
    scratch = _scratch(cuda_backend, n, stride)
    got = _launch(kernel, cuda_backend, host, scratch, n, SLOTS, stride)
    want = _check(got, host, n, SLOTS, stride)
    aux = SLOTS["aux_ema_idx"]  # stride 6: among the slots left bit-identical; stride 7: written
    assert (got["isv"][aux] != host["isv"][aux]) == (stride == 7)
    table = got["diag"].reshape(ref.DECOMP_ROWS, ref.decomp_cols(stride))
    np.testing.assert_array_equal(table[:, 0], want["diag"][:: ref.decomp_cols(stride)])  # counts
    if n > 100:
        assert table[2].tolist() == [0.0] * table.shape[1]  # no short env: the row all zeros
    # the same launch again on the same scratch (partial now holds the last launch's sums)
    again = _launch(kernel, cuda_backend, host, scratch, n, SLOTS, stride)
    for name in ("isv", "diag"):
        np.testing.assert_array_equal(_bits(again[name]), _bits(got[name]), err_msg=name)


@pytest.mark.parametrize("stride", [6, 7])
@pytest.mark.parametrize("n", [33, 1000])
def test_null_isv_writes_only_diag(cuda_backend, stride: int, n: int) -> None:
    kernel, host = _bind(cuda_backend, stride), _case(n, stride, 2) | {"isv": None}
    got = _launch(kernel, cuda_backend, host, _scratch(cuda_backend, n, stride), n, SLOTS, stride)
    assert kernel.launches == 1 and got["isv"] is None
    for name in ("rc", "reward", "prev_dir"):
        np.testing.assert_array_equal(got[name], host[name], err_msg=name)
    np.testing.assert_allclose(got["diag"], _oracle(host, n, SLOTS, stride)["diag"], **TOL)


@pytest.mark.parametrize("stride", [6, 7])
def test_no_envs_change_no_slot_and_write_a_zero_diag(cuda_backend, stride: int) -> None:
    kernel, host = _bind(cuda_backend, stride), _case(4, stride, 3)  # 4 envs there, n=0
    got = _launch(kernel, cuda_backend, host, _scratch(cuda_backend, 0, stride), 0, SLOTS, stride)
    assert kernel.launches == 1  # one block, which writes diag
    np.testing.assert_array_equal(_bits(got["isv"]), _bits(host["isv"]))
    assert got["diag"].tolist() == [0.0] * got["diag"].size


@pytest.mark.parametrize("stride", [6, 7])
@pytest.mark.parametrize("n", [33, 513, 4097])
@pytest.mark.parametrize("skip", [*GROUPS, "all"])
def test_a_negative_slot_index_skips_its_group(
    cuda_backend, stride: int, n: int, skip: str
) -> None:
    """ema_idx, aux_ema_idx, abs_idx (and with it the ratios) or ratio_idx -1: those slots left,
    the other groups and diag as without the skip; "all": only diag written."""
    slots = SLOTS | {g: -1 for g in GROUPS if skip in (g, "all")}
    kernel, host = _bind(cuda_backend, stride), _case(n, stride, 4)
    got = _launch(kernel, cuda_backend, host, _scratch(cuda_backend, n, stride), n, slots, stride)
    _check(got, host, n, slots, stride)
