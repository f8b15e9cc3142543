"""S agents in one process: S trainers on one CUDA context, each on its own stream with its own
CUDA graph, stepped together (every agent's graph launched, then the next step).

    python3 benchmarks/pack_step.py [--agents 1 5 20] [--envs 4096] [--json pack.json]

Reference config (scale=gpu, as benchmarks/train_step.py), agent s with seed s. Each trainer runs
its warm-up steps (the replay fills, learning starts, its graph is captured); then the pack's
step is timed by the host clock around 200 steps of all agents between two synchronizations
(median of 5 repeats): µs per pack step, and µs per agent-step (that over S).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

WARM = 300


def measure(agents: int, envs: int, overrides: list[str], steps: int = 200) -> dict:
    from hydra import compose, initialize_config_dir

    from alpha_rl import paths
    from alpha_rl.pipeline.pack import open_pack

    with initialize_config_dir(config_dir=str(paths.conf_dir()), version_base="1.3"):
        jobs = []
        for s in range(agents):
            chosen = ["backend=cuda", "scale=gpu", f"env.num_envs={envs}", f"seed={s}", *overrides]
            cfg = compose("train", overrides=chosen, return_hydra_config=True)
            jobs.append((cfg, dict(cfg.hydra.runtime.choices)))
    with open_pack(jobs) as pack:
        for _ in range(WARM):
            pack.step()
        samples = []
        for _ in range(6):
            pack.synchronize()
            start = time.perf_counter()
            for _ in range(steps):
                pack.step()
            pack.synchronize()
            samples.append((time.perf_counter() - start) * 1e6 / steps)
        pack_us = statistics.median(samples[1:])
        graphs = sum(t.graph is not None for t in pack.trainers)
    return {"agents": agents, "envs": envs, "pack_us": pack_us, "agent_step_us": pack_us / agents,
            "graphs": graphs}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 5, 20])
    parser.add_argument("--envs", type=int, default=4096)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="Hydra overrides on top of the reference config")  # fmt: skip
    args = parser.parse_args()
    results = []
    for s in args.agents:
        results.append(measure(s, args.envs, args.set))
        print(results[-1], flush=True)
    print("\n| agents S | µs per pack step | µs per agent-step | graphs |")
    print("|---|---|---|---|")
    for r in results:
        print(f"| {r['agents']} | {r['pack_us']:.1f} | {r['agent_step_us']:.1f} | {r['graphs']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
