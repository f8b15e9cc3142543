"""Launcher declarations for cuda/aux.cu (oracle: alpha_rl.reference.aux)."""

import numpy as np

from alpha_rl.abi import CONSTANTS, ENV_ACTIONS
from alpha_rl.kernels.decl import Grid1D, In, Launch, OneBlock, Out, Scalar, Stem

STEM = Stem("aux")

F32, I32, U64 = np.float32, np.int32, np.uint64
BLOCK = CONSTANTS["aux"]["AUX_BLOCK"]
ACTIONS, FLAT = ENV_ACTIONS["ACTIONS"], ENV_ACTIONS["ACTION_FLAT"]
# aux_alpha_update's numbers at isv[adam_idx] (the α part's `alpha_adam` slot): its own lr and
# bound, the learner's betas, eps, target tau and period
ALPHA_NUMBERS = ("lr", "beta1", "beta2", "eps", "bound", "tau", "period")
# aux_controller's at isv[numbers_idx] (the β part's `beta_controller` slot)
CONTROLLER_NUMBERS = ("gain", "target_share", "w_max")

ALPHA_BIAS = STEM.kernel(
    "aux_alpha_bias",
    In("h", F32, "M*H"),
    In("aux_w", F32, "H+1"),
    In("w", F32, "ACTIONS"),
    Out("q", F32, "M*ACTIONS"),
    Out("aux_out", F32, "M", nullable=True),
    Scalar("M", I32),
    Scalar("H", I32),
    launch=Grid1D(over="M", block=256),
    doc="Q' = Q + w_alpha * aux(h), aux = 2 p_up - 1 of the aux head",
)

ALPHA_UPDATE = STEM.kernel(
    "aux_alpha_update",
    In("dq", F32, "M*ACTIONS"),
    In("aux", F32, "M"),
    In("counters", U64),
    Out("w", F32, "ACTIONS"),
    Out("m", F32, "ACTIONS"),
    Out("v", F32, "ACTIONS"),
    Out("target", F32, "ACTIONS"),
    Out("isv", F32),
    Scalar("M", I32),
    Scalar("adam_idx", I32),
    Scalar("long_idx", I32),
    Scalar("short_idx", I32),
    launch=OneBlock(BLOCK),
    doc="w_alpha's gradient from the TD loss, its own Adam step, the clamp and the target sync",
)

CONTROLLER = STEM.kernel(
    "aux_controller",
    Out("isv", F32),
    Scalar("aux_ema_idx", I32),
    Scalar("abs_idx", I32),
    Scalar("weight_idx", I32),
    Scalar("core", I32),
    Scalar("w_idx", I32),
    Scalar("share_idx", I32),
    Scalar("numbers_idx", I32),
    launch=Launch(block=32, blocks=lambda v: 1),
    doc="the aux-align reward's share of the weighted reward's magnitude, and w_aux_align moved "
    "toward the target share",
)
