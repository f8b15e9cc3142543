"""aux_* kernels on the GPU against their oracles (the aux signal's dot product and exp round
apart from NumPy's, so to a few parts in 10^6; the controller exactly)."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.kernels import aux, dqn
from alpha_rl.reference import aux as ref
from alpha_rl.reference import dqn as dqn_ref
from tests.helpers import device_and_oracle

pytestmark = pytest.mark.gpu
F32 = np.float32
TOL = dict(rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize(("M", "H"), [(1, 5), (33, 32), (1024, 32), (4097, 39)])
def test_aux_alpha_bias_and_update_match_reference(cuda_backend, M: int, H: int) -> None:
    gen = np.random.default_rng(M)
    bias = {"h": gen.normal(size=M * H).astype(F32),
            "aux_w": gen.normal(0, 0.3, H + 1).astype(F32),
            "w": np.array([0.0, 0.4, -0.3], F32), "q": gen.normal(size=M * 3).astype(F32),
            "aux_out": np.full(M, np.nan, F32)}  # fmt: skip
    got, want = device_and_oracle(cuda_backend, aux.ALPHA_BIAS, ref.aux_alpha_bias, bias, [M, H])
    for name in ("q", "aux_out"):
        np.testing.assert_allclose(got[name], want[name], err_msg=name, **TOL)
    for step, tau in ((1, 0.0), (4, 0.0), (5, 0.01)):
        update = {"dq": gen.normal(0, 0.1, M * 3).astype(F32), "aux": want["aux_out"],
                  "counters": np.array([step, 0, 0, 0], np.uint64),
                  "w": np.array([0.0, 0.2, -0.1], F32), "m": gen.normal(0, 0.01, 3).astype(F32),
                  "v": gen.uniform(0, 0.01, 3).astype(F32), "target": np.zeros(3, F32),
                  "isv": np.array([np.nan] * 4 + [1e-2, 0.9, 0.999, 1e-8, 0.25, tau, 2],
                                  F32)}  # ALPHA_NUMBERS at isv[4:11]  # fmt: skip
        scalars = [M, 4, 1, 3]
        got_u, want_u = device_and_oracle(cuda_backend, aux.ALPHA_UPDATE, ref.aux_alpha_update,
                                          update, scalars)  # fmt: skip
        for name in ("w", "m", "v", "target", "isv"):
            np.testing.assert_allclose(got_u[name], want_u[name], err_msg=name, **TOL)
        assert got_u["w"][0] == 0.0 and np.all(np.abs(got_u["w"]) <= 0.25)


@pytest.mark.parametrize(("M", "H"), [(33, 32), (4097, 39)])
def test_aux_alpha_bias_reads_the_aux_head_exactly_as_dqn_act(cuda_backend, M: int, H: int) -> None:
    """α's aux is 2 p_up - 1 of the very head dqn_act evaluates (the same sums in the same order),
    so the acting bias and the c6 reward see one prediction."""
    gen = np.random.default_rng(M + H)
    h, aux_w = gen.normal(size=M * H).astype(F32), gen.normal(0, 0.3, H + 1).astype(F32)
    act = {"q": np.zeros(M * 3, F32), "h": h, "aux_w": aux_w,
           "action": np.full(M, -1, np.int32), "counters": np.zeros(4, np.uint64),
           "isv": np.array([1.0, 0.1, 20.0], F32), "p_up": np.full(M, np.nan, F32),
           "run_seed": np.array([11], np.uint64)}  # fmt: skip
    got_act, _ = device_and_oracle(cuda_backend, dqn.ACT, dqn_ref.dqn_act, act,
                                   [M, 3, H, 0, -1])  # the schedule at isv[0:3]  # fmt: skip
    bias = {"h": h, "aux_w": aux_w, "w": np.zeros(3, F32), "q": np.zeros(M * 3, F32),
            "aux_out": np.full(M, np.nan, F32)}  # fmt: skip
    got, _ = device_and_oracle(cuda_backend, aux.ALPHA_BIAS, ref.aux_alpha_bias, bias, [M, H])
    np.testing.assert_array_equal(got["aux_out"], 2 * got_act["p_up"] - 1)


def test_aux_controller_matches_reference_exactly(cuda_backend) -> None:
    gen = np.random.default_rng(7)
    for _ in range(20):
        isv = gen.uniform(-1, 2, 24).astype(F32)
        isv[20:23] = [0.3, 0.1, 1.5]  # gain, target share, w_max
        scalars = [0, 2, 16, 6, 10, 11, 20]
        got, want = device_and_oracle(cuda_backend, aux.CONTROLLER, ref.aux_controller,
                                      {"isv": isv}, scalars)  # fmt: skip
        np.testing.assert_array_equal(got["isv"], want["isv"])
