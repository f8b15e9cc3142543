"""Launcher declarations for cuda/experience.cu (oracle: alpha_rl.reference.experience)."""

import numpy as np

from alpha_rl.kernels.decl import RC_STRIDE, Grid1D, In, Out, Scalar, Stem
from alpha_rl.rng import Stream, draw_u32

STEM = Stem("experience", axes=(RC_STRIDE,))

F32, I32 = np.float32, np.int32
# ticks of a session an episode needs beyond its history: its start t, t + 1 and the session's
# last tick (start_ticks)
MIN_EPISODE_TICKS = 3
# the env part's numbers, in their order at isv[costs_idx] (its `env_costs` slot)
ENV_COSTS = ("lot", "lot_mult", "fee")
# the env's trading rules, in their order at isv[trading_idx] (its `env_trading` slot): act every
# `interval` ticks (holding in between), hold a trade at least `min_hold` steps
ENV_TRADING = ("interval", "min_hold")


def start_ticks(session_last: np.ndarray, history: int) -> np.ndarray:
    """[S] int32: the ticks an episode may start at, t >= history whose first step is not the
    session's forced close (t + 1 < session_last[t])."""
    t = np.arange(len(session_last))
    return np.flatnonzero((t >= history) & (t + 1 < session_last)).astype(np.int32)


def start_index(seed: int, env: np.ndarray, episode: np.ndarray, count: int) -> np.ndarray:
    """Which of `count` start ticks each env's episode takes, as the kernel draws it: the
    ENV-stream draw at index (episode << 32 | env), scaled to [0, count) by (draw x count) >> 32."""
    index = (np.asarray(episode, np.int64).astype(np.uint64) << np.uint64(32)) | np.asarray(
        env, np.int64).astype(np.uint64)  # fmt: skip
    draw = draw_u32(seed, Stream.ENV, index).astype(np.uint64)
    return ((draw * np.uint64(count)) >> np.uint64(32)).astype(np.int64)


ENV_STEP = STEM.kernel(
    "experience_env_step",
    In("bid_px", F32, "T*L"),
    In("ask_px", F32, "T*L"),
    In("session_last", I32, "T"),
    In("starts", I32, "n_starts"),
    In("action", I32, "n"),
    In("aux_prob", F32, "n", nullable=True),
    In("isv", F32),
    In("run_seed", np.uint64, "1"),
    *(Out(name, I32, "n") for name in ("cursor", "pos", "trade_len", "episode")),
    *(Out(name, F32, "n") for name in ("entry_px", "entry_mid", "peak_mid")),
    Out("rc", F32, "n*RC_STRIDE"),
    *(Out(name, F32, "n") for name in ("reward_raw", "reward", "done")),
    Out("opened", np.uint8, "n"),
    Out("closed", np.uint8, "n"),
    Out("stored", np.uint8, "n"),
    *(Out(name, I32, "n") for name in ("prev_dir", "closed_dir", "eff_action")),
    Out("fill_mid", F32, "n"),
    Out("post_mid", F32, "n"),
    *(
        Out(name, F32, "n")
        for name in ("stat_trades", "stat_realised", "stat_available", "stat_duration")
    ),
    Scalar("n", I32),
    Scalar("T", I32),
    Scalar("L", I32),
    Scalar("tick0", I32),  # row 0's tick in the source series (Book.start): the decisions' phase
    *(
        Scalar(name, I32)
        for name in (
            "costs_idx",
            "trading_idx",
            "w_idx",
            "scale_idx",
            "kappa_idx",
            "lambda_idx",
            "rho_idx",
            "w_aux_idx",
            "beta_scale_idx",
        )
    ),
    Scalar("n_starts", I32),
    launch=Grid1D(over="n", block=256),
    doc="one env step: fills at the touch, reward components, done, trade stats, restarts; "
    "lot, lot x multiplier and the fee per lot at isv[costs_idx + k] (ENV_COSTS); the decision "
    "interval and minimum holding steps at isv[trading_idx + k] (ENV_TRADING)",
)
