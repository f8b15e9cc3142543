"""One replay cycle per step: push 4096 + rebuild + sample 512 + update 512.

    python3 benchmarks/replay_cycle.py [--log2 20 24] [--json out.json]

Rows: alpha_rl on cuda launched one kernel at a time (the runtime's checked launches), the same
kernels captured once into a CUDA graph (cuda-bindings on PyCUDA's stream) and replayed, the
numpy backend, and the peer a user would otherwise write: a PyTorch GPU PER (priorities in a
tensor, cumsum + searchsorted). H = 32, alpha 0.6, the buffer full (random priorities). GPU rows
are timed with CUDA events around 200 cycles, median of 7 repeats; numpy with the wall clock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from cudagraph import Graph, graphs_available, time_events

from alpha_rl.backend.base import Backend
from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.isv import numbers_isv
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.pipeline.configure.parts import replay_numbers
from alpha_rl.reference.per import HEAD
from alpha_rl.replay import Replay, ReplayConfig

H, PUSH, BATCH, ALPHA = 32, 4096, 512, 0.6


def make(backend: Backend, log2: int) -> tuple[Replay, tuple, object]:
    """A full replay, one push's worth of inputs and a TD-error vector, on `backend`."""
    cfg = ReplayConfig(log2, ALPHA, 0.4, 100_000, 1e-6, BATCH)
    isv = numbers_isv(replay_numbers(cfg), backend)  # the replay's numbers
    rp = Replay(cfg, H, KernelRuntime(backend, {}), seed=0, max_push=PUSH, isv=isv)
    gen = np.random.default_rng(0)
    backend.write(rp.arrays["leaves"], gen.random(cfg.capacity).astype(np.float32))
    state = np.zeros(8, np.uint64)
    state[HEAD] = cfg.capacity
    backend.write(rp.arrays["state"], state)
    up = backend.upload
    inputs = (
        up(gen.normal(size=PUSH * H).astype(np.float32)),
        up(gen.normal(size=PUSH * H).astype(np.float32)),
        up(gen.integers(0, 3, PUSH).astype(np.int32)),
        up(gen.normal(size=PUSH).astype(np.float32)),
        up(np.zeros(PUSH, np.float32)),
    )
    rp.push(*inputs)
    rp.rebuild()
    return rp, inputs, up(gen.normal(size=BATCH).astype(np.float32))


def cycle(rp: Replay, inputs: tuple, delta, stream=None) -> None:
    rp.push(*inputs, stream=stream)
    rp.rebuild(stream=stream)
    indices, _ = rp.sample(stream=stream)
    rp.update(indices, delta, stream=stream)


def ours_cuda(log2: int, breakdown: bool = False) -> tuple[float, float | None]:
    """(eager µs, graph-replay µs or None when cuda-bindings is missing); with `breakdown`,
    also print each operation's graph-replay time."""
    import pycuda.driver as drv

    from alpha_rl.backend.cuda import CudaBackend

    with CudaBackend() as be:
        rp, inputs, delta = make(be, log2)
        stream = drv.Stream()
        eager = time_events(drv, stream, lambda: cycle(rp, inputs, delta, stream))
        if not graphs_available():
            return eager, None
        whole = Graph(stream, lambda: cycle(rp, inputs, delta, stream))
        graphed = time_events(drv, stream, whole.launch)
        whole.close()
        if breakdown:
            ops = {
                "push": lambda: rp.push(*inputs, stream=stream),
                "rebuild": lambda: rp.rebuild(stream=stream),
                "sample": lambda: rp.sample(stream=stream),
                "update": lambda: rp.update(rp.arrays["indices"], delta, stream=stream),
            }
            for name, op in ops.items():
                graph = Graph(stream, op)
                us = time_events(drv, stream, graph.launch)
                graph.close()
                print(f"  N=2^{log2} {name:8s} {us:8.1f} us (graph replay)", flush=True)
        return eager, graphed


def ours_numpy(log2: int, reps: int = 20) -> float:
    rp, inputs, delta = make(NumpyBackend(), log2)
    cycle(rp, inputs, delta)
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(reps):
            cycle(rp, inputs, delta)
        samples.append((time.perf_counter() - start) / reps * 1e6)
    return statistics.median(samples)


def torch_peer(log2: int) -> float:
    """The same cycle as a user would write it in PyTorch (eager, on the GPU)."""
    import torch

    dev, N = torch.device("cuda"), 1 << log2
    g = torch.Generator(device=dev).manual_seed(0)
    s_h_t, s_h_tp1 = torch.zeros(N, H, device=dev), torch.zeros(N, H, device=dev)
    s_a, s_r, s_d = (torch.zeros(N, device=dev, dtype=torch.int32), torch.zeros(N, device=dev),
                     torch.zeros(N, device=dev))  # fmt: skip
    prio = torch.rand(N, device=dev, generator=g)
    max_p = prio.max()
    h_t, h_tp1 = torch.randn(PUSH, H, device=dev), torch.randn(PUSH, H, device=dev)
    a, r, d = (torch.randint(0, 3, (PUSH,), device=dev, dtype=torch.int32),
               torch.randn(PUSH, device=dev), torch.zeros(PUSH, device=dev))  # fmt: skip
    delta = torch.randn(BATCH, device=dev)
    state = {"head": N, "step": 0}
    ar_push, ar_m = torch.arange(PUSH, device=dev), torch.arange(BATCH, device=dev)

    def run() -> None:
        nonlocal max_p
        idx = (state["head"] + ar_push) % N
        s_h_t[idx], s_h_tp1[idx], s_a[idx], s_r[idx], s_d[idx] = h_t, h_tp1, a, r, d
        prio[idx] = max_p
        state["head"] += PUSH
        cumsum = torch.cumsum(prio, 0)
        total = cumsum[-1]
        u = (ar_m + torch.rand(BATCH, device=dev, generator=g)) / BATCH * total
        sampled = torch.searchsorted(cumsum, u).clamp_(max=N - 1)
        beta = min(1.0, 0.4 + 0.6 * state["step"] / 100_000)
        w = (N * prio[sampled] / total) ** -beta
        w = w / w.max()
        prio[sampled] = (delta.abs() + 1e-6) ** ALPHA
        max_p = torch.maximum(max_p, prio[sampled].max())
        state["step"] += 1

    stream = torch.cuda.current_stream()
    for _ in range(20):
        run()
    samples = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        for _ in range(200):
            run()
        end.record(stream)
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / 200)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--log2", type=int, nargs="+", default=[20, 24])
    parser.add_argument("--json", default=None)
    parser.add_argument("--breakdown", action="store_true", help="time each operation alone")
    args = parser.parse_args()
    rows = []
    for log2 in args.log2:
        eager, graphed = ours_cuda(log2, args.breakdown)
        row = dict(N=f"2^{log2}", cuda_eager_us=eager, cuda_graph_us=graphed,
                   numpy_us=ours_numpy(log2), torch_us=torch_peer(log2))  # fmt: skip
        rows.append(row)
        best = graphed if graphed is not None else eager
        graph_text = "n/a" if graphed is None else f"{graphed:8.1f} us"
        print(
            f"N=2^{log2}: cuda eager {eager:8.1f} us | cuda graph {graph_text} | "
            f"numpy {row['numpy_us']:10.1f} us | torch {row['torch_us']:8.1f} us | "
            f"torch/ours {row['torch_us'] / best:5.2f}x",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
