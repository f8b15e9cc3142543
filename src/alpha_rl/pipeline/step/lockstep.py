"""Agents that step together: one launch of each kernel of the step for all of them.

Runs whose configs differ only in numbers (what the parts hand the kernels in ISV slots: the
learning rate, the discount, HER's threshold, ...) and in their identity (seed, tracking, where
they write) have the same shapes: `group_key` says which runs those are. Their sessions share
an AgentPool and a stream (session.open_sessions' `groups`), and a `Lockstep` steps their
trainers: each trainer's step is recorded, the recordings merged (kernels/tape.py) and launched
once with the agent axis, and once every agent learns, captured as one CUDA graph. Agent a of a
lockstep is its run alone, bit for bit: the same kernels on its own arrays, its own seed and its
own numbers, only launched beside the others'.

In a pack of runs (pipeline/life/run.py), each run is a generator the pack advances in turn: a run
takes its step by arriving at its lockstep (a `Seat`), and the step of every agent is launched
when the last live one arrives; the others wait for it (a Future) as they wait for any helper.
A run that arrives audited is audited with the others (kernels/audit.py's audit_agents); a run
that starts from a checkpoint, at another step count, still takes each agent's own next step
when they are launched together.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Generator, Hashable, Sequence
from concurrent.futures import Future
from typing import Any

from omegaconf import DictConfig, OmegaConf

from alpha_rl.backend.graph import Graph
from alpha_rl.kernels.tape import MergeError, merge, run, run_alone
from alpha_rl.pipeline.configure.parts import PARTS
from alpha_rl.pipeline.step.trainer import Trainer

log = logging.getLogger("alpha_rl")

# what a run's shapes and launches do not depend on: its identity and what it does on the host
_NOT_SHAPES = ("seed", "search", "tracking", "checkpoint", "objective", "resume",
               "log_every", "steps", "eval", "audit", "market.seed")  # fmt: skip
# the settings the parts put in ISV slots: numbers a kernel reads, not shapes
_DOTTED = re.compile(r"\b[a-z_]+(?:\.[a-z_0-9]+)+")
_NUMBERS = tuple(sorted({key for part in PARTS for setting in part.owns.values()
                         for key in _DOTTED.findall(setting)}))  # fmt: skip


def group_key(cfg: DictConfig) -> Hashable:
    """What fixes a run's shapes and launches: its config, resolved (a number may set a shape
    through an interpolation: validation.lookahead follows her.lookahead), less its numbers and
    identity. Runs of one key can step as agents of one launch (a run whose shapes still differ
    is found out by its allocations and steps alone: backend/pool.py)."""
    bare = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])  # hydra's: not resolvable
    try:
        tree = OmegaConf.to_container(bare, resolve=True)
    except Exception:  # an interpolation that does not resolve here: compare them as written
        tree = OmegaConf.to_container(bare, resolve=False)
    assert isinstance(tree, dict)
    for key in (*_NOT_SHAPES, *_NUMBERS):
        *parents, leaf = key.split(".")
        node: Any = tree
        for name in parents:
            node = node.get(name) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    return json.dumps(tree, sort_keys=True, default=str)


class Lockstep:
    """The trainers of one group of sessions (one pool, one stream), stepped as one."""

    def __init__(self, trainers: Sequence[Trainer] = ()) -> None:
        self.members: dict[Hashable, Trainer] = {}
        self.live: set[Hashable] = set()  # members whose runs go on (or are still to join)
        self.arrived: set[Hashable] = set()  # those waiting for this round's step
        self.auditing: set[Hashable] = set()  # those of them whose step is audited
        self.round: Future | None = None  # done when this round's step is queued
        self.graph: Graph | None = None
        self.apart: str | None = None  # why the agents' steps did not merge, once said
        self.apart_ever: str | None = None  # the first such reason, kept
        self.seats = 0  # the runs of a pack that step with it (Seat)
        self.id = uuid.uuid4().hex[:12]  # its runs record it: a sweep counts its groups
        for agent, trainer in enumerate(trainers):
            self.join(agent, trainer)

    @property
    def trainers(self) -> list[Trainer]:
        """Every member's trainer, in the pool's agent order."""
        return sorted(self.members.values(), key=lambda t: getattr(t.backend, "agent", 0))

    @property
    def stream(self) -> Any:
        return next(iter(self.members.values())).stream

    @property
    def span(self) -> Any:
        """The members' pool's `span` (a merged copy or fill over its blocks), None without."""
        pool = getattr(next(iter(self.members.values())).backend, "pool", None)
        return None if pool is None else pool.span

    def join(self, key: Hashable, trainer: Trainer) -> None:
        """A member's trainer, once built (its session one of the group's)."""
        if self.members and trainer.stream is not self.stream:
            raise ValueError("a lockstep's trainers share one stream (open_sessions' groups)")
        if self.graph is not None:  # a graph of the agents before it
            self.graph.close()
            self.graph = None
        pool = getattr(trainer.backend, "pool", None)
        if pool is not None:  # what it allocates from now on is its own (its evaluations')
            pool.seal(trainer.backend.agent)
        self.members[key] = trainer
        self.live.add(key)

    def arrive(self, key: Hashable, audited: bool = False) -> Generator[Future, None, None]:
        """Member `key`'s next step: queued with every live member's once the last of them
        arrives; until then it yields the round's Future. `audited`: its runtime audits (the
        run holds `KernelRuntime.auditing` open until it returns): the round's step is then
        launched op by op, each audited kernel checked for every auditing agent at once
        (kernels/audit.py's audit_agents), not replayed from the graph."""
        if self.round is None:
            self.round = Future()
        this = self.round
        self.arrived.add(key)
        if audited:
            self.auditing.add(key)
        self._step_when_all_arrived(raising=True)
        while not this.done():
            yield this
        this.result()  # a step that failed fails every member's run

    def leave(self, key: Hashable) -> None:
        """Member `key`'s run has ended: the others no longer wait for it (its arrays still
        step with theirs, unread, so the launches keep their shape)."""
        self.live.discard(key)
        self.arrived.discard(key)
        self.auditing.discard(key)
        self._step_when_all_arrived(raising=False)

    def _step_when_all_arrived(self, raising: bool) -> None:
        """The round's step once every live member has arrived. A step that fails fails the
        members waiting for it (the round's Future holds the error); it is raised here too
        only to a member that arrived (`raising`), not to one leaving: that one's run has
        already ended, and a pack's other groups go on."""
        if self.round is None or not self.arrived or not self.live <= self.arrived:
            return
        done, self.round = self.round, None
        audited = bool(self.auditing)
        self.arrived.clear()
        self.auditing.clear()
        try:
            self.step(audited)
        except Exception as exc:
            done.set_exception(exc)
            if raising:
                raise
            return
        done.set_result(None)

    def step(self, audited: bool = False) -> None:
        """One env step of every agent: each kernel once for all (as a graph once all learn,
        unless the step is `audited`: then each launch is checked as it goes)."""
        trainers = self.trainers
        # each agent's launches are then the same at every step, whatever its step count (a
        # run resumed at another step)
        ready = all(t.graph_ready for t in trainers)
        if self.graph is not None and not ready:  # a restore made one observe afresh
            self.graph.close()
            self.graph = None
        if self.graph is None and ready and not audited:
            self.graph = Graph(self.stream, self._issue)
        if self.graph is not None and not audited:
            self.graph.launch()
        else:
            self._issue()
        for trainer in trainers:
            trainer.t += 1

    def _issue(self) -> None:
        """Record every agent's step and queue it merged (or, where the agents' steps differ,
        each alone)."""
        tapes = [trainer.record_step() for trainer in self.trainers]
        try:
            ops = merge(tapes, self.span)
        except MergeError as exc:
            if self.apart is None:
                log.warning("the %d agents' steps launch one agent at a time: %s",
                            len(tapes), exc)  # fmt: skip
            self.apart = str(exc)
            self.apart_ever = self.apart_ever or self.apart
            run_alone(tapes, self.stream)
            return
        self.apart = None
        run(ops, self.stream)

    def close(self) -> None:
        """Free the step's CUDA graph (before the backend closes)."""
        if self.graph is not None:
            self.graph.close()
            self.graph = None


class Seat:
    """One run's place in its group's Lockstep (a pack of runs, pipeline/life/run.py): its trainer
    joins once built, the run arrives at the lockstep for each step, and leaves when it ends."""

    def __init__(self, lockstep: Lockstep, key: Hashable) -> None:
        self.lockstep, self.key = lockstep, key
        lockstep.live.add(key)  # waited for from the start, until its run ends
        lockstep.seats += 1

    def join(self, trainer: Trainer) -> None:
        self.lockstep.join(self.key, trainer)

    def arrive(self, audited: bool = False) -> Generator[Future, None, None]:
        return self.lockstep.arrive(self.key, audited)

    def leave(self) -> None:
        self.lockstep.leave(self.key)

    def group(self) -> dict[str, Any]:
        """What its run records of the group it stepped with: its id, its size, and why its
        steps first went one agent at a time, if they ever did."""
        lockstep = self.lockstep
        return {"id": lockstep.id, "agents": lockstep.seats,
                "apart": lockstep.apart_ever}  # fmt: skip


def seats(jobs: Sequence[Hashable], groups: Sequence[Hashable] | None) -> dict[Hashable, Seat]:
    """A Seat per job (by its key in `jobs`) in one Lockstep per group; none without groups."""
    if groups is None:
        return {}
    locksteps: dict[Hashable, Lockstep] = {}
    places = {job: Seat(locksteps.setdefault(group, Lockstep()), job)
              for job, group in zip(jobs, groups, strict=True)}  # fmt: skip
    sizes = [groups.count(group) for group in locksteps]
    log.info("%d runs in %d group%s of agents whose shapes agree (%s): each group's kernels "
             "launch once a step for all its agents", len(jobs), len(sizes),
             "" if len(sizes) == 1 else "s", ", ".join(map(str, sizes)))  # fmt: skip
    return places


def locksteps(places: dict[Hashable, Seat]) -> list[Lockstep]:
    """The Locksteps of `places`' seats, each once, in the order of their first seat."""
    return list({id(seat.lockstep): seat.lockstep for seat in places.values()}.values())
