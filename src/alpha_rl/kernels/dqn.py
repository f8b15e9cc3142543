"""Launcher declarations for cuda/dqn.cu (oracle: alpha_rl.reference.dqn)."""

import numpy as np

from alpha_rl.abi import DQN
from alpha_rl.kernels.decl import Grid1D, In, Launch, OneBlock, Out, Scalar, Stem

STEM = Stem("dqn")

F32, I32, U8, U64 = np.float32, np.int32, np.uint8, np.uint64
BLOCK, MAX_BATCH, AUX_ROWS = DQN["DQN_BLOCK"], DQN["DQN_MAX_BATCH"], DQN["DQN_AUX_ROWS"]
ADAM_STEP, ACT_STEP, ACT_DONE, AUX_DONE = (
    DQN[f"DQN_{k}"] for k in ("ADAM_STEP", "ACT_STEP", "ACT_DONE", "AUX_DONE")
)
COUNTERS = DQN["DQN_COUNTERS"]
# dqn_adam's numbers, in their order at isv[adam_idx] (the learner part's `adam` slot)
ADAM_NUMBERS = ("lr", "beta1", "beta2", "eps", "clip", "tau", "period")

GATHER = STEM.kernel(
    "dqn_gather",
    In("idx", I32, "M"),
    In("s_h_t", F32),
    In("s_h_tp1", F32),
    In("s_action", I32),
    In("s_reward", F32),
    In("s_done", F32),
    In("s_synthetic", U8),
    In("s_discount", F32, nullable=True),
    Out("x_t", F32, "M*H"),
    Out("x_tp1", F32, "M*H"),
    Out("action", I32, "M"),
    Out("reward", F32, "M"),
    Out("done", F32, "M"),
    Out("synthetic", U8, "M"),
    Out("discount", F32, "M", nullable=True),
    Scalar("M", I32),
    Scalar("H", I32),
    launch=Launch(block=256, blocks=lambda v: -(-int(v["M"]) * int(v["H"]) // 256)),
    doc="the sampled batch gathered from the replay storage",
)

TD = STEM.kernel(
    "dqn_td",
    In("q_t", F32, "M*A"),
    In("q_tp1", F32, "M*A"),
    In("q_tp1_target", F32, "M*A"),
    In("action", I32, "M"),
    In("reward", F32, "M"),
    In("done", F32, "M"),
    In("weight", F32, "M"),
    In("synthetic", U8, "M", nullable=True),
    In("discount", F32, "M", nullable=True),
    Out("delta", F32, "M"),
    Out("dq", F32, "M*A"),
    Out("isv", F32),
    Scalar("M", I32),
    Scalar("A", I32),
    Scalar("gamma_idx", I32),
    Scalar("cut_idx", I32),
    Scalar("kappa_idx", I32),
    Scalar("loss_idx", I32),
    Scalar("real_idx", I32),
    Scalar("synthetic_idx", I32),
    Scalar("frac_idx", I32),
    launch=OneBlock(BLOCK),
    doc="double-DQN TD errors, IS-weighted Huber loss l_q (all, real and synthetic rows) and "
    "its gradient wrt Q(h_t)",
)

GRAD_NORM = STEM.kernel(
    "dqn_grad_norm",
    In("grad", F32, "P"),
    Out("stats", F32, "1"),
    Out("counters", U64, "DQN_COUNTERS"),
    Out("isv", F32, nullable=True),
    Scalar("P", I32),
    Scalar("norm_idx", I32),
    launch=OneBlock(BLOCK),
    doc="global gradient norm; advances Adam's step",
)

ADAM = STEM.kernel(
    "dqn_adam",
    In("grad", F32, "P"),
    In("stats", F32, "1"),
    In("counters", U64, "DQN_COUNTERS"),
    In("isv", F32, "adam_idx+7"),
    Out("param", F32, "P"),
    Out("m", F32, "P"),
    Out("v", F32, "P"),
    Out("target", F32, "P"),
    Scalar("P", I32),
    Scalar("adam_idx", I32),
    launch=Grid1D(over="P", block=256),
    doc="bias-corrected Adam with optional global-norm clipping, then the target network's "
    "Polyak (tau > 0) or hard (every `period` updates) sync; its numbers from "
    "isv[adam_idx + k] in ADAM_NUMBERS' order",
)

ACT = STEM.kernel(
    "dqn_act",
    In("q", F32, "B*A"),
    In("h", F32, "B*H", nullable=True),
    In("aux_w", F32, "H+1", nullable=True),
    In("run_seed", U64, "1"),
    Out("action", I32, "B"),
    Out("counters", U64, "DQN_COUNTERS"),
    Out("isv", F32, nullable=True),
    Out("p_up", F32, "B", nullable=True),
    Scalar("B", I32),
    Scalar("A", I32),
    Scalar("H", I32),
    Scalar("schedule_idx", I32),
    Scalar("eps_idx", I32),
    launch=Grid1D(over="B", block=256),
    doc="epsilon-greedy actions with the schedule's epsilon on the device (start, end and "
    "decay steps at isv[schedule_idx + k]; schedule_idx < 0: greedy); with p_up, the aux "
    "head's p_up = sigmoid(aux_w . h + b) too",
)

AUX_TRAIN = STEM.kernel(
    "dqn_aux_train",
    In("h", F32, "B*H"),
    In("p_up", F32, "B"),
    In("fill_mid", F32, "B"),
    In("post_mid", F32, "B"),
    Out("w", F32, "H+1"),
    Out("partial", F32, "(B+DQN_AUX_ROWS-1)//DQN_AUX_ROWS*(H+3)"),
    Out("counters", U64, "DQN_COUNTERS"),
    Out("isv", F32),
    Scalar("B", I32),
    Scalar("H", I32),
    Scalar("lr_idx", I32),
    Scalar("loss_idx", I32),
    launch=Launch(block=BLOCK, over="B", per_block=AUX_ROWS),
    doc="one SGD step of the aux head on the sign of the next mid move; l_aux",
)
