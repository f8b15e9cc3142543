"""Env-steps per second of the environment alone, numpy vs cuda.

    python3 benchmarks/env_throughput.py [--sizes 1024 16384 131072] [--backends numpy cuda]

One step here is what the environment contributes to a training step (DESIGN §9 steps 1, 3, 4,
5): perceive h_t, experience_env_step, perceive h_tp1, reward diagnostics, on the default config
(synthetic waves, stride 7, β sentinel, H = 32), with actions drawn at random beforehand. Wall
time per step after warm-up, the device synchronised before and after the timed loop; the median
of 5 repeats is reported, with env-steps/s = B / (time per step).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from hydra import compose, initialize_config_dir

from alpha_rl import paths
from alpha_rl.backend.base import Backend
from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.env import EnvConfig, Environment
from alpha_rl.isv import DeviceIsv
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.pipeline.configure.config import layout_from_config, plan_run
from alpha_rl.pipeline.configure.scale import market_and_config


def _environment(backend: Backend, num_envs: int) -> Environment:
    with initialize_config_dir(config_dir=str(paths.conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=[f"env.num_envs={num_envs}"])
    market, cfg = market_and_config(cfg, int(cfg.seed), plan_run(cfg).validation)
    layout = layout_from_config(cfg)
    runtime = KernelRuntime(backend, {"RC_STRIDE": int(cfg.reward.stride)})
    isv = DeviceIsv(layout, backend)
    env_cfg = EnvConfig.from_cfg(cfg.env)
    return Environment(env_cfg, market.train, runtime, isv, int(cfg.seed), int(cfg.reward.stride))


def time_steps(env: Environment, steps: int, warmup: int, repeats: int = 5) -> float:
    """Median seconds per environment step."""
    be, n = env.backend, env.num_envs
    gen = np.random.default_rng(0)
    actions = [be.upload(gen.integers(0, 3, size=n).astype(np.int32)) for _ in range(8)]
    aux = be.upload(gen.random(n).astype(np.float32))
    h_t, h_tp1 = be.alloc(n * env.obs_dim, np.float32), be.alloc(n * env.obs_dim, np.float32)

    def one(i: int) -> None:
        env.perceive(h_t)
        env.step(actions[i % 8], aux)
        env.perceive(h_tp1)
        env.reward_diagnostics()

    for i in range(warmup):
        one(i)
    samples = []
    for _ in range(repeats):
        be.synchronize()
        start = time.perf_counter()
        for i in range(steps):
            one(i)
        be.synchronize()
        samples.append((time.perf_counter() - start) / steps)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 16384, 131072])
    parser.add_argument("--backends", nargs="+", default=["numpy", "cuda"])
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args()
    rows = []
    for name in args.backends:
        if name == "cuda":
            from alpha_rl.backend.cuda import CudaBackend

            backend: Backend = CudaBackend()
        else:
            backend = NumpyBackend()
        with backend:
            device = backend.describe().get("gpu") or backend.describe().get("cpu")
            for size in args.sizes:
                env = _environment(backend, size)
                steps = 500 if name == "cuda" else max(3, 200_000 // size)
                seconds = time_steps(env, steps, warmup=max(2, steps // 10))
                rows.append(dict(backend=name, device=device, B=size, us_per_step=seconds * 1e6,
                                 env_steps_per_s=size / seconds))  # fmt: skip
                print(f"{name:6s} B={size:7d} {seconds * 1e6:10.1f} us/step "
                      f"{size / seconds:14,.0f} env-steps/s", flush=True)  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
