"""Launcher declarations for cuda/c51.cu (oracle: alpha_rl.reference.c51)."""

import numpy as np

from alpha_rl.abi import CONSTANTS
from alpha_rl.kernels.decl import In, Launch, Out, Scalar, Stem

STEM = Stem("c51")

F32, I32, U8, U64 = np.float32, np.int32, np.uint8, np.uint64
BLOCK, MAX_ATOMS, PROJECT_BLOCK = (
    CONSTANTS["c51"][f"C51_{k}"] for k in ("BLOCK", "MAX_ATOMS", "PROJECT_BLOCK")
)

Q = STEM.kernel(
    "c51_q",
    In("logits", F32, "M*Z*A"),
    In("isv", F32, "support_idx+2"),
    Out("q", F32, "M*A"),
    Scalar("M", I32),
    Scalar("A", I32),
    Scalar("Z", I32),
    Scalar("support_idx", I32),
    launch=Launch(block=256, blocks=lambda v: -(-int(v["M"]) * int(v["A"]) // 256)),
    doc="Q(i, a) = sum_j softmax_j(logits[i, :, a]) z_j, the expected value of each action "
    "(the support's v_min, v_max at isv[support_idx + k])",
)

PROJECT = STEM.kernel(
    "c51_project",
    In("logits_tp1", F32, "M*Z*A"),
    In("logits_target", F32, "M*Z*A"),
    In("reward", F32, "M"),
    In("done", F32, "M"),
    In("discount", F32, "M", nullable=True),
    In("isv", F32),
    Out("m", F32, "M*Z"),
    Scalar("M", I32),
    Scalar("A", I32),
    Scalar("Z", I32),
    Scalar("gamma_idx", I32),
    Scalar("cut_idx", I32),
    Scalar("support_idx", I32),
    launch=Launch(block=PROJECT_BLOCK, over="M", per_block=PROJECT_BLOCK // 32),
    doc="the distributional Bellman target of the online net's greedy action, projected onto "
    "the atoms",
)

LOSS = STEM.kernel(
    "c51_loss",
    In("logits_t", F32, "M*Z*A"),
    In("action", I32, "M"),
    In("m", F32, "M*Z"),
    In("weight", F32, "M"),
    In("synthetic", U8, "M", nullable=True),
    Out("delta", F32, "M"),
    Out("dlogits", F32, "M*Z*A"),
    Out("isv", F32, nullable=True),
    Out("done", U64, "1"),
    Scalar("M", I32),
    Scalar("A", I32),
    Scalar("Z", I32),
    Scalar("loss_idx", I32),
    Scalar("real_idx", I32),
    Scalar("synthetic_idx", I32),
    Scalar("frac_idx", I32),
    launch=Launch(block=BLOCK, over="M", per_block=BLOCK // 32),
    doc="IS-weighted cross-entropy l_q of the taken action's distribution against the "
    "projected target, its gradient wrt the logits, the per-row loss as priority",
)
