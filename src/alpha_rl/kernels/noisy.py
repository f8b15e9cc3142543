"""Launcher declarations for cuda/noisy.cu (oracle: alpha_rl.reference.noisy)."""

import numpy as np

from alpha_rl.abi import CONSTANTS
from alpha_rl.kernels.decl import Grid1D, In, Launch, Out, Scalar, Stem

STEM = Stem("noisy")

F32, I32, U64 = np.float32, np.int32, np.uint64
ROLE_ACT, ROLE_ONLINE = (CONSTANTS["noisy"][f"NOISY_ROLE_{k}"] for k in ("ACT", "ONLINE"))

COMPOSE = STEM.kernel(
    "noisy_compose",
    In("theta", F32, "2*P"),
    In("target", F32, "2*P", nullable=True),
    In("unit_in", I32, "P"),
    In("unit_out", I32, "P"),
    In("counters", U64),
    In("run_seed", U64, "1"),
    Out("weights", F32, "nets*P"),
    Out("noise", F32, "P", nullable=True),
    Scalar("P", I32),
    Scalar("N", I32),
    Scalar("nets", I32),
    Scalar("word", I32),
    Scalar("role", I32),
    launch=Launch(block=256, blocks=lambda v: -(-int(v["nets"]) * int(v["P"]) // 256)),
    doc="noisy weights mu + sigma * f(g_out) f(g_in) of one net (or online and target), the "
    "noise drawn from the counter RNG at the acting or update step",
)

GRAD = STEM.kernel(
    "noisy_grad",
    In("noise", F32, "P"),
    Out("grad", F32, "2*P"),
    Scalar("P", I32),
    launch=Grid1D(over="P", block=256),
    doc="the sigma half of the gradient: grad[P + k] = grad[k] * noise[k]",
)
