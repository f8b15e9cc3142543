"""The prioritized replay on the numpy backend: push order, tree, sampling law, updates, edges.

The same `Replay` runs on the cuda backend in tests/kernels/test_per.py, which also compares every
kernel with its oracle.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from alpha_rl.backend.base import Backend
from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.errors import ConfigError, ReplayError
from alpha_rl.isv import DeviceIsv, numbers_isv
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.pipeline.configure.config import layout_from_config
from alpha_rl.pipeline.configure.parts import replay_numbers
from alpha_rl.reference.per import tree_layout
from alpha_rl.replay import Replay, ReplayConfig
from tests.helpers import compose_fixed, compose_train

H = 3


def make_replay(
    backend: Backend,
    log2: int,
    batch: int = 8,
    alpha: float = 1.0,
    beta0: float = 0.5,
    max_push: int | None = None,
    seed: int = 0,
    isv: DeviceIsv | None = None,
) -> Replay:
    """A replay of N = 2^log2 on `backend` (beta annealed over 10 updates)."""
    cfg = ReplayConfig(log2, alpha, beta0, 10, 1e-6, batch)
    runtime = KernelRuntime(backend, {})
    if isv is None:  # the replay's numbers alone
        isv = numbers_isv(replay_numbers(cfg), backend)
    return Replay(cfg, H, runtime, seed, max_push or (1 << log2), isv)


def rows(backend: Backend, start: int, n: int):
    """n transitions whose fields encode their row number start + r."""
    r = np.arange(start, start + n)
    h = np.repeat(r.astype(np.float32), H)
    up = backend.upload
    return (up(h), up(h + 0.5), up(r.astype(np.int32)), up(r.astype(np.float32) * 2),
            up((r % 2).astype(np.float32)))  # fmt: skip


def read(replay: Replay, name: str) -> np.ndarray:
    return replay.backend.download(replay.arrays[name])


def test_tree_layout() -> None:
    assert tree_layout(1024)[0].tolist() == [1, 0, 1]
    assert tree_layout(2**20)[0].tolist() == [2, 0, 1024, 1024, 1]
    assert tree_layout(2**24)[0].tolist() == [3, 0, 16384, 16384, 16, 16400, 1]
    assert tree_layout(8)[0].tolist() == [1, 0, 1]


def test_push_fills_slots_in_row_order_and_wraps() -> None:
    be = NumpyBackend()
    rp = make_replay(be, 3)  # N = 8
    flags = be.upload(np.array([1, 0, 1, 1, 0, 1], np.uint8))
    slots = be.zeros(6, np.int32)
    rp.push(*rows(be, 0, 6), flags=flags, slot_out=slots)
    assert be.download(slots).tolist() == [0, -1, 1, 2, -1, 3]
    assert read(rp, "s_action")[:4].tolist() == [0, 2, 3, 5]
    rp.push(*rows(be, 10, 6), slot_out=slots)  # 4 + 6 = 10 > 8: wraps onto slots 0, 1
    assert be.download(slots).tolist() == [4, 5, 6, 7, 0, 1]
    assert read(rp, "s_action").tolist() == [14, 15, 3, 5, 10, 11, 12, 13]
    np.testing.assert_array_equal(read(rp, "s_h_tp1").reshape(8, H)[:, 0], [14.5, 15.5, 3.5, 5.5,
                                  10.5, 11.5, 12.5, 13.5])  # fmt: skip
    assert rp.size() == 8 and int(rp.read_state()[0]) == 10
    assert read(rp, "leaves").tolist() == [1.0] * 8, "new transitions get the max priority (1)"
    assert not read(rp, "s_synthetic").any()
    rp.push(*rows(be, 20, 1), synthetic=True)
    assert read(rp, "s_synthetic").tolist() == [0, 0, 1, 0, 0, 0, 0, 0]


def test_new_priority_is_the_largest_updated_priority_so_far() -> None:
    be = NumpyBackend()
    rp = make_replay(be, 2, batch=2)  # N = 4
    rp.push(*rows(be, 0, 4))
    assert be.download(rp.max_leaf)[0] == 0.0  # nothing updated yet: new leaves get 1
    rp.update(be.upload(np.array([0, 1], np.int32)), be.upload(np.array([9.0, 2.0], np.float32)))
    rp.rebuild()
    assert be.download(rp.max_leaf)[0] == pytest.approx(9.0)
    rp.push(*rows(be, 4, 1))  # overwrites slot 0, the one holding 9
    assert read(rp, "leaves")[0] == pytest.approx(9.0)
    rp.update(be.upload(np.array([0, 0], np.int32)), be.upload(np.array([5.0, 0.5], np.float32)))
    rp.rebuild()
    assert be.download(rp.max_leaf)[0] == pytest.approx(9.0)  # the max never goes down
    rp.push(*rows(be, 5, 1), priority=be.upload(np.array([4.0], np.float32)))
    assert read(rp, "leaves")[1] == pytest.approx(4.0)


def test_update_last_occurrence_wins_and_skips_invalid() -> None:
    be = NumpyBackend()
    rp = make_replay(be, 3, batch=5, alpha=0.5)
    rp.push(*rows(be, 0, 8))
    idx = be.upload(np.array([2, 5, 2, -1, 5], np.int32))
    rp.update(idx, be.upload(np.array([3.0, 8.0, 15.0, 99.0, -24.0], np.float32)))
    leaves = read(rp, "leaves")
    assert leaves[2] == pytest.approx(np.sqrt(15.0 + 1e-6)) and leaves[5] == pytest.approx(
        np.sqrt(24.0)
    )
    assert leaves[[0, 1, 3, 4, 6, 7]].tolist() == [1.0] * 6


def test_rebuild_sums_and_max() -> None:
    be = NumpyBackend()
    rp = make_replay(be, 12, batch=4)
    gen = np.random.default_rng(0)
    rp.arrays["leaves"][:] = gen.random(4096).astype(np.float32)
    rp.rebuild()
    tree = read(rp, "tree")
    np.testing.assert_allclose(tree[:4], rp.arrays["leaves"].reshape(4, 1024).sum(1), rtol=1e-6)
    assert rp.total() == pytest.approx(rp.arrays["leaves"].astype(np.float64).sum(), rel=1e-6)
    assert read(rp, "tree_max")[-1] == rp.arrays["leaves"].max()


def test_sampling_frequencies_follow_priority_to_the_alpha() -> None:
    be = NumpyBackend()
    rp = make_replay(be, 6, batch=512, alpha=0.7)
    rp.push(*rows(be, 0, 64))
    gen = np.random.default_rng(1)
    delta = gen.uniform(0.01, 5.0, size=64).astype(np.float32)
    rp.update(be.upload(np.arange(64, dtype=np.int32)), be.upload(delta))
    rp.rebuild()
    counts = np.zeros(64)
    for _ in range(400):  # 204 800 draws
        idx, _ = rp.sample()
        counts += np.bincount(be.download(idx), minlength=64)
    expected_p = (np.abs(delta) + 1e-6) ** 0.7
    expected = expected_p / expected_p.sum() * counts.sum()
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < stats.chi2.ppf(1 - 1e-6, df=63), chi2
    wrong = (np.abs(delta) + 1e-6) ** 1.0  # a tree built without the exponent
    wrong = wrong / wrong.sum() * counts.sum()
    assert ((counts - wrong) ** 2 / wrong).sum() > stats.chi2.ppf(1 - 1e-6, df=63), "must fail"


def test_weights_and_beta_annealing() -> None:
    be = NumpyBackend()
    cfg, choices = compose_fixed(
        ["replay.alpha=1.0", "replay.beta0=0.4", "replay.beta_anneal_updates=10"]
    )  # as make_replay's
    isv = DeviceIsv(layout_from_config(cfg, choices), be)
    rp = make_replay(be, 4, batch=16, alpha=1.0, beta0=0.4, isv=isv)
    rp.push(*rows(be, 0, 16))
    rp.update(
        be.upload(np.arange(16, dtype=np.int32)), be.upload(np.arange(1, 17, dtype=np.float32))
    )
    rp.rebuild()
    betas = []
    for _ in range(12):
        _, w = rp.sample()
        betas.append(float(isv.values("per_beta")[0]))
        p = read(rp, "probs")
        want = (16 * p) ** -betas[-1]
        np.testing.assert_allclose(be.download(w), want / want.max(), rtol=1e-5)
        assert be.download(w).max() == pytest.approx(1.0)
    assert betas[0] == pytest.approx(0.4) and betas[5] == pytest.approx(0.4 + 0.6 * 5 / 10)
    assert betas[10:] == [1.0, 1.0]


def test_zero_priorities_sample_uniformly_and_size_below_m() -> None:
    be = NumpyBackend()
    rp = make_replay(be, 5, batch=64)
    rp.push(*rows(be, 0, 10))
    rp.update(be.upload(np.arange(10, dtype=np.int32)), be.upload(np.zeros(10, np.float32)))
    rp.arrays["leaves"][:] = 0  # eps > 0 normally prevents this; a tree of zeros must still work
    rp.rebuild()
    idx, w = rp.sample()
    idx = be.download(idx)
    assert idx.min() >= 0 and idx.max() < 10
    assert np.bincount(idx, minlength=10).min() >= 6, "stratified uniform: 64 draws, 6 or 7 each"
    assert be.download(w).tolist() == [1.0] * 64


def test_size_below_batch_draws_only_filled_slots() -> None:
    be = NumpyBackend()
    rp = make_replay(be, 8, batch=100)
    rp.push(*rows(be, 0, 5))
    rp.rebuild()
    idx = be.download(rp.sample()[0])
    assert set(idx.tolist()) == {0, 1, 2, 3, 4}
    assert np.bincount(idx).tolist() == [20] * 5, "stratified: equal priorities, equal counts"


def test_empty_buffer_is_a_clear_error() -> None:
    be = NumpyBackend()
    rp = make_replay(be, 4)
    with pytest.raises(ReplayError, match="sample from an empty replay buffer"):
        rp.sample()
    rp.push(*rows(be, 0, 2), flags=be.upload(np.zeros(2, np.uint8)))  # nothing actually pushed
    rp.rebuild()
    idx, w = rp.sample()
    assert be.download(idx).tolist() == [-1] * 8 and not be.download(w).any()
    with pytest.raises(ReplayError, match="sampled while the replay buffer was empty"):
        rp.check()


def test_tree_total_does_not_drift_over_a_million_updates() -> None:
    be = NumpyBackend()
    rp = make_replay(be, 16, batch=512, alpha=0.6)
    rp.push(*rows(be, 0, 1 << 16))
    gen = np.random.default_rng(7)
    for _ in range(1954):  # 1954 * 512 > 10^6 updates, a rebuild after each batch
        idx = gen.integers(0, 1 << 16, size=512).astype(np.int32)
        rp.update(be.upload(idx), be.upload(gen.exponential(2.0, size=512).astype(np.float32)))
        rp.rebuild()
    exact = rp.arrays["leaves"].astype(np.float64).sum()
    # one rebuild sums 2^16 float32 leaves through ~20 rounding steps: |error| < 20 * 2^-24
    assert abs(rp.total() - exact) / exact < 20 * 2.0**-24


def test_config_is_checked() -> None:
    cfg, _ = compose_train(["replay.batch_size=5000"])
    with pytest.raises(ConfigError, match=r"replay\.batch_size=5000 must be a whole number in 1"):
        ReplayConfig.from_cfg(cfg.replay, 1000)
    cfg, _ = compose_train()
    assert ReplayConfig.from_cfg(cfg.replay, 1000).capacity == 2**17
    cfg, _ = compose_train(["scale=gpu"])
    assert ReplayConfig.from_cfg(cfg.replay, 1000).capacity == 2**20
    with pytest.raises(ConfigError, match="needs replay capacity"):
        make_replay(NumpyBackend(), 3, max_push=9)


def test_beta_reaches_one_at_the_last_update_of_the_run_unless_set() -> None:
    from alpha_rl.pipeline.configure.config import plan_run

    for overrides, updates in ((["steps=2000"], 1900), (["scale=gpu", "steps=40000"], 39900),
                               (["steps=600", "agent.updates_per_step=2"], 1000)):  # fmt: skip
        cfg, _ = compose_train(overrides)
        plan = plan_run(cfg)
        assert plan.learner_updates == updates
        # the last update samples at epoch updates - 1: beta0 + (1 - beta0) * epoch / anneal = 1
        assert plan.replay.beta_anneal_updates == updates - 1
        assert plan.resolved_params()["replay.beta_anneal_updates_resolved"] == updates - 1
    cfg, _ = compose_train(["replay.beta_anneal_updates=5000"])
    assert plan_run(cfg).replay.beta_anneal_updates == 5000
    cfg, _ = compose_train(["replay.beta_anneal_updates=0"])
    with pytest.raises(ConfigError, match=r"replay\.beta_anneal_updates=0 must be a whole number"):
        plan_run(cfg)


def test_launch_constants_match_the_cuda_source() -> None:
    import re

    from alpha_rl import paths
    from alpha_rl.reference import per as ref

    text = (paths.cuda_dir() / "per.cu").read_text()
    defined = {k: int(v) for k, v in re.findall(r"#define PER_(\w+) (\d+)", text)}
    assert defined == {"FANOUT": ref.FANOUT, "PUSH_BLOCK": ref.PUSH_BLOCK,
                       "REDUCE_BLOCK": ref.REDUCE_BLOCK, "SAMPLE_BLOCK": ref.SAMPLE_BLOCK,
                       "UPDATE_BLOCK": ref.UPDATE_BLOCK, "MAX_BATCH": ref.MAX_BATCH}  # fmt: skip
