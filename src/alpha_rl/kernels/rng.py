"""Launcher declarations for cuda/rng.cu (oracle: alpha_rl.reference.rng)."""

import numpy as np

from alpha_rl.kernels.decl import Grid1D, Out, Scalar, Stem

STEM = Stem("rng")

FILL = STEM.kernel(
    "rng_fill",
    Out("out_u32", np.uint32, "n"),
    Out("out_uniform", np.float32, "n"),
    Scalar("n", np.int32),
    Scalar("seed", np.uint64),
    Scalar("rng_stream", np.uint32),
    Scalar("offset", np.uint64),
    launch=Grid1D(over="n", block=256),
    doc="out_u32[i], out_uniform[i] = draw (seed, rng_stream, offset + i) for i < n",
)
