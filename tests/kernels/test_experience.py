"""experience_env_step on the GPU against its oracle: every output equal, both strides."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.kernels import experience
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.market.book import Book
from alpha_rl.reference.experience import experience_env_step as oracle
from alpha_rl.reference.experience import start_ticks
from tests.helpers import by_name

pytestmark = pytest.mark.gpu

SIZES = (1, 31, 32, 33, 1000, 4097)
T, L, ISV = 257, 3, 64
BREAKS = [100, 101, 180]  # session breaks: one session of a single tick
OUT_NAMES = [a.name for a in experience.ENV_STEP.args if a.role.name == "OUT"]


def random_inputs(n: int, stride: int, seed: int) -> dict:
    gen = np.random.default_rng(seed)
    mids = 40.0 + np.cumsum(gen.integers(-2, 3, size=T)) * 0.25
    spread = gen.integers(1, 4, size=T) * 0.25
    bid = (mids[:, None] - spread[:, None] / 2 - np.arange(L) * 0.25).astype(np.float32)
    ask = (mids[:, None] + spread[:, None] / 2 + np.arange(L) * 0.25).astype(np.float32)
    cursor = gen.integers(0, T - 1, size=n).astype(np.int32)
    cursor[: max(1, n // 10)] = T - 2  # some envs on their last step
    cursor[max(1, n // 10) : max(2, n // 5)] = BREAKS[0] - 2  # and on a session's last step
    session_last = Book(bid, ask, bid, ask, 0.25, "random", breaks=BREAKS).session_last()
    arrays = {
        "bid_px": bid.ravel(), "ask_px": ask.ravel(), "session_last": session_last,
        "starts": start_ticks(session_last, 4),
        "action": gen.integers(-1, 4, size=n).astype(np.int32),  # includes invalid actions
        "aux_prob": gen.random(n).astype(np.float32),
        "isv": gen.uniform(0.1, 2.0, size=ISV).astype(np.float32),
        "run_seed": np.array([99], np.uint64),
        "cursor": cursor, "pos": gen.integers(-1, 2, size=n).astype(np.int32),
        "trade_len": gen.integers(0, 50, size=n).astype(np.int32),
        "episode": gen.integers(0, 5, size=n).astype(np.int32),
        "entry_px": gen.uniform(35, 45, size=n).astype(np.float32),
        "entry_mid": gen.uniform(35, 45, size=n).astype(np.float32),
        "peak_mid": gen.uniform(35, 45, size=n).astype(np.float32),
    }  # fmt: skip
    arrays["isv"][30:33] = [2.0, 20.0, 0.5]  # ENV_COSTS: lot, lot x multiplier, fee per lot
    arrays["isv"][40:42] = [3.0, 7.0]  # ENV_TRADING: decide every 3 ticks, hold 7 steps
    for name in ("stat_trades", "stat_realised", "stat_available", "stat_duration"):
        arrays[name] = gen.normal(size=n).astype(np.float32)
    for arg in experience.ENV_STEP.args:  # poisoned outputs: each must be written
        if arg.name not in arrays and arg.role.name == "OUT":
            size = n * stride if arg.name == "rc" else n
            arrays[arg.name] = np.full(size, 77 if arg.dtype.kind in "iu" else np.nan, arg.dtype)
    return arrays


def scalars(n: int, starts: int, trading: int = 40) -> list:
    # n, T, L, tick0 (the slice's first tick: 5), costs, trading (-1: absent), w, scale, kappa,
    # lambda, rho, w_aux, beta, n_starts
    return [n, T, L, 5, 30, trading, 10, 20, 21, 22, 23, 24, 25, starts]


@pytest.mark.parametrize("stride", [6, 7])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("null", ["none", "aux", "rules"])
def test_experience_env_step_matches_reference(
    cuda_backend, stride: int, n: int, null: str
) -> None:
    host = random_inputs(n, stride, seed=n * 7 + stride)
    if null == "aux":
        host["aux_prob"] = None
    trading = -1 if null == "rules" else 40  # the rules absent: every tick, no minimum
    want = {k: None if v is None else v.copy() for k, v in host.items()}
    args = [want[a.name] for a in experience.ENV_STEP.args if a.is_pointer] + scalars(
        n, host["starts"].size, trading
    )
    oracle(*args, rc_stride=stride)

    step = KernelRuntime(cuda_backend, {"RC_STRIDE": stride}).bind(experience.ENV_STEP)
    dev = {k: None if v is None else cuda_backend.upload(v) for k, v in host.items()}
    pointers = [dev[a.name] for a in experience.ENV_STEP.args if a.is_pointer]
    step(**by_name(experience.ENV_STEP, *pointers, *scalars(n, host["starts"].size, trading)))
    for name in OUT_NAMES:
        got = cuda_backend.download(dev[name])
        bad = np.flatnonzero(~((got == want[name]) | (np.isnan(got) & np.isnan(want[name]))))
        first = bad[:5]
        assert bad.size == 0, (
            f"{name}: {bad.size} differ, first {first}: {got[first]} vs {want[name][first]}"
        )
