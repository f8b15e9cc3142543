"""Helpers shared by the benchmarks: CUDA-event timing, the reference-config trainer; CUDA graphs
come from the package."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from alpha_rl.backend.graph import Graph, graphs_available


def time_events(drv, stream, run: Callable[[], None], reps: int = 200, repeats: int = 7) -> float:
    """Median microseconds per call of `run()` between CUDA events recorded on `stream`."""
    for _ in range(20):
        run()
    samples = []
    for _ in range(repeats):
        start, end = drv.Event(), drv.Event()
        start.record(stream)
        for _ in range(reps):
            run()
        end.record(stream)
        end.synchronize()
        samples.append(start.time_till(end) * 1e3 / reps)
    return statistics.median(samples)


@contextmanager
def reference_trainer(envs: int, warm: int, overrides: Sequence[str] = ()) -> Iterator:
    """A cuda Trainer at the reference config (scale=gpu) with `envs` envs and any further Hydra
    `overrides` (e.g. agent.n_step=3), launching kernel by kernel (no graph), after `warm` steps
    (the replay fills, learning starts)."""
    from hydra import compose, initialize_config_dir

    from alpha_rl import paths
    from alpha_rl.pipeline.configure.config import plan_run, with_market
    from alpha_rl.pipeline.configure.parts import layout_from_plan
    from alpha_rl.pipeline.configure.scale import market_and_config
    from alpha_rl.pipeline.step.trainer import Trainer
    from alpha_rl.session import open_session

    with initialize_config_dir(config_dir=str(paths.conf_dir()), version_base="1.3"):
        chosen = ["backend=cuda", "scale=gpu", f"env.num_envs={envs}", *overrides]
        cfg = compose("train", overrides=chosen, return_hydra_config=True)
    plan = plan_run(cfg)
    market, cfg = market_and_config(cfg, plan.run.seed, plan.validation)
    plan = with_market(plan, cfg)  # reward.scale from the market
    with open_session(cfg, layout_from_plan(cfg, dict(cfg.hydra.runtime.choices), plan)) as session:
        trainer = Trainer(session, market.train, plan)
        trainer.use_graph = False
        for _ in range(warm):
            trainer.step()
        yield trainer


__all__ = ["Graph", "graphs_available", "reference_trainer", "time_events"]
