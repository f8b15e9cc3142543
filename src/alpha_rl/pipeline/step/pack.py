"""A pack: several runs' trainers in one process, on one backend (one CUDA context).

Each agent is a whole `Trainer` of its own config (its seed, its ISV values, its kernels and
shapes even): its own ISV, kernel runtime and device arrays, so agent s of a pack does exactly
what its run alone does, bit for bit. Agents whose shapes agree (pipeline/step/lockstep.py's
`group_key`) step as one: their arrays are slices of one pool and each kernel of their step is
launched once for all of them, with the agent axis (as one CUDA graph once learning has
started). Groups of other shapes step beside them, each on its own stream, so the device runs
their launches side by side. With `agent_axis=False` every agent steps alone on its own stream
(the comparison the agent axis is measured against).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from contextlib import ExitStack, contextmanager

from omegaconf import DictConfig

from alpha_rl.kernels.audit import KernelAudit
from alpha_rl.pipeline.configure.config import plan_run, with_market
from alpha_rl.pipeline.configure.parts import layout_from_plan
from alpha_rl.pipeline.configure.scale import Markets, market_and_config
from alpha_rl.pipeline.step.lockstep import group_key, locksteps, seats
from alpha_rl.pipeline.step.trainer import Trainer
from alpha_rl.session import open_sessions


class Pack:
    """The trainers of a pack's agents, stepped together: a Lockstep per group of agents whose
    shapes agree (or one per agent)."""

    def __init__(self, trainers: Sequence[Trainer], groups: Sequence[Hashable]) -> None:
        self.trainers = list(trainers)
        places = seats(range(len(self.trainers)), groups)
        for agent, trainer in enumerate(self.trainers):
            places[agent].join(trainer)
        self.locksteps = locksteps(places)

    def step(self) -> None:
        """One env step of every agent (no device->host copy): each group's launches queue on
        its own stream, so the device may run the groups concurrently."""
        for lockstep in self.locksteps:
            lockstep.step()

    def audited_step(self, judges: Executor | None = None) -> list[KernelAudit]:
        """One env step of every agent with each audited kernel checked against its oracle (in
        `judges`, a thread pool, when given): each group's audited launches read every array
        once for all its agents and launch once (kernels/audit.py's audit_agents). Each agent's
        KernelAudit, in agent order."""
        with ExitStack() as auditing:
            audits = [auditing.enter_context(t.auditing(judges)) for t in self.trainers]
            for lockstep in self.locksteps:
                lockstep.step(audited=True)
        return audits

    def synchronize(self) -> None:
        """Wait for every agent's queued work."""
        self.trainers[0].backend.synchronize()

    def close(self) -> None:
        for lockstep in self.locksteps:
            lockstep.close()


@contextmanager
def open_pack(jobs: Sequence[tuple[DictConfig, Mapping[str, str] | None]],
              agent_axis: bool = True) -> Iterator[Pack]:  # fmt: skip
    """The pack of `jobs` (each a composed config and its choices): every config planned and its
    market read before the backend opens, then one trainer per job on the shared backend; their
    CUDA graphs and the backend are released when the block ends, whatever happened in it."""
    planned, markets = [], Markets()
    for cfg, choices in jobs:
        plan = plan_run(cfg)
        market, cfg = market_and_config(cfg, plan.run.seed, plan.validation, markets)
        planned.append((cfg, choices, with_market(plan, cfg), market.train))
    jobs = [(cfg, layout_from_plan(cfg, choices, plan)) for cfg, choices, plan, _ in planned]
    groups = [group_key(cfg) if agent_axis else i for i, (cfg, _) in enumerate(jobs)]
    with open_sessions(jobs, groups) as sessions, ExitStack() as closing:
        trainers = []
        for session, (_, _, plan, book) in zip(sessions, planned, strict=True):
            trainers.append(Trainer(session, book, plan))
            closing.callback(trainers[-1].close)
        pack = Pack(trainers, groups)
        closing.callback(pack.close)
        yield pack
