"""Launcher declarations for cuda/her.cu (oracle: alpha_rl.reference.her)."""

import numpy as np

from alpha_rl.abi import HER
from alpha_rl.kernels.decl import Grid1D, In, Out, Scalar, Stem
from alpha_rl.kernels.per import STORAGE

STEM = Stem("her")

F32, I32, I64, U8, U64 = np.float32, np.int32, np.int64, np.uint8, np.uint64
BLOCK = HER["HER_BLOCK"]  # the replay's push granularity
RING = HER["HER_RING"]  # per-env mid ring length
STEP, BACKWARD_TOTAL, FORWARD_TOTAL = (  # counters[]
    HER[f"HER_{k}"] for k in ("STEP", "BACKWARD_TOTAL", "FORWARD_TOTAL")
)
COUNTERS = HER["HER_COUNTERS"]
# what became of the forward ring's claims, by counters[] word
FATES = {k.lower(): HER[f"HER_FORWARD_{k}"] for k in ("JUDGED", "EXPIRED", "ENDED", "OVERWRITTEN")}


# the replay's storage, its push state and one lookback word per block of `rows` rows pushed
def replay_out(rows: str) -> tuple:
    return (*STORAGE, Out("rstate", U64, "PER_STATE_WORDS"),
            Out("rlookback", U64, f"({rows}+HER_BLOCK-1)//HER_BLOCK"))  # fmt: skip


TRACK = STEM.kernel(
    "her_track",
    In("opened", U8, "B"),
    In("closed", U8, "B"),
    In("pos", I32, "B"),
    In("episode", I32, "B"),
    In("fill_mid", F32, "B"),
    In("post_mid", F32, "B"),
    Out("mid_ring", F32, "B*HER_RING"),
    Out("count", I32, "B"),
    Out("entry_mid", F32, "B"),
    Out("peak_mid", F32, "B"),
    Out("dir", I32, "B"),
    Out("snap_entry", F32, "B"),
    Out("snap_peak", F32, "B"),
    Out("snap_dir", I32, "B"),
    Out("snap_episode", I32, "B"),
    Out("last_episode", I32, "B"),
    Out("counters", U64, "HER_COUNTERS"),
    Scalar("B", I32),
    launch=Grid1D(over="B", block=256),
    doc="per-env trade tracking: entry, peak in the trade's favour, mid ring, close snapshot",
)

# the forward ring's arrays: dtype and shape
RING_ARRAYS = {"f_entry": (F32, "R"), "f_exit_step": (I64, "R"), "f_dir": (I32, "R"),
               "f_actual": (F32, "R"), "f_env": (I32, "R"), "f_episode": (I32, "R"),
               "f_h": (F32, "R*H")}  # fmt: skip


def ring(kind, *names: str, nullable: bool = False) -> tuple:
    """Arguments `kind` (In or Out) for the ring arrays `names` (all of them when none)."""
    return tuple(kind(n, *RING_ARRAYS[n], nullable=nullable) for n in names or RING_ARRAYS)


INJECT = STEM.kernel(
    "her_inject",
    In("closed", U8, "B"),
    In("snap_entry", F32, "B"),
    In("snap_peak", F32, "B"),
    In("snap_dir", I32, "B"),
    In("snap_episode", I32, "B"),
    In("rc", F32, "B*S"),
    In("h_t", F32, "B*H"),
    In("eff_action", I32, "B"),
    In("max_leaf", F32, "1"),
    *replay_out("B"),
    Out("ring_state", U64, "PER_STATE_WORDS", nullable=True),
    Out("ring_lookback", U64, "(B+HER_BLOCK-1)//HER_BLOCK", nullable=True),
    *ring(Out, nullable=True),
    Out("counters", U64, "HER_COUNTERS"),
    Out("isv", F32),
    *(Scalar(name, I32) for name in ("B", "H", "S", "R")),
    Scalar("mask", U64),
    Scalar("alpha_idx", I32),
    Scalar("gamma_idx", I32),
    Scalar("lot_mult_idx", I32),
    *(
        Scalar(name, I32)
        for name in (
            "threshold_idx",
            "boost_idx",
            "scale_idx",
            "count_idx",
            "backward_idx",
            "forward_idx",
        )
    ),
    launch=Grid1D(over="B", block=BLOCK),
    doc="backward HER: a synthetic transition rewarding the peak of each closed trade that beat "
    "threshold x its realised PnL; with forward HER, the closed trades into the forward ring",
)

FORWARD = STEM.kernel(
    "her_forward",
    *ring(In, "f_entry", "f_exit_step", "f_actual", "f_env", "f_episode", "f_h"),
    In("episode", I32),
    In("post_mid", F32),
    In("max_leaf", F32, "1"),
    In("ring_state", U64, "PER_STATE_WORDS"),
    Out("f_dir", I32, "R"),
    *replay_out("W"),
    Out("counters", U64, "HER_COUNTERS"),
    Out("isv", F32),
    Scalar("W", I32),
    Scalar("R", I32),
    Scalar("H", I32),
    Scalar("mask", U64),
    Scalar("alpha_idx", I32),
    Scalar("gamma_idx", I32),
    Scalar("lot_mult_idx", I32),
    *(
        Scalar(name, I32)
        for name in ("threshold_idx", "boost_idx", "scale_idx", "lookahead_idx", "count_idx")
    ),
    launch=Grid1D(over="W", block=BLOCK),
    doc="forward HER: the oldest (at most W) live trades of the ring, after `lookahead` steps a "
    "synthetic hold transition when holding on would have paid more than threshold x the "
    "realised PnL",
)
