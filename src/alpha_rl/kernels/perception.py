"""Launcher declarations for cuda/perception.cu (oracle: alpha_rl.reference.perception)."""

import numpy as np

from alpha_rl.kernels.decl import In, Launch, Out, Scalar, Stem
from alpha_rl.reference.abi import PERCEPTION

STEM = Stem("perception")

F32, I32 = np.float32, np.int32

OBSERVE = STEM.kernel(
    "perception_observe",
    *(In(name, F32, "T*L") for name in ("bid_px", "ask_px", "bid_sz", "ask_sz")),
    In("cursor", I32, "n"),
    In("pos", I32, "n"),
    In("trade_len", I32, "n"),
    In("entry_px", F32, "n"),
    In("peak_mid", F32, "n"),
    In("horizons", I32, "K"),
    In("proj_w", F32, "(K+PERCEPTION_EXTRA_FEATURES)*H", nullable=True),
    In("proj_b", F32, "H", nullable=True),
    Out("h", F32, "n*H"),
    *(Scalar(name, I32) for name in ("n", "T", "L", "K", "H")),
    Scalar("tick", F32),
    Scalar("inv_pnl_scale", F32),
    Scalar("inv_time_scale", F32),
    launch=Launch(
        block=PERCEPTION["PERCEPTION_THREADS"], over="n", per_block=PERCEPTION["PERCEPTION_ENVS"]
    ),
    doc="h [B, H]: price-level-free features of book and position, optionally tanh-projected",
)
