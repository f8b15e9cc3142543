"""Launcher declarations for cuda/reward.cu (oracle: alpha_rl.reference.reward)."""

import numpy as np

from alpha_rl.kernels.decl import RC_STRIDE, In, Launch, Out, Scalar, Stem
from alpha_rl.reference import reward as ref
from alpha_rl.reference.abi import REWARD

STEM = Stem("reward", axes=(RC_STRIDE,))
SUMS = "RC_CORE+RC_STRIDE+DECOMP_ROWS*(DECOMP_LEAD+RC_STRIDE)"  # REWARD_SUMS, as block_sums has it

DIAGNOSTICS = STEM.kernel(
    "reward_diagnostics",
    In("rc", np.float32, "n*RC_STRIDE"),
    In("reward", np.float32, "n"),
    In("prev_dir", np.int32, "n"),
    Out("isv", np.float32, nullable=True),
    Out("diag", np.float32, "DECOMP_ROWS*(DECOMP_LEAD+RC_STRIDE)"),
    Out("partial", np.float32, f"((n+REWARD_ROWS-1)//REWARD_ROWS or 1)*({SUMS})"),
    Out("done", np.uint64, "1"),
    Scalar("n", np.int32),
    Scalar("ema_idx", np.int32),
    Scalar("aux_ema_idx", np.int32),
    Scalar("abs_idx", np.int32),
    Scalar("ratio_idx", np.int32),
    Scalar("alpha_idx", np.int32),
    launch=Launch(block=REWARD["REWARD_BLOCK"], blocks=lambda v: ref.blocks(int(v["n"]))),
    doc="step 5 in one launch: component, aux-align and magnitude EMAs, ratios, decomposition",
)  # fmt: skip
