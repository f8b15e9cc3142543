"""The per_* kernels on the GPU against their oracles, and the Replay's sampling law on the GPU."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from alpha_rl.kernels import per
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.reference import per as ref
from tests.helpers import by_name

pytestmark = pytest.mark.gpu

H = 5


def _run(cuda_backend, decl, host: dict, scalars: list) -> dict:
    """Launch `decl` on uploads of `host` (None stays NULL); return every array downloaded."""
    dev = {k: None if v is None else cuda_backend.upload(v) for k, v in host.items()}
    pointers = [dev[a.name] for a in decl.args if a.is_pointer]
    KernelRuntime(cuda_backend, {}).bind(decl)(**by_name(decl, *pointers, *scalars))
    return {k: None if v is None else cuda_backend.download(v) for k, v in dev.items()}


def _oracle(fn, decl, host: dict, scalars: list) -> dict:
    want = {k: None if v is None else v.copy() for k, v in host.items()}
    fn(*(want[a.name] for a in decl.args if a.is_pointer), *scalars)
    return want


@pytest.mark.parametrize("n", [1, 31, 1024, 1025, 70000])
@pytest.mark.parametrize(("given_priority", "discounts"), [(False, False), (True, False),
                                                           (False, True)])  # fmt: skip
def test_per_push_matches_reference(cuda_backend, n: int, given_priority: bool,
                                    discounts: bool) -> None:  # fmt: skip
    gen = np.random.default_rng(n)
    N = 1 << 17
    state = np.zeros(ref.STATE_WORDS, np.uint64)
    state[ref.HEAD] = N * 3 - 5000  # the push wraps around the ring
    state[ref.TAG] = 41
    host = {
        "flags": (gen.random(n) < 0.7).astype(np.uint8),
        "h_t": gen.normal(size=n * H).astype(np.float32),
        "h_tp1": gen.normal(size=n * H).astype(np.float32),
        "action": gen.integers(0, 3, size=n).astype(np.int32),
        "reward": gen.normal(size=n).astype(np.float32),
        "done": (gen.random(n) < 0.1).astype(np.float32),
        "priority": gen.uniform(0.1, 5, size=n).astype(np.float32) if given_priority else None,
        "discount": gen.uniform(0.9, 1, size=n).astype(np.float32) if discounts else None,
        "max_leaf": np.array([2.5], np.float32),
        "isv": np.array([9.0, 0.6], np.float32),  # alpha at isv[1]
        "s_h_t": gen.normal(size=N * H).astype(np.float32),
        "s_h_tp1": gen.normal(size=N * H).astype(np.float32),
        "s_action": np.full(N, -9, np.int32),
        "s_reward": np.full(N, np.nan, np.float32),
        "s_done": np.full(N, np.nan, np.float32),
        "s_synthetic": np.full(N, 7, np.uint8),
        "leaves": gen.random(N).astype(np.float32),
        "s_discount": np.full(N, np.nan, np.float32) if discounts else None,
        "slot_out": np.full(n, -7, np.int32),
        "state": state,
        "lookback": np.full(-(-n // 256), (40 << 32) | 123, np.uint64),  # stale words
    }
    host["lookback"][1::2] = ((41 | 0x80000000) << 32) | 77  # a block count of the last launch
    scalars = [n, H, N - 1, 1, 1]
    want = _oracle(ref.per_push, per.PUSH, host, scalars)
    got = _run(cuda_backend, per.PUSH, host, scalars)
    for name in ("s_h_t", "s_h_tp1", "s_action", "s_reward", "s_done", "s_synthetic", "slot_out",
                 "state", "lookback", *(("s_discount",) if discounts else ())):  # fmt: skip
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    if given_priority:  # powf against numpy's power
        np.testing.assert_allclose(got["leaves"], want["leaves"], rtol=2e-7)
    else:
        np.testing.assert_array_equal(got["leaves"], want["leaves"])


@pytest.mark.parametrize("log2", [5, 10, 17, 20])
def test_per_tree_reduce_matches_reference(cuda_backend, log2: int) -> None:
    gen = np.random.default_rng(log2)
    N = 1 << log2
    leaves = gen.exponential(size=N).astype(np.float32)
    leaves[gen.random(N) < 0.3] = 0.0
    layout, _ = ref.tree_layout(N)
    in_sum, in_max, n_in = leaves, None, N
    for level in range(1, int(layout[0]) + 1):
        n_out = int(layout[2 * level])
        host = {"in_sum": in_sum, "in_max": in_max, "out_sum": np.full(n_out, np.nan, np.float32),
                "out_max": np.full(n_out, np.nan, np.float32)}  # fmt: skip
        want = _oracle(ref.per_tree_reduce, per.TREE_REDUCE, host, [n_in, n_out])
        got = _run(cuda_backend, per.TREE_REDUCE, host, [n_in, n_out])
        np.testing.assert_array_equal(got["out_sum"], want["out_sum"], err_msg=f"level {level}")
        np.testing.assert_array_equal(got["out_max"], want["out_max"])
        in_sum, in_max, n_in = want["out_sum"], want["out_max"], n_out


def _tree(leaves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    layout, size = ref.tree_layout(len(leaves))
    tree, tree_max = np.zeros(size, np.float32), np.zeros(size, np.float32)
    in_sum, in_max, n_in = leaves, None, len(leaves)
    for level in range(1, int(layout[0]) + 1):
        offset, n_out = int(layout[2 * level - 1]), int(layout[2 * level])
        ref.per_tree_reduce(in_sum, in_max, tree[offset:], tree_max[offset:], n_in, n_out)
        in_sum, in_max, n_in = (
            tree[offset : offset + n_out],
            tree_max[offset : offset + n_out],
            n_out,
        )
    return layout, tree


@pytest.mark.parametrize("M", [1, 31, 512, 4096])
@pytest.mark.parametrize(("log2", "fill", "kind"), [
    (20, 1.0, "random"), (17, 0.4, "random"), (10, 1.0, "sparse"), (12, 1.0, "zeros"),
    (12, 0.0, "empty"), (24, 1.0, "random"),
])  # fmt: skip
def test_per_sample_matches_reference(cuda_backend, M: int, log2: int, fill: float, kind: str):
    gen = np.random.default_rng(M + log2)
    N = 1 << log2
    size = int(N * fill)
    leaves = np.zeros(N, np.float32)
    if kind == "random":
        leaves[:size] = gen.exponential(size=size) ** 2
    elif kind == "sparse":
        leaves[gen.choice(size, 7, replace=False)] = gen.random(7) + 0.1
    layout, tree = _tree(leaves)
    state = np.zeros(ref.STATE_WORDS, np.uint64)
    state[ref.HEAD], state[ref.SAMPLE_EPOCH] = size, 37
    host = {"leaves": leaves, "tree": tree, "layout": layout,
            "indices": np.full(M, -9, np.int32), "weights": np.full(M, np.nan, np.float32),
            "probs": np.full(M, np.nan, np.float32), "state": state,
            "isv": np.array([0, 0, 0, 0, 0, 0.4, 100.0, 0], np.float32),
            "run_seed": np.array([1234], np.uint64)}  # fmt: skip
    scalars = [M, N, 5, 3]  # beta0 and the anneal at isv[5:7]; beta into isv[3]
    want = _oracle(ref.per_sample, per.SAMPLE, host, scalars)
    got = _run(cuda_backend, per.SAMPLE, host, scalars)
    bad = np.flatnonzero(got["indices"] != want["indices"])
    assert bad.size == 0, f"{bad.size} indices differ, first {bad[:5]}: {got['indices'][bad[:5]]}"
    for name in ("probs", "state", "isv"):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    np.testing.assert_allclose(got["weights"], want["weights"], rtol=2e-6)
    if kind == "random":
        assert got["indices"].max() < size and leaves[got["indices"]].min() > 0


@pytest.mark.parametrize("M", [1, 31, 512, 4096])
def test_per_update_matches_reference(cuda_backend, M: int) -> None:
    gen = np.random.default_rng(M)
    N = 1 << 12
    idx = gen.integers(-1, N // 8, size=M).astype(np.int32)  # many repeats, some invalid
    host = {
        "indices": idx,
        "delta": gen.normal(0, 3, size=M).astype(np.float32),
        "leaves": gen.random(N).astype(np.float32),
        "isv": np.array([1e-6, 7.0, 0.6], np.float32),  # eps at isv[0], alpha at isv[2]
        "max_leaf": np.array([0.5], np.float32),
    }
    scalars = [M, 2, 0]
    want = _oracle(ref.per_update, per.UPDATE, host, scalars)
    got = _run(cuda_backend, per.UPDATE, host, scalars)
    touched = np.zeros(N, bool)
    touched[idx[idx >= 0]] = True
    np.testing.assert_array_equal(got["leaves"][~touched], want["leaves"][~touched])
    np.testing.assert_allclose(got["leaves"][touched], want["leaves"][touched], rtol=2e-7)
    np.testing.assert_allclose(got["max_leaf"], want["max_leaf"], rtol=2e-7)


def test_replay_sampling_law_on_the_gpu(cuda_backend) -> None:
    from tests.test_replay import make_replay, rows

    rp = make_replay(cuda_backend, 6, batch=512, alpha=0.7)
    rp.push(*rows(cuda_backend, 0, 64))
    delta = np.random.default_rng(1).uniform(0.01, 5.0, size=64).astype(np.float32)
    rp.update(cuda_backend.upload(np.arange(64, dtype=np.int32)), cuda_backend.upload(delta))
    rp.rebuild()
    counts = np.zeros(64)
    for _ in range(400):
        counts += np.bincount(cuda_backend.download(rp.sample()[0]), minlength=64)
    expected = (delta + 1e-6) ** 0.7
    expected = expected / expected.sum() * counts.sum()
    assert ((counts - expected) ** 2 / expected).sum() < stats.chi2.ppf(1 - 1e-6, df=63)
    assert int(rp.read_state()[ref.SAMPLE_EPOCH]) == 400
