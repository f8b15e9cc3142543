"""One full training step (DESIGN §9) at the reference config, eager and as a CUDA graph.

    python3 benchmarks/train_step.py [--envs 4096 65536] [--json step.json] [--set agent.n_step=3]

Reference config: scale=gpu (B = 4096 envs, H = 32, hidden 256 x 256, batch 512, N = 2^20, HER on
(backward + forward), stride 7, β sentinel), one learner update per step. The trainer runs 300
steps first (the replay fills, learning starts), then: the step launched kernel by kernel (eager),
the step replayed as a CUDA graph, each timed with CUDA events (median of 7 repeats of 100
steps); a per-kernel breakdown of device time (events around every launch of 100 eager steps,
each step queued behind a spinning kernel so that host launch gaps are not counted);
and the launch floor: launches per step x the replay cost of one tiny kernel in a graph.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from cudagraph import Graph, reference_trainer, time_events

from alpha_rl.pipeline.step.trainer import Trainer

WARM = 300


SPIN = """
extern "C" __global__ void spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
"""


def breakdown(drv, trainer: Trainer, steps: int = 100) -> dict[str, tuple[int, float]]:
    """Kernel name -> (launches per step, device µs per step) over `steps` eager steps.

    Each step is queued behind a kernel that spins for ~4 ms, longer than the host takes to
    issue the step's launches and events, so the events time the kernels back to back and not
    the host's launch gaps (which inflate small kernels when the host is the slower side)."""
    from pycuda.compiler import SourceModule

    spin = SourceModule(SPIN, no_extern_c=True).get_function("spin")
    stream, marks = trainer.stream, []
    kernels = trainer.session.runtime.bound
    saved = [k._launch for k in kernels]
    for kernel in kernels:

        def timed(grid, values, s, _launch=kernel._launch, _name=kernel.decl.name):
            start, end = drv.Event(), drv.Event()
            start.record(stream)
            _launch(grid, values, s)
            end.record(stream)
            marks.append((_name, start, end))

        kernel._launch = timed
    for _ in range(steps):
        spin(np.int64(8_000_000), block=(1, 1, 1), grid=(1, 1), stream=stream)
        trainer.launch_step()
    for kernel, launch in zip(kernels, saved, strict=True):
        kernel._launch = launch
    stream.synchronize()
    out: dict[str, tuple[int, float]] = {}
    for name, start, end in marks:
        n, us = out.get(name, (0, 0.0))
        out[name] = (n + 1, us + start.time_till(end) * 1e3)
    return {
        k: (n // steps, us / steps) for k, (n, us) in sorted(out.items(), key=lambda x: -x[1][1])
    }


def launch_cost(drv, trainer: Trainer, launches: int) -> float:
    """µs per launch of a graph of `launches` one-element rng_fill kernels (the floor's unit)."""
    from alpha_rl.kernels import rng

    fill = trainer.session.runtime.bind(rng.FILL)
    be = trainer.backend
    u32, uniform = be.zeros(1, np.uint32), be.zeros(1, np.float32)
    args = dict(out_u32=u32, out_uniform=uniform, n=1, seed=0, rng_stream=0, offset=0)
    issue = lambda: [fill(**args, stream=trainer.stream) for _ in range(launches)]  # noqa: E731
    graph = Graph(trainer.stream, issue)
    try:
        return time_events(drv, trainer.stream, graph.launch, reps=50) / launches
    finally:
        graph.close()


def measure(envs: int, overrides: list[str]) -> dict:
    import pycuda.driver as drv

    with reference_trainer(envs, WARM, overrides) as trainer:
        eager = time_events(drv, trainer.stream, trainer.launch_step, reps=100)
        graph = Graph(trainer.stream, trainer.launch_step)
        try:
            graphed = time_events(drv, trainer.stream, graph.launch, reps=100)
        finally:
            graph.close()
        kernels = breakdown(drv, trainer)
        launches = sum(n for n, _ in kernels.values())
        unit = launch_cost(drv, trainer, launches)
    device = sum(us for _, us in kernels.values())
    her = sum(us for name, (_, us) in kernels.items() if name.startswith("her_"))
    return {
        "envs": envs, "eager_us": eager, "graph_us": graphed, "launches": launches,
        "device_us": device, "her_us": her, "her_share": her / graphed,
        "launch_unit_us": unit, "launch_floor_us": launches * unit,
        "env_steps_per_s": envs / (graphed * 1e-6), "kernels": kernels,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[4096, 65536])
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="Hydra overrides on top of the reference config")  # fmt: skip
    args = parser.parse_args()
    results = [measure(b, args.set) for b in args.envs]
    for r in results:
        print(f"\nB = {r['envs']}: top kernels by device time per step")
        for name, (n, us) in list(r["kernels"].items())[:12]:
            print(f"  {name:24s} x{n:<3d} {us:9.1f} µs  {100 * us / r['graph_us']:5.1f}%")
    print("\n| B | eager µs/step | graph µs/step | env-steps/s | launches | device µs | "
          "launch floor µs | HER share |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['envs']} | {r['eager_us']:.1f} | {r['graph_us']:.1f} | "
              f"{r['env_steps_per_s'] / 1e6:.2f} M | {r['launches']} | {r['device_us']:.1f} | "
              f"{r['launch_floor_us']:.1f} | {100 * r['her_share']:.1f}% |")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
