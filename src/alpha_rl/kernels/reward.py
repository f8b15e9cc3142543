"""Launcher declarations for cuda/reward.cu (oracle: alpha_rl.reference.reward)."""

import numpy as np

from alpha_rl.kernels.decl import RC_STRIDE, In, OneBlock, Out, Scalar, Stem

STEM = Stem("reward", axes=(RC_STRIDE,))

COMPONENT_EMA = STEM.kernel(
    "reward_component_ema",
    In("rc", np.float32),
    Out("isv", np.float32, nullable=True),
    Scalar("n", np.int32),
    Scalar("ema_idx", np.int32),
    Scalar("alpha_idx", np.int32),
    launch=OneBlock(256),
    doc="EMA over envs of reward components 0..5 into isv[ema_idx:ema_idx+6]",
)
