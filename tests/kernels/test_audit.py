"""The kernel audit: a launch checked against its oracle on host copies of the same inputs."""

from __future__ import annotations

import numpy as np

from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.kernels import reward
from alpha_rl.kernels.runtime import KernelRuntime


def _ema_case(runtime: KernelRuntime):
    be = runtime.backend
    rc = be.upload(np.arange(4 * 7, dtype=np.float32))
    isv = be.upload(np.zeros(64, np.float32))
    be.write(isv[26:27], np.array([0.5], np.float32))
    return runtime.bind(reward.COMPONENT_EMA), rc, isv


def test_audit_counts_nothing_when_the_launch_matches_its_oracle() -> None:
    runtime = KernelRuntime(NumpyBackend(), {"RC_STRIDE": 7})
    ema, rc, isv = _ema_case(runtime)
    with runtime.auditing([reward.COMPONENT_EMA.name]) as audit:
        ema(rc=rc, isv=isv, n=4, ema_idx=32, alpha_idx=26)
    assert audit.launches == {reward.COMPONENT_EMA.name: 1}
    assert audit.total == 0
    assert runtime.backend.download(isv)[32:38].any()  # the launch itself still happened


def test_audit_names_the_kernel_array_and_index_of_a_wrong_launch() -> None:
    runtime = KernelRuntime(NumpyBackend(), {"RC_STRIDE": 7})
    ema, rc, isv = _ema_case(runtime)
    honest = ema._launch

    def off_by_one_slot(grid, values, stream):  # a "device" that corrupts slot 33
        honest(grid, values, stream)
        values[1][33] += 1.0

    ema._launch = off_by_one_slot
    with runtime.auditing([reward.COMPONENT_EMA.name]) as audit:
        ema(rc=rc, isv=isv, n=4, ema_idx=32, alpha_idx=26)
        ema(rc=rc, isv=isv, n=4, ema_idx=32, alpha_idx=26)
    assert audit.mismatches == {reward.COMPONENT_EMA.name: 2}
    assert audit.first[0] == "reward_component_ema.isv[33]"
    ema(rc=rc, isv=isv, n=4, ema_idx=32, alpha_idx=26)  # outside the block: no audit
    assert audit.launches[reward.COMPONENT_EMA.name] == 2 and ema.audit is None
