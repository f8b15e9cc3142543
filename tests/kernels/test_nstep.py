"""nstep_accumulate on the GPU: the hand ledger, and random runs audited step by step against
the NumPy oracle (every output, on the GPU's own inputs)."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.kernels import nstep
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.nstep import allocate
from tests.test_nstep import check_break_ledger, check_ledger

pytestmark = pytest.mark.gpu


def test_the_n_step_ledger_on_the_gpu(cuda_backend) -> None:
    check_ledger(cuda_backend)


@pytest.mark.parametrize("n", [1, 3])
def test_a_session_break_ledger_on_the_gpu(cuda_backend, n: int) -> None:
    check_break_ledger(cuda_backend, n)


@pytest.mark.parametrize(("B", "H", "n"), [(1, 5, 2), (33, 32, 3), (5000, 32, 5), (300, 39, 8)])
def test_nstep_accumulate_matches_reference_over_random_steps(cuda_backend, B, H, n) -> None:
    gen = np.random.default_rng(B * n)
    up = cuda_backend.upload
    runtime = KernelRuntime(cuda_backend, {})
    kernel = runtime.bind(nstep.ACCUMULATE)
    state, staged = allocate(cuda_backend, B, H, n)
    dev = {**state, **staged}
    episode = np.zeros(B, np.int32)
    isv = up(np.array([9.0, 9.0, 9.0, 0.97, 9.0], np.float32))  # gamma at isv[3]
    emitted = 0
    with runtime.auditing([nstep.ACCUMULATE.name]) as audit:
        for _ in range(3 * n + 5):
            episode = episode + (gen.random(B) < 0.05)
            kernel(h_t=up(gen.normal(size=B * H).astype(np.float32)),
                   h_tp1=up(gen.normal(size=B * H).astype(np.float32)),
                   eff_action=up(gen.integers(0, 3, B).astype(np.int32)),
                   reward=up(gen.normal(size=B).astype(np.float32)),
                   done=up((gen.random(B) < 0.2).astype(np.float32)),
                   episode=up(episode.astype(np.int32)), isv=isv, **dev, B=B, H=H, n=n,
                   gamma_idx=3)  # fmt: skip
            emitted += int(cuda_backend.download(dev["flags"]).sum())
    assert audit.total == 0, f"GPU and oracle differ: {audit.mismatches} {audit.first}"
    assert audit.launches[nstep.ACCUMULATE.name] == 3 * n + 5 and emitted > 0
