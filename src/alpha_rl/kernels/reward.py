"""Launcher declarations for cuda/reward.cu (oracle: alpha_rl.reference.reward)."""

import numpy as np

from alpha_rl.kernels.decl import RC_STRIDE, In, OneBlock, Out, Scalar, Stem
from alpha_rl.reference.abi import REWARD

STEM = Stem("reward", axes=(RC_STRIDE,))
BLOCK = OneBlock(REWARD["REWARD_BLOCK"])

# (rc, isv, n, ema_idx, alpha_idx): an EMA over envs into ISV slots, alpha from isv[alpha_idx]
EMA_ARGS = (
    In("rc", np.float32, "n*RC_STRIDE"),
    Out("isv", np.float32, nullable=True),
    Scalar("n", np.int32),
    Scalar("ema_idx", np.int32),
    Scalar("alpha_idx", np.int32),
)

COMPONENT_EMA = STEM.kernel(
    "reward_component_ema",
    *EMA_ARGS,
    launch=BLOCK,
    doc="EMA over envs of reward components 0..5 into isv[ema_idx:ema_idx+6]",
)

AUX_ALIGN_EMA = STEM.kernel(
    "reward_aux_align_ema",
    *EMA_ARGS,
    launch=BLOCK,
    doc="stride 7: EMA over envs of c6 aux_align into isv[ema_idx]",
)

MAG_RATIO = STEM.kernel(
    "reward_mag_ratio",
    In("rc", np.float32, "n*RC_STRIDE"),
    Out("isv", np.float32, nullable=True),
    Scalar("n", np.int32),
    Scalar("abs_idx", np.int32),
    Scalar("ratio_idx", np.int32),
    Scalar("alpha_idx", np.int32),
    launch=BLOCK,
    doc="abs EMA of c0..c5 and each one's ratio to the sum of the other five",
)

DECOMP_DIAG = STEM.kernel(
    "reward_decomp_diag",
    In("rc", np.float32, "n*RC_STRIDE"),
    In("reward", np.float32, "n"),
    In("prev_dir", np.int32, "n"),
    Out("diag", np.float32, "DECOMP_ROWS*(DECOMP_LEAD+RC_STRIDE)"),
    Scalar("n", np.int32),
    launch=BLOCK,
    doc="per position state: count, mean reward, mean |reward|, mean abs-sum, component means",
)
