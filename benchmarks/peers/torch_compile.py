"""PyTorch with torch.compile: torch_graph's static step, compiled, in each mode tried.

    python3 -m benchmarks.peers.torch_compile [--envs 4096 65536] [--precision float32 tf32]

`default` (Inductor's fused Triton kernels, launched one by one) and `reduce-overhead` (the same
replayed through CUDA graphs) are each timed; a mode that does not compile is reported with its
error, never left out. The backward pass stays eager autograd (a graph break at `backward()`).
"""

from __future__ import annotations

import torch

from benchmarks.peers.common import arguments, median_us, report
from benchmarks.peers.torch_eager import set_precision
from benchmarks.peers.torch_graph import StaticPeer, sanity

MODES = ("default", "reduce-overhead")


def compiled(B: int, mode: str, log2: int | None = None) -> tuple[StaticPeer, object]:
    """A peer and its step compiled in `mode`."""
    peer = StaticPeer(B, torch.device("cuda"), *(() if log2 is None else (log2,)))
    return peer, torch.compile(peer.step, mode=mode, fullgraph=False)


def measure(B: int, mode: str, precision: str) -> float:
    """Median µs per step of the compiled step (common.median_us; compilation in the warm-up)."""
    set_precision(precision)
    peer, compiled_step = compiled(B, mode)

    def step() -> None:
        torch.compiler.cudagraph_mark_step_begin()  # reduce-overhead: the last replay's outputs
        compiled_step()  # are the state itself, which the next step overwrites

    sanity(peer, step)

    def run(n: int) -> None:
        for _ in range(n):
            step()

    return median_us(run, torch.cuda.synchronize)


def main() -> None:
    args = arguments(__doc__)
    rows = []
    for precision in args.precision:
        for mode in MODES:
            for B in args.envs:
                try:
                    us: float | str = measure(B, mode, precision)
                except Exception as exc:  # reported in the table: a mode that fails is a result
                    us = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                rows.append({"peer": f"torch_compile ({mode})", "envs": B,
                             "precision": precision, "us": us})  # fmt: skip
    report(rows, args.json)


if __name__ == "__main__":
    main()
