"""The kernel audit: a launch checked against its oracle on host copies of the same inputs."""

from __future__ import annotations

import numpy as np

from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.kernels import reward
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.reference.reward import block_sums, decomp_cols

DIAGNOSTICS = reward.DIAGNOSTICS.name
ISV = [a.name for a in reward.DIAGNOSTICS.args].index("isv")  # its place in the launch values


def _diagnostics_case(runtime: KernelRuntime) -> tuple:
    """reward_diagnostics over 4 envs at stride 7 (alpha 0.5 in isv[26]): the bound kernel and
    its arguments. The audit compares every OUT array, the scratch (partial, done) too: here the
    launch is the oracle, which leaves the scratch alone, so it matches; a device launch writes
    partial, which the oracle does not."""
    be = runtime.backend
    rc = be.upload(np.arange(4 * 7, dtype=np.float32))
    isv = be.upload(np.zeros(64, np.float32))
    be.write(isv[26:27], np.array([0.5], np.float32))
    args = {
        "rc": rc, "reward": be.upload(np.array([1, -2, 0.5, 3], np.float32)),
        "prev_dir": be.upload(np.array([0, 1, -1, 1], np.int32)), "isv": isv,
        "diag": be.zeros(3 * decomp_cols(7), np.float32),
        "partial": be.zeros(block_sums(7), np.float32), "done": be.zeros(1, np.uint64), "n": 4,
        "ema_idx": 32, "aux_ema_idx": 38, "abs_idx": 40, "ratio_idx": 46, "alpha_idx": 26,
    }  # fmt: skip
    return runtime.bind(reward.DIAGNOSTICS), args


def test_audit_counts_nothing_when_the_launch_matches_its_oracle() -> None:
    runtime = KernelRuntime(NumpyBackend(), {"RC_STRIDE": 7})
    diagnostics, args = _diagnostics_case(runtime)
    with runtime.auditing([DIAGNOSTICS]) as audit:
        diagnostics(**args)
    assert audit.launches == {DIAGNOSTICS: 1}
    assert audit.total == 0
    isv = runtime.backend.download(args["isv"])
    assert isv[32:38].any() and isv[38] and isv[40:52].all()  # the launch itself still happened
    assert runtime.backend.download(args["diag"]).any()


def test_audit_names_the_kernel_array_and_index_of_a_wrong_launch() -> None:
    runtime = KernelRuntime(NumpyBackend(), {"RC_STRIDE": 7})
    diagnostics, args = _diagnostics_case(runtime)
    honest = diagnostics._launch

    def off_by_one_slot(grid, values, stream):  # a "device" that corrupts slot 33
        honest(grid, values, stream)
        values[ISV][33] += 1.0

    diagnostics._launch = off_by_one_slot
    with runtime.auditing([DIAGNOSTICS]) as audit:
        diagnostics(**args)
        diagnostics(**args)
    assert audit.mismatches == {DIAGNOSTICS: 2}
    assert audit.first == ["reward_diagnostics.isv[33]"] * 2  # nothing in diag or the scratch
    diagnostics(**args)  # outside the block: no audit
    assert audit.launches[DIAGNOSTICS] == 2 and diagnostics.audit is None
