"""Launcher declarations for cuda/experience.cu (oracle: alpha_rl.reference.experience)."""

import numpy as np

from alpha_rl.kernels.decl import RC_STRIDE, Grid1D, In, Out, Scalar, Stem

STEM = Stem("experience", axes=(RC_STRIDE,))

F32, I32 = np.float32, np.int32

ENV_STEP = STEM.kernel(
    "experience_env_step",
    In("bid_px", F32),
    In("ask_px", F32),
    In("session_last", I32),
    In("starts", I32),
    In("action", I32),
    In("aux_prob", F32, nullable=True),
    In("isv", F32, nullable=True),
    *(Out(name, I32) for name in ("cursor", "pos", "trade_len", "episode")),
    *(Out(name, F32) for name in ("entry_px", "entry_mid", "peak_mid")),
    Out("rc", F32),
    Out("reward_raw", F32),
    Out("reward", F32),
    Out("done", F32),
    Out("opened", np.uint8),
    Out("closed", np.uint8),
    *(Out(name, I32) for name in ("prev_dir", "closed_dir", "eff_action")),
    Out("fill_mid", F32),
    Out("post_mid", F32),
    *(
        Out(name, F32)
        for name in ("stat_trades", "stat_realised", "stat_available", "stat_duration")
    ),
    Scalar("n", I32),
    Scalar("T", I32),
    Scalar("L", I32),
    Scalar("lot", F32),
    Scalar("lot_mult", F32),
    Scalar("fee", F32),
    *(
        Scalar(name, I32)
        for name in (
            "w_idx",
            "scale_idx",
            "kappa_idx",
            "lambda_idx",
            "rho_idx",
            "w_aux_idx",
            "beta_scale_idx",
        )
    ),
    Scalar("seed", np.uint64),
    Scalar("n_starts", I32),
    launch=Grid1D(over="n", block=256),
    doc="one env step: fills at the touch, reward components, done, trade stats, restarts",
)
