"""Launcher declarations for cuda/mlp.cu (oracle: alpha_rl.reference.mlp)."""

import numpy as np

from alpha_rl.abi import MLP
from alpha_rl.kernels.decl import Grid1D, In, Launch, Out, Scalar, Stem

STEM = Stem("mlp")

F32, I32 = np.float32, np.int32
# output tiles of mlp_gemm (and mlp_gemm_partial), of mlp_gemm_64; threads of each gemm block
TILE, WIDE_TILE, THREADS = MLP["MLP_TILE"], MLP["MLP_WIDE_TILE"], MLP["MLP_THREADS"]
HUGE_TILE = MLP["MLP_HUGE_TILE"]  # of mlp_gemm_128


def tiles(M: int, N: int, tile: int = TILE) -> int:
    """Blocks of a gemm launch: tile x tile outputs each."""
    return -(-int(M) // tile) * -(-int(N) // tile)


def _tiles(v) -> int:
    return tiles(v["M"], v["N"])


# (A, B, bias, mask, C, M, N, K, trans_a, trans_b, relu): the arguments of both gemm tiles
GEMM_ARGS = (
    In("A", F32, "M*K"),
    In("B", F32, "K*N"),
    In("bias", F32, "N", nullable=True),
    In("mask", F32, "M*N", nullable=True),
    Out("C", F32, "M*N"),
    *(Scalar(name, I32) for name in ("M", "N", "K", "trans_a", "trans_b", "relu")),
)

GEMM = STEM.kernel(
    "mlp_gemm",
    *GEMM_ARGS,
    launch=Launch(block=THREADS, blocks=_tiles),
    doc="C = op(A) @ op(B) (+ bias) (ReLU) (* mask > 0)",
)

# (X1, W1, bias1, X2, W2, bias2, Y1, Y2, M1, M2, N, K, relu): two forward products in one launch
PAIR_ARGS = (
    In("X1", F32, "M1*K"),
    In("W1", F32, "N*K"),
    In("bias1", F32, "N", nullable=True),
    In("X2", F32, "M2*K"),
    In("W2", F32, "N*K"),
    In("bias2", F32, "N", nullable=True),
    Out("Y1", F32, "M1*N"),
    Out("Y2", F32, "M2*N"),
    *(Scalar(name, I32) for name in ("M1", "M2", "N", "K", "relu")),
)

GEMM_PAIR = STEM.kernel(
    "mlp_gemm_pair",
    *PAIR_ARGS,
    launch=Launch(block=THREADS, blocks=lambda v: tiles(v["M1"], v["N"]) + tiles(v["M2"], v["N"])),
    doc="Y1 = X1 W1^T (+ bias1) and Y2 = X2 W2^T (+ bias2) (ReLU) in one launch, each as mlp_gemm",
)

GEMM_64 = STEM.kernel(
    "mlp_gemm_64",
    *GEMM_ARGS,
    launch=Launch(block=THREADS, blocks=lambda v: tiles(v["M"], v["N"], WIDE_TILE)),
    doc="mlp_gemm on 64 x 64 tiles (4 x 4 per thread), bit-identical to it",
)

GEMM_128 = STEM.kernel(
    "mlp_gemm_128",
    *GEMM_ARGS,
    launch=Launch(block=THREADS, blocks=lambda v: tiles(v["M"], v["N"], HUGE_TILE)),
    doc="mlp_gemm on 128 x 128 tiles (8 x 8 per thread), bit-identical to it",
)

# the TF32 tensor-core tiles (cuda/mlp.cu): 128 x 128 outputs per block of 8 warps, 64 x 64 and
# 32 x 32 per block of 4
TC_TILE, TC_WIDE_TILE = MLP["MLP_TC_TILE"], MLP["MLP_TC_WIDE_TILE"]
TC_SMALL_TILE = MLP["MLP_TC_SMALL_TILE"]
TC_THREADS, TC_SMALL_THREADS = MLP["MLP_TC_THREADS"], MLP["MLP_TC_SMALL_THREADS"]
# their dynamic shared memory (bytes): three cp.async stages of both operands
TC_SMEM, TC_WIDE_SMEM = MLP["MLP_TC_SMEM"], MLP["MLP_TC_WIDE_SMEM"]
TC_SMALL_SMEM = MLP["MLP_TC_SMALL_SMEM"]


def _tf32_gemm(name: str, tile: int, threads: int, shared: int, doc: str):
    """A TF32 tile's declaration: mlp_gemm's arguments, tile x tile outputs per block."""
    blocks = lambda v: tiles(v["M"], v["N"], tile)  # noqa: E731
    return STEM.kernel(name, *GEMM_ARGS, launch=Launch(block=threads, blocks=blocks,
                                                       shared=shared), doc=doc)  # fmt: skip


GEMM_TF32 = _tf32_gemm(
    "mlp_gemm_tf32", TC_TILE, TC_THREADS, TC_SMEM,
    "mlp_gemm on the tensor cores: TF32 operands, float32 accumulation (mma.sync m16n8k8)",
)  # fmt: skip
GEMM_TF32_64 = _tf32_gemm("mlp_gemm_tf32_64", TC_WIDE_TILE, TC_SMALL_THREADS, TC_WIDE_SMEM,
                          "mlp_gemm_tf32 on 64 x 64 tiles (4 warps)")  # fmt: skip
GEMM_TF32_32 = _tf32_gemm("mlp_gemm_tf32_32", TC_SMALL_TILE, TC_SMALL_THREADS, TC_SMALL_SMEM,
                          "mlp_gemm_tf32 on 32 x 32 tiles (4 warps)")  # fmt: skip

GEMM_TF32_PAIR = STEM.kernel(
    "mlp_gemm_tf32_pair",
    *PAIR_ARGS,
    launch=Launch(
        block=TC_SMALL_THREADS,
        blocks=lambda v: (
            tiles(v["M1"], v["N"], TC_SMALL_TILE) + tiles(v["M2"], v["N"], TC_SMALL_TILE)
        ),
        shared=TC_SMALL_SMEM,
    ),
    doc="mlp_gemm_pair's two products, each as mlp_gemm_tf32_32",
)

TF32_KERNELS = (GEMM_TF32, GEMM_TF32_64, GEMM_TF32_32, GEMM_TF32_PAIR)

ROWS_MAX_N, ROWS_PER_BLOCK = MLP["MLP_ROWS_MAX_N"], MLP["MLP_ROWS_WARPS"]

GEMM_ROWS = STEM.kernel(
    "mlp_gemm_rows",
    In("X", F32, "M*K"),
    In("W", F32, "N*K"),
    In("bias", F32, "N", nullable=True),
    Out("Y", F32, "M*N"),
    *(Scalar(name, I32) for name in ("M", "N", "K", "relu")),
    launch=Launch(block=32 * ROWS_PER_BLOCK, over="M", per_block=ROWS_PER_BLOCK),
    doc="Y = X W^T (+ bias) (ReLU) for N <= 8 outputs: a warp per row (the Q head)",
)

GEMM_ROWS_PAIR = STEM.kernel(
    "mlp_gemm_rows_pair",
    *PAIR_ARGS,
    launch=Launch(
        block=32 * ROWS_PER_BLOCK,
        blocks=lambda v: -(-int(v["M1"]) // ROWS_PER_BLOCK) + -(-int(v["M2"]) // ROWS_PER_BLOCK),
    ),
    doc="two mlp_gemm_rows products (the Q heads of two networks) in one launch",
)

GEMM_PARTIAL = STEM.kernel(
    "mlp_gemm_partial",
    In("A", F32, "M*K"),
    In("B", F32, "K*N"),
    Out("P", F32, "splits*M*N"),
    *(Scalar(name, I32) for name in ("M", "N", "K", "trans_a", "trans_b", "splits")),
    launch=Launch(block=THREADS, blocks=lambda v: _tiles(v) * int(v["splits"])),
    doc="P[s] = op(A)[:, chunk s of K] @ op(B)[chunk s of K, :] (split-K, no epilogue)",
)

BG_THREADS, BG_COLS = MLP["MLP_BG_COLS"] * MLP["MLP_BG_LANES"], MLP["MLP_BG_COLS"]
SPLITK_BG_COLS = MLP["MLP_SPLITK_BG_COLS"]  # bias-gradient columns a block of mlp_gemm_splitk

GEMM_SPLITK = STEM.kernel(
    "mlp_gemm_splitk",
    In("A", F32, "M*K"),
    In("B", F32, "K*N"),
    In("dY", F32, "K*M", nullable=True),
    Out("P", F32, "splits*M*N"),
    Out("C", F32, "M*N"),
    Out("db", F32, "M", nullable=True),
    Out("counters", np.uint32, f"((M+{TILE - 1})//{TILE})*((N+{TILE - 1})//{TILE})"),
    *(Scalar(name, I32) for name in ("M", "N", "K", "trans_a", "trans_b", "splits", "with_bias")),
    launch=Launch(
        block=THREADS,
        blocks=lambda v: (
            _tiles(v) * int(v["splits"])
            + (-(-int(v["M"]) // SPLITK_BG_COLS) if int(v["with_bias"]) else 0)
        ),
    ),
    doc="mlp_gemm_partial + mlp_sum_splits (+ the bias gradient of dY [K, M] when with_bias) in "
    "one launch, bit for bit: the last split of a tile adds the splits (counters: zeros, left "
    "zero)",
)

SUM_SPLITS = STEM.kernel(
    "mlp_sum_splits",
    In("P", F32, "splits*MN"),
    In("dY", F32, "M*N", nullable=True),
    Out("C", F32, "MN"),
    Out("db", F32, "N", nullable=True),
    *(Scalar(name, I32) for name in ("MN", "splits", "M", "N")),
    launch=Launch(
        block=BG_THREADS,
        blocks=lambda v: -(-int(v["MN"]) // BG_THREADS) + -(-int(v["N"]) // BG_COLS),
    ),
    doc="C[i] = sum_s P[s, i], splits in order; with N > 0 also the bias gradient "
    "db[n] = sum_m dY[m, n] (as mlp_bias_grad adds it); dY and db may be NULL only with N = 0",
)

BIAS_GRAD = STEM.kernel(
    "mlp_bias_grad",
    In("dY", F32, "M*N"),
    Out("db", F32, "N"),
    Scalar("M", I32),
    Scalar("N", I32),
    launch=Launch(block=BG_THREADS, over="N", per_block=BG_COLS),
    doc="db[n] = sum_m dY[m, n] (32 columns x 32 row lanes per block)",
)

DUELING_FORWARD = STEM.kernel(
    "mlp_dueling_forward",
    In("VA", F32, "M*(A+1)"),
    Out("Q", F32, "M*A"),
    Scalar("M", I32),
    Scalar("A", I32),
    launch=Grid1D(over="M", block=128),
    doc="Q = V + A - mean(A) from VA [M, A+1] (advantages, then the value)",
)

DUELING_BACKWARD = STEM.kernel(
    "mlp_dueling_backward",
    In("dQ", F32, "M*A"),
    Out("dVA", F32, "M*(A+1)"),
    Scalar("M", I32),
    Scalar("A", I32),
    launch=Grid1D(over="M", block=128),
    doc="dVA = [dQ - mean(dQ), sum(dQ)]",
)
