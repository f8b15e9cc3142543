"""Launcher declarations for cuda/nstep.cu (oracle: alpha_rl.reference.nstep)."""

import numpy as np

from alpha_rl.abi import CONSTANTS
from alpha_rl.kernels.decl import In, Launch, Out, Scalar, Stem

STEM = Stem("nstep")

F32, I32, U8 = np.float32, np.int32, np.uint8
BLOCK = CONSTANTS["nstep"]["NSTEP_BLOCK"]

ACCUMULATE = STEM.kernel(
    "nstep_accumulate",
    In("h_t", F32, "B*H"),
    In("h_tp1", F32, "B*H"),
    In("eff_action", I32, "B"),
    In("reward", F32, "B"),
    In("done", F32, "B"),
    In("episode", I32, "B"),
    In("isv", F32, "gamma_idx+1"),
    Out("ring_h", F32, "n*B*H"),
    Out("ring_action", I32, "n*B"),
    Out("ring_reward", F32, "n*B"),
    Out("pos", I32, "B"),
    Out("count", I32, "B"),
    Out("episode_seen", I32, "B"),
    Out("flags", U8, "B*n"),
    Out("out_h_t", F32, "B*n*H"),
    Out("out_h_tp1", F32, "B*n*H"),
    Out("out_action", I32, "B*n"),
    Out("out_reward", F32, "B*n"),
    Out("out_done", F32, "B*n"),
    Out("out_discount", F32, "B*n"),
    Scalar("B", I32),
    Scalar("H", I32),
    Scalar("n", I32),
    Scalar("gamma_idx", I32),
    launch=Launch(block=BLOCK, over="B", per_block=BLOCK // 32),
    doc="per env a ring of its last n steps; emits the n-step transitions that end this step "
    "(all held ones at a trade close or a new episode), cut returns and gamma^k discounts",
)
