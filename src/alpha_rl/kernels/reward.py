"""Launcher declarations for cuda/reward.cu (oracle: alpha_rl.reference.reward)."""

import numpy as np

from alpha_rl.abi import REWARD
from alpha_rl.kernels.decl import RC_STRIDE, In, Launch, Out, Scalar, Stem

STEM = Stem("reward", axes=(RC_STRIDE,))
# components 0..RC_CORE-1 are the core ones; c6 aux_align (RC_AUX_ALIGN) only a layout of more
# than RC_AUX_ALIGN components (stride 7) has
RC_CORE, RC_AUX_ALIGN = REWARD["RC_CORE"], REWARD["RC_AUX_ALIGN"]
DECOMP_ROWS, DECOMP_LEAD = REWARD["DECOMP_ROWS"], REWARD["DECOMP_LEAD"]


def has_aux_align(rc_stride: int) -> bool:
    """Whether a layout of `rc_stride` components carries c6 aux_align (stride 7)."""
    return rc_stride > RC_AUX_ALIGN


def decomp_cols(rc_stride: int) -> int:
    """Columns of one row of the reward decomposition table."""
    return DECOMP_LEAD + rc_stride


def block_sums(rc_stride: int) -> int:
    """Sums one block of reward_diagnostics leaves in `partial` (REWARD_SUMS): components 0..5,
    c6 at stride 7, |components 0..5|, then the decomposition table."""
    return RC_CORE + rc_stride + DECOMP_ROWS * decomp_cols(rc_stride)


def blocks(n: int) -> int:
    """Blocks of a reward_diagnostics launch over n envs (at least one: it writes diag)."""
    return max(1, -(-n // REWARD["REWARD_ROWS"]))


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
    launch=Launch(block=REWARD["REWARD_BLOCK"], blocks=lambda v: blocks(int(v["n"]))),
    doc="step 5 in one launch: component, aux-align and magnitude EMAs, ratios, decomposition",
)  # fmt: skip
