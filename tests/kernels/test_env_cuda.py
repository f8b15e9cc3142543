"""The environment on the cuda backend: the hand ledger, and equal to the numpy backend."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from alpha_rl.backend.numpy import NumpyBackend
from tests.test_env import (
    VARIANT,
    check_ledger,
    check_rules_ledger,
    check_session_ledger,
    make_env,
    random_book,
)

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("stride", [6, 7])
def test_ledger_cuda(cuda_backend, stride: int) -> None:
    check_ledger(cuda_backend, stride)


def test_session_ledger_cuda(cuda_backend) -> None:
    check_session_ledger(cuda_backend)


def test_rules_ledger_cuda(cuda_backend) -> None:
    check_rules_ledger(cuda_backend)


@pytest.mark.parametrize(
    "variant",
    ["reward=stride6", "reward=stride7", "beta=active", "sessions", "env.decision_interval=3"],
)
def test_environment_runs_identically_on_both_backends(cuda_backend, variant: str) -> None:
    book, gen = random_book(11, T=500), np.random.default_rng(12)
    if variant == "sessions":  # forced closes at every session's end
        book, variant = (
            dataclasses.replace(book, breaks=[40, 41, 120, 300, 301, 302]),
            "beta=active",
        )
    overrides = [*VARIANT, "env.num_envs=1000", variant]
    envs = [make_env(be, book, overrides, seed=4) for be in (NumpyBackend(), cuda_backend)]
    aux = gen.random(1000).astype(np.float32)
    h = [be.alloc(1000 * envs[0].obs_dim, np.float32) for be in (envs[0].backend, cuda_backend)]
    for step in range(700):  # crosses the end of the data: forced closes and restarts
        actions = gen.integers(0, 3, size=1000).astype(np.int32)
        for env, out in zip(envs, h, strict=True):
            env.perceive(out)
            env.step(env.backend.upload(actions), env.backend.upload(aux))
            env.reward_diagnostics()
        for name in ("rc", "reward", "done", "cursor", "pos", "episode", "peak_mid"):
            a, b = (e.backend.download(e.arrays[name]) for e in envs)
            np.testing.assert_array_equal(a, b, err_msg=f"{name} at step {step}")
        np.testing.assert_allclose(*(e.backend.download(x) for e, x in zip(envs, h, strict=True)),
                                   rtol=2e-6, atol=2e-7)  # fmt: skip
    isv = [e.isv.read() for e in envs]
    np.testing.assert_allclose(isv[0], isv[1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(envs[0].read_decomp(), envs[1].read_decomp(), rtol=1e-5, atol=1e-5)
    stats = [e.harvest_trade_stats() for e in envs]
    assert stats[0].trades == stats[1].trades > 0
    assert stats[0].realised == pytest.approx(stats[1].realised, rel=1e-6)
