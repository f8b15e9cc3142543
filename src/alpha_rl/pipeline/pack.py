"""A pack: several runs' trainers in one process, on one backend (one CUDA context).

Each agent is a whole `Trainer` of its own config (its seed, its ISV values, its kernels and
shapes even): its own ISV, kernel runtime, device arrays and stream, so agent s of a pack does
exactly what its run alone does, launch for launch and bit for bit. A pack's step launches every
agent's step, each on its own stream (as a CUDA graph once learning has started): the GPU runs
the agents' small, latency-bound kernels side by side instead of one run leaving most of it idle.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager

from omegaconf import DictConfig

from alpha_rl.pipeline.config import plan_run, with_market
from alpha_rl.pipeline.parts import layout_from_plan
from alpha_rl.pipeline.scale import Markets, market_and_config
from alpha_rl.pipeline.trainer import Trainer
from alpha_rl.session import open_sessions


class Pack:
    """The trainers of a pack's agents, stepped together."""

    def __init__(self, trainers: Sequence[Trainer]) -> None:
        self.trainers = list(trainers)

    def step(self) -> None:
        """One env step of every agent (no device->host copy): each agent's launches queue on its
        own stream, so the device may run them concurrently."""
        for trainer in self.trainers:
            trainer.step()

    def synchronize(self) -> None:
        """Wait for every agent's queued work."""
        self.trainers[0].backend.synchronize()


@contextmanager
def open_pack(jobs: Sequence[tuple[DictConfig, Mapping[str, str] | None]]) -> Iterator[Pack]:
    """The pack of `jobs` (each a composed config and its choices): every config planned and its
    market read before the backend opens, then one trainer per job on the shared backend; their
    CUDA graphs and the backend are released when the block ends, whatever happened in it."""
    planned, markets = [], Markets()
    for cfg, choices in jobs:
        plan = plan_run(cfg)
        market, cfg = market_and_config(cfg, plan.run.seed, plan.validation, markets)
        planned.append((cfg, choices, with_market(plan, cfg), market.train))
    jobs = [(cfg, layout_from_plan(cfg, choices, plan)) for cfg, choices, plan, _ in planned]
    with open_sessions(jobs) as sessions, ExitStack() as closing:
        trainers = []
        for session, (_, _, plan, book) in zip(sessions, planned, strict=True):
            trainers.append(Trainer(session, book, plan))
            closing.callback(trainers[-1].close)
        yield Pack(trainers)
