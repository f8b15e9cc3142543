"""The GEMMs of one training step, each on both tiles of mlp_gemm, against cuBLAS.

    python3 benchmarks/gemm_shapes.py [--envs 4096] [--batch 512] [--json out.json]

For every product shape the step launches (acting forward over the envs, the learner's online
forward over h_t and h_tp1 together and target forward, the input and weight gradients; H = 32,
hidden 256 x 256, 3 actions) it times mlp_gemm (32 x 32 tiles), mlp_gemm_64 (64 x 64 tiles) and
torch.matmul in FP32 with TF32 off (cuBLAS, what a hand-written FP32 kernel is measured
against), and the TF32 tensor-core tiles (mlp_gemm_tf32_32, _64 and mlp_gemm_tf32) against
cuBLAS with TF32 on; the Q head's forward also on mlp_gemm_rows (a warp per row) and the weight
gradients as the step runs them over 256+ rows (split-K: mlp_gemm_partial + mlp_sum_splits). Each is
launched 50 times inside one CUDA graph (cuBLAS in a torch CUDA graph), so launch cost is not in
the figure; CUDA events, median of 7 repeats. Prints µs per product, TFLOP/s of what the step
uses and the per-step totals.
"""

from __future__ import annotations

import argparse
import json
from functools import partial

import numpy as np
from cudagraph import Graph, graphs_available, time_events

from alpha_rl.agent import MAX_SPLITS, SPLIT_ROWS, gemm_kind
from alpha_rl.kernels import mlp
from alpha_rl.kernels.runtime import KernelRuntime

H, HIDDEN, OUT = 32, 256, 3
INNER = 50  # launches per graph


def shapes(envs: int, batch: int) -> list[tuple[str, int, int, int, int, int, int]]:
    """(label, M, N, K, trans_a, trans_b, launches per step) of the step's products."""
    fwd = lambda rows: [(rows, HIDDEN, H), (rows, HIDDEN, HIDDEN), (rows, OUT, HIDDEN)]  # noqa: E731
    out = [(f"act fwd {m}x{n}x{k}", m, n, k, 0, 1, 1) for m, n, k in fwd(envs)]
    out += [(f"online fwd {m}x{n}x{k}", m, n, k, 0, 1, 1) for m, n, k in fwd(2 * batch)]
    out += [(f"target fwd {m}x{n}x{k}", m, n, k, 0, 1, 1) for m, n, k in fwd(batch)]
    out += [
        (f"dX {batch}x{HIDDEN}x{OUT}", batch, HIDDEN, OUT, 0, 0, 1),
        (f"dX {batch}x{HIDDEN}x{HIDDEN}", batch, HIDDEN, HIDDEN, 0, 0, 1),
        (f"dW {OUT}x{HIDDEN}x{batch}", OUT, HIDDEN, batch, 1, 0, 1),
        (f"dW {HIDDEN}x{HIDDEN}x{batch}", HIDDEN, HIDDEN, batch, 1, 0, 1),
        (f"dW {HIDDEN}x{H}x{batch}", HIDDEN, H, batch, 1, 0, 1),
    ]
    return out


def per_launch(drv, stream, launch) -> float:
    """Device µs of one `launch()`: INNER of them captured in one graph, replayed."""
    graph = Graph(stream, lambda: [launch() for _ in range(INNER)])
    try:
        return time_events(drv, stream, graph.launch, reps=20) / INNER
    finally:
        graph.close()


def cublas(torch, a, b) -> float:
    """Device µs of torch.matmul(a, b): INNER of them in one torch CUDA graph, replayed."""
    out = torch.matmul(a, b)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture, as torch asks
        for _ in range(3):
            torch.matmul(a, b, out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(INNER):
            torch.matmul(a, b, out=out)
    samples = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / (20 * INNER))
    return float(np.median(samples))


def measure(envs: int, batch: int) -> list[dict]:
    import pycuda.driver as drv
    import torch

    from alpha_rl.backend.cuda import CudaBackend

    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    with CudaBackend() as be:
        runtime = KernelRuntime(be, {})
        kernels = {"mlp_gemm": runtime.bind(mlp.GEMM), "mlp_gemm_64": runtime.bind(mlp.GEMM_64),
                   "mlp_gemm_128": runtime.bind(mlp.GEMM_128),
                   "mlp_gemm_tf32_32": runtime.bind(mlp.GEMM_TF32_32),
                   "mlp_gemm_tf32_64": runtime.bind(mlp.GEMM_TF32_64),
                   "mlp_gemm_tf32": runtime.bind(mlp.GEMM_TF32)}  # fmt: skip
        gemm_partial, sum_splits = runtime.bind(mlp.GEMM_PARTIAL), runtime.bind(mlp.SUM_SPLITS)
        gemm_rows = runtime.bind(mlp.GEMM_ROWS)
        stream = drv.Stream()
        gen = np.random.default_rng(0)
        for label, M, N, K, ta, tb, per_step in shapes(envs, batch):
            A = be.upload(gen.normal(size=M * K).astype(np.float32))
            B = be.upload(gen.normal(size=K * N).astype(np.float32))
            bias = be.upload(gen.normal(size=N).astype(np.float32)) if tb else None
            C = be.zeros(M * N, np.float32)
            row = {"shape": label, "M": M, "N": N, "K": K, "per_step": per_step}
            args = dict(
                A=A,
                B=B,
                bias=bias,
                mask=None,
                C=C,
                M=M,
                N=N,
                K=K,
                trans_a=ta,
                trans_b=tb,
                relu=int(tb),
            )
            for name, k in kernels.items():
                row[name] = per_launch(drv, stream, partial(k, **args, stream=stream))
            narrow = bool(tb) and N <= mlp.ROWS_MAX_N
            if narrow:  # the Q head of a forward pass: a warp per row
                head = partial(
                    gemm_rows, X=A, W=B, bias=bias, Y=C, M=M, N=N, K=K, relu=0, stream=stream
                )
                row["mlp_gemm_rows"] = per_launch(drv, stream, head)
            splits = max(1, min(MAX_SPLITS, K // SPLIT_ROWS)) if ta else 1
            if splits > 1:  # the weight gradients: split-K, as QNetwork.backward runs them
                P = be.zeros(splits * M * N, np.float32)
                parts = partial(
                    gemm_partial,
                    A=A,
                    B=B,
                    P=P,
                    M=M,
                    N=N,
                    K=K,
                    trans_a=ta,
                    trans_b=tb,
                    splits=splits,
                    stream=stream,
                )
                dY = be.zeros(K * M, np.float32)  # the bias gradient shares the launch
                db = be.zeros(M, np.float32)
                add = partial(sum_splits, P=P, dY=dY, C=C, db=db, MN=M * N, splits=splits, M=K,
                              N=M, stream=stream)  # fmt: skip
                both = lambda p=parts, a=add: [p(), a()]  # noqa: E731
                row[f"split-K x{splits}"] = per_launch(drv, stream, both)
            ta_ = torch.randn(K, M, device="cuda").t() if ta else torch.randn(M, K, device="cuda")
            tb_ = torch.randn(N, K, device="cuda").t() if tb else torch.randn(K, N, device="cuda")
            row["cublas"] = cublas(torch, ta_, tb_)
            torch.backends.cuda.matmul.allow_tf32 = True
            row["cublas_tf32"] = cublas(torch, ta_, tb_)
            torch.backends.cuda.matmul.allow_tf32 = False
            row["step_uses"] = (
                "mlp_gemm_rows"
                if narrow
                else f"split-K x{splits}"
                if splits > 1
                else f"mlp_{gemm_kind(M, N, K)}"
            )
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    if not graphs_available():
        raise SystemExit("gemm_shapes needs cuda-bindings (CUDA graphs): pip install '.[gpu]'")
    rows = measure(args.envs, args.batch)
    columns = {"mlp_gemm": "gemm 32", "mlp_gemm_64": "gemm 64", "mlp_gemm_128": "gemm 128",
               "cublas": "cuBLAS", "mlp_gemm_tf32_32": "tf32 32", "mlp_gemm_tf32_64": "tf32 64",
               "mlp_gemm_tf32": "tf32 128", "cublas_tf32": "cuBLAS tf32"}  # fmt: skip
    print(f"{'product (M x N x K)':28} {'x/step':>6} "
          + " ".join(f"{c:>11}" for c in columns.values())
          + f" {'TFLOP/s used':>12}  FP32 step uses")  # fmt: skip
    totals = dict.fromkeys([*columns, "used"], 0.0)
    for r in rows:
        used = r[r["step_uses"]]
        tflops = 2 * r["M"] * r["N"] * r["K"] / used / 1e6
        print(f"{r['shape']:28} {r['per_step']:>6} "
              + " ".join(f"{r[key]:>11.2f}" for key in columns)
              + f" {tflops:>12.2f}  {r['step_uses']} ({used:.2f})")  # fmt: skip
        for key in columns:
            totals[key] += r[key] * r["per_step"]
        totals["used"] += used * r["per_step"]
    print(f"{'per step (µs)':28} {'':>6} " + " ".join(f"{totals[k]:>11.2f}" for k in columns)
          + f"  as used: {totals['used']:.2f}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"envs": args.envs, "batch": args.batch, "rows": rows, "totals": totals},
                      fh, indent=2)  # fmt: skip


if __name__ == "__main__":
    main()
