"""Launcher declarations for cuda/perception.cu (oracle: alpha_rl.reference.perception)."""

import numpy as np

from alpha_rl.abi import PERCEPTION
from alpha_rl.kernels.decl import In, Launch, Out, Scalar, Stem
from alpha_rl.portable import cos, log1p
from alpha_rl.rng import Stream, draw_uniform

STEM = Stem("perception")

F32, I32 = np.float32, np.int32
# the features besides the K returns: spread, two imbalances, direction, unrealised PnL, time in
# trade, peak gap; at most MAX_FEATURES in all
EXTRA_FEATURES = PERCEPTION["PERCEPTION_EXTRA_FEATURES"]
MAX_FEATURES = PERCEPTION["PERCEPTION_MAX_FEATURES"]


def feature_count(num_horizons: int) -> int:
    """F, the features of K = num_horizons return horizons."""
    return num_horizons + EXTRA_FEATURES


def projection_weights(seed: int, features: int, hidden: int) -> tuple[np.ndarray, np.ndarray]:
    """The frozen random projection of the features: W [hidden x features] float32 normals of
    variance 1 / features (Box-Muller from two uniforms of the INIT stream, the second run of
    draws after the first), and a zero bias [hidden]."""
    n = hidden * features
    first = draw_uniform(seed, Stream.INIT, np.arange(n, dtype=np.uint64)).astype(np.float64)
    second = draw_uniform(seed, Stream.INIT, np.arange(n, 2 * n, dtype=np.uint64))
    radius = np.sqrt(-2.0 * log1p(-first))
    normal = radius * cos(2.0 * np.pi * second.astype(np.float64))
    return (normal / np.sqrt(features)).astype(F32), np.zeros(hidden, dtype=F32)


OBSERVE = STEM.kernel(
    "perception_observe",
    *(In(name, F32, "T*L") for name in ("bid_px", "ask_px", "bid_sz", "ask_sz")),
    In("session_first", I32, "T"),
    In("cursor", I32, "n"),
    In("pos", I32, "n"),
    In("trade_len", I32, "n"),
    In("entry_px", F32, "n"),
    In("peak_mid", F32, "n"),
    In("horizons", I32, "K"),
    In("proj_w", F32, "(K+PERCEPTION_EXTRA_FEATURES)*H", nullable=True),
    In("proj_b", F32, "H", nullable=True),
    In("isv", F32, "scales_idx+2"),
    Out("h", F32, "n*H"),
    *(Scalar(name, I32) for name in ("n", "T", "L", "K", "H")),
    Scalar("tick", F32),  # the book's: the data's, not a setting
    Scalar("scales_idx", I32),
    launch=Launch(
        block=PERCEPTION["PERCEPTION_THREADS"], over="n", per_block=PERCEPTION["PERCEPTION_ENVS"]
    ),
    doc="h [B, H]: price-level-free features of book and position, optionally tanh-projected "
    "(1 / pnl_scale_ticks and 1 / time_scale_steps at isv[scales_idx + k])",
)
