"""Launcher declarations for cuda/per.cu (oracle: alpha_rl.reference.per)."""

import numpy as np

from alpha_rl.abi import PER
from alpha_rl.kernels.decl import Grid1D, In, Launch, OneBlock, Out, Scalar, Stem

STEM = Stem("per")

F32, I32, U8, U64 = np.float32, np.int32, np.uint8, np.uint64

FANOUT, PUSH_BLOCK, REDUCE_BLOCK, SAMPLE_BLOCK, UPDATE_BLOCK, MAX_BATCH = (
    PER[f"PER_{k}"]
    for k in ("FANOUT", "PUSH_BLOCK", "REDUCE_BLOCK", "SAMPLE_BLOCK", "UPDATE_BLOCK", "MAX_BATCH")
)
SAMPLES_PER_BLOCK = SAMPLE_BLOCK // 32  # one warp per sample
# words of the replay's state vector (rstate): the write head, the status of the last sample
HEAD, STATUS, STATE_WORDS = PER["PER_HEAD"], PER["PER_STATUS"], PER["PER_STATE_WORDS"]
STATUS_EMPTY_SAMPLE = PER["PER_STATUS_EMPTY_SAMPLE"]  # a sample drew from an empty tree


def tree_layout(capacity: int) -> tuple[np.ndarray, int]:
    """The sum tree's internal levels over `capacity` leaves, each FANOUT times smaller than the
    one below down to the root: ([levels, offset_0, size_0, offset_1, size_1, ...] int32, the
    entries of all levels together)."""
    sizes = [-(-capacity // FANOUT)]
    while sizes[-1] > 1:
        sizes.append(-(-sizes[-1] // FANOUT))
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    header = [len(sizes), *(v for level in zip(offsets, sizes, strict=True) for v in level)]
    return np.array(header, dtype=np.int32), sum(sizes)


# the replay storage every transition writer fills (per_push, and the HER kernels); s_discount
# (the bootstrap discount of each transition) exists only with n-step returns (agent.n_step > 1)
STORAGE = (
    Out("s_h_t", F32, "(mask+1)*H"),
    Out("s_h_tp1", F32, "(mask+1)*H"),
    Out("s_action", I32, "mask+1"),
    Out("s_reward", F32, "mask+1"),
    Out("s_done", F32, "mask+1"),
    Out("s_synthetic", U8, "mask+1"),
    Out("leaves", F32, "mask+1"),
    Out("s_discount", F32, "mask+1", nullable=True),
)

PUSH = STEM.kernel(
    "per_push",
    In("flags", U8, "n", nullable=True),
    In("h_t", F32, "n*H"),
    In("h_tp1", F32, "n*H"),
    In("action", I32, "n"),
    In("reward", F32, "n"),
    In("done", F32, "n"),
    In("priority", F32, "n", nullable=True),
    In("discount", F32, "n", nullable=True),
    In("max_leaf", F32, "1"),
    In("isv", F32, "alpha_idx+1"),
    *STORAGE,
    Out("slot_out", I32, "n", nullable=True),
    Out("state", U64, "PER_STATE_WORDS"),
    Out("lookback", U64, "(n+PER_PUSH_BLOCK-1)//PER_PUSH_BLOCK"),
    Scalar("n", I32),
    Scalar("H", I32),
    Scalar("mask", U64),
    Scalar("alpha_idx", I32),
    Scalar("synthetic", I32),
    launch=Grid1D(over="n", block=PUSH_BLOCK),
    doc="push flagged rows in row order at the write head; new leaves = priority^alpha or max; "
    "the rows' discounts into s_discount when the storage has one",
)

TREE_REDUCE = STEM.kernel(
    "per_tree_reduce",
    In("in_sum", F32, "n_in"),
    In("in_max", F32, "n_in", nullable=True),
    Out("out_sum", F32, "n_out"),
    Out("out_max", F32, "n_out"),
    Scalar("n_in", I32),
    Scalar("n_out", I32),
    launch=Launch(block=REDUCE_BLOCK, over="n_out", per_block=1),
    doc="one level of the sum tree: sums and maxima of groups of FANOUT children",
)

SAMPLE = STEM.kernel(
    "per_sample",
    In("leaves", F32, "N"),
    In("tree", F32),
    In("layout", I32),
    In("run_seed", U64, "1"),
    Out("indices", I32, "M"),
    Out("weights", F32, "M"),
    Out("probs", F32, "M"),
    Out("state", U64, "PER_STATE_WORDS"),
    Out("isv", F32),
    Scalar("M", I32),
    Scalar("N", I32),
    Scalar("schedule_idx", I32),
    Scalar("beta_idx", I32),
    launch=Launch(block=SAMPLE_BLOCK, over="M", per_block=SAMPLES_PER_BLOCK),
    doc="M stratified samples by descent of the sum tree, with normalised IS weights (beta0 and "
    "the updates beta anneals over at isv[schedule_idx + k])",
)

UPDATE = STEM.kernel(
    "per_update",
    In("indices", I32, "M"),
    In("delta", F32, "M"),
    In("isv", F32),
    Out("leaves", F32),
    Out("max_leaf", F32, "1"),
    Scalar("M", I32),
    Scalar("alpha_idx", I32),
    Scalar("eps_idx", I32),
    launch=OneBlock(UPDATE_BLOCK),
    doc="leaves[index] = (|delta| + eps)^alpha, the last occurrence of a repeated index wins",
)
