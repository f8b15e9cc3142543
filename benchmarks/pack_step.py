"""A agents in one process, stepped together: with the agent axis (agents whose shapes agree
launch each kernel of the step once for all, as one CUDA graph) or alone (each agent its own
launches, stream and graph).

    python3 benchmarks/pack_step.py [--agents 1 2 4 8 16 32] [--envs 1024 4096] [--alone]
        [--json pack.json]
    python3 benchmarks/pack_step.py --agents 1 16 --profile     # each merged kernel's µs
    python3 benchmarks/pack_step.py --agents 1 5 20 --audit     # an audited step's host time

Reference config (scale=gpu, as benchmarks/train_step.py), agent s with seed s. Each agent runs
its warm-up steps (the replay fills, learning starts, the graph is captured); then the pack's
step is timed by the host clock around 200 steps of all agents between two synchronizations
(median of 5 repeats): µs per pack step, and µs per agent-step (that over A); the GPU memory in
use (the context's included) after the warm-up. `--profile`: the first group's step launched
operation by operation between CUDA events (no graph), the median µs of each over 20 steps.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import time

WARM = 300


def open_pack(*args):
    from alpha_rl.pipeline.step.pack import open_pack

    return open_pack(*args)


def jobs_of(agents: int, overrides: list[str]) -> list:
    from hydra import compose, initialize_config_dir

    from alpha_rl import paths

    with initialize_config_dir(config_dir=str(paths.conf_dir()), version_base="1.3"):
        jobs = []
        for s in range(agents):
            chosen = ["backend=cuda", "scale=gpu", f"seed={s}", *overrides]
            cfg = compose("train", overrides=chosen, return_hydra_config=True)
            jobs.append((cfg, dict(cfg.hydra.runtime.choices)))
    return jobs


def memory_used() -> int:
    import pycuda.driver as drv

    free, total = drv.mem_get_info()
    return total - free


def measure(agents: int, envs: int, overrides: list[str], axis: bool, steps: int = 200) -> dict:
    with open_pack(jobs_of(agents, [f"env.num_envs={envs}", *overrides]), axis) as pack:
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
        graphs = sum(lockstep.graph is not None for lockstep in pack.locksteps)
        used = memory_used()
    return {"agents": agents, "envs": envs, "axis": axis, "pack_us": pack_us,
            "agent_step_us": pack_us / agents, "graphs": graphs,
            "groups": len(pack.locksteps), "used_mib": used / 2**20}  # fmt: skip


def profile(agents: int, envs: int, overrides: list[str], repeats: int = 20) -> list[tuple]:
    """Where a merged step's time goes: each operation of the first group's step (each kernel
    launched once for all agents) timed by CUDA events, launched one by one (no graph), median
    over `repeats` steps: [("<stage> <operation>", µs)], the slowest first."""
    import pycuda.driver as drv

    from alpha_rl.kernels.tape import merge
    from alpha_rl.pipeline.step.stages import record_stages

    with open_pack(jobs_of(agents, [f"env.num_envs={envs}", *overrides])) as pack:
        for _ in range(WARM):
            pack.step()
        lockstep = pack.locksteps[0]
        times: dict[tuple, list[float]] = {}
        for _ in range(repeats):
            pack.synchronize()
            recorded = [record_stages(t) for t in lockstep.trainers]
            stage = [s.number for s, ops in recorded[0] for _ in ops]  # each op's stage
            ops = merge([[op for _, ops in r for op in ops] for r in recorded], lockstep.span)
            marks = [drv.Event() for _ in range(len(ops) + 1)]
            marks[0].record(lockstep.stream)
            for op, mark in zip(ops, marks[1:], strict=True):
                op.run(lockstep.stream)
                mark.record(lockstep.stream)
            marks[-1].synchronize()
            for k, op in enumerate(ops):
                calls = getattr(op, "calls", None) or ([op] if hasattr(op, "kernel") else None)
                name = calls[0].kernel.decl.name if calls else type(op).__name__
                key = (k, f"{stage[k]:>2} {name}")
                times.setdefault(key, []).append(marks[k + 1].time_since(marks[k]) * 1e3)
            for trainer in lockstep.trainers:
                trainer.t += 1
    return sorted(((name, statistics.median(v)) for (_, name), v in times.items()),
                  key=lambda kv: -kv[1])  # fmt: skip


def audit_cost(agents: int, envs: int, overrides: list[str], axis: bool,
               repeats: int = 3) -> dict:  # fmt: skip
    """The host's time for one audited step of every agent (the step, each audited kernel's
    arrays read, the oracles and comparisons done in a pool of threads, one per agent up to
    the CPUs but one), median of `repeats`: with the agent axis (each group's arrays read once
    and its kernels launched once for all) or each agent alone."""
    from concurrent.futures import ThreadPoolExecutor

    from alpha_rl.pipeline.step.workers import worker_count

    threads = max(1, worker_count(agents))  # a pack's judges (one for a lone agent)
    with open_pack(jobs_of(agents, [f"env.num_envs={envs}", *overrides]), axis) as pack:
        for _ in range(WARM):
            pack.step()
        samples, mismatches = [], 0
        with ThreadPoolExecutor(threads) as judges:
            for _ in range(repeats):
                pack.synchronize()
                start = time.perf_counter()
                audits = pack.audited_step(judges)
                mismatches += sum(audit.total for audit in audits)  # waits for every judgement
                samples.append(time.perf_counter() - start)
    ms = statistics.median(samples) * 1e3
    return {"agents": agents, "envs": envs, "axis": axis, "audit_ms": ms,
            "audit_ms_per_agent": ms / agents, "mismatches": mismatches}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--envs", type=int, nargs="+", default=[4096])
    parser.add_argument("--alone", action="store_true", help="also each agent alone")
    parser.add_argument("--profile", action="store_true", help="time each merged operation")
    parser.add_argument(
        "--audit",
        action="store_true",
        help="time an audited step of every agent, agent axis and alone",
    )
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="Hydra overrides on top of the reference config")  # fmt: skip
    args = parser.parse_args()
    if args.profile:
        for envs in args.envs:
            for agents in args.agents:
                ops = profile(agents, envs, args.set)
                by_kernel, by_stage = collections.Counter(), collections.Counter()
                for name, us in ops:
                    by_kernel[name] += us
                    by_stage[name.split()[0]] += us
                total = sum(by_kernel.values())
                print(f"\nB {envs}, A {agents}: {len(ops)} operations, {total:.1f} µs "
                      f"({total / agents:.1f} per agent)")  # fmt: skip
                for name, us in by_kernel.most_common(12):
                    print(f"  {name:28s} {us:8.1f} µs  {100 * us / total:5.1f} %")
                print("  by stage: " + ", ".join(f"{s} {us:.1f}" for s, us in by_stage.items()))
        return
    if args.audit:
        print("\n| B | agents A | launches | ms per audited step | ms per agent | mismatches |")
        print("|---|---|---|---|---|---|")
        for envs in args.envs:
            for agents in args.agents:
                for axis in (True, False):
                    r = audit_cost(agents, envs, args.set, axis)
                    how = "agent axis" if axis else "each alone"
                    print(
                        f"| {envs} | {agents} | {how} | {r['audit_ms']:.0f} | "
                        f"{r['audit_ms_per_agent']:.0f} | {r['mismatches']} |",
                        flush=True,
                    )
        return
    results = []
    for envs in args.envs:
        for agents in args.agents:
            for axis in (True, False) if args.alone else (True,):
                results.append(measure(agents, envs, args.set, axis))
                print(results[-1], flush=True)
    print("\n| B | agents A | launches | µs per pack step | µs per agent-step | graphs | MiB |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        how = "agent axis" if r["axis"] else "each alone"
        print(f"| {r['envs']} | {r['agents']} | {how} | {r['pack_us']:.1f} | "
              f"{r['agent_step_us']:.1f} | {r['graphs']} | {r['used_mib']:.0f} |")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
