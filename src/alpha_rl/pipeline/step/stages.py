"""The step as data: its stages in the contract's order (DESIGN §9), each what it does, the part
that owns it and how it queues its launches on a trainer's stream.

`Trainer.launch_step` runs them in order; a stage a run does not have (β's controller without
it, HER with her=off, the learner's updates before `learn_start`) queues nothing. What each stage
launches and the arrays its kernels read and write are not written down a second time: they are
read off a recorded step (`stage_table`), so the table is always the code's. Stages are the unit
a fused kernel will replace; the benchmarks time them (benchmarks/pack_step.py --profile).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from alpha_rl.backend.base import Copy, Fill
from alpha_rl.kernels.decl import Role
from alpha_rl.kernels.tape import Call

Trainer = Any  # a pipeline.trainer.Trainer (which runs the stages: not imported here)


@dataclass(frozen=True)
class Stage:
    """One stage of the step."""

    number: str  # its place in DESIGN §9 ("5b": after 5)
    what: str
    part: str  # the part that owns it
    issue: Callable[[Trainer, Any], None]  # queue its launches on the stream given


def _observe(tr: Trainer, s: Any) -> None:
    if tr.observed:  # the last step's h_tp1 (nothing moves the envs between steps)
        tr.backend.copy(tr.h_t, tr.h_tp1, s)
    else:
        tr.env.perceive(tr.h_t, s)


def _controller(tr: Trainer, s: Any) -> None:
    if tr.controller is not None:  # w_aux_align for the next step's c6
        tr.controller(stream=s)


def _her(step: str) -> Callable[[Trainer, Any], None]:
    def issue(tr: Trainer, s: Any) -> None:
        if tr.hindsight is None:
            return
        if step == "track":
            tr.hindsight.track(s)
        else:
            getattr(tr.hindsight, step)(tr.h_t, s)

    return issue


def _learn(tr: Trainer, s: Any) -> None:
    a = tr.env.arrays
    tr.learner.train_aux(tr.h_t, a["fill_mid"], a["post_mid"], s)
    if tr.learning:
        for _ in range(tr.plan.agent.updates_per_step):
            tr.learner.learn(tr.replay, s)


STAGES: tuple[Stage, ...] = (
    Stage("1", "observe h_t (the last step's h_tp1, copied)", "environment", _observe),
    Stage("2", "act: epsilon-greedy on Q(h_t), the aux head's p_up", "learner",
          lambda tr, s: tr.learner.act(tr.h_t, s)),
    Stage("3", "the env step: fills, rewards, done", "environment",
          lambda tr, s: tr.env.step(tr.learner.actions, tr.learner.p_up, s)),
    Stage("4", "observe h_tp1", "environment", lambda tr, s: tr.env.perceive(tr.h_tp1, s)),
    Stage("5", "reward diagnostics", "reward", lambda tr, s: tr.env.reward_diagnostics(s)),
    Stage("5b", "beta's controller", "beta", _controller),
    Stage("6", "HER track", "HER", _her("track")),
    Stage("7", "push the transitions that end now", "replay",
          lambda tr, s: tr.transitions.push(tr.h_t, tr.h_tp1, tr.replay, s)),
    Stage("8", "HER backward inject, closes into the forward ring", "HER", _her("inject")),
    Stage("9", "HER forward", "HER", _her("forward")),
    Stage("10", "rebuild the sum tree", "replay", lambda tr, s: tr.replay.rebuild(s)),
    Stage("11", "train the aux head; the learner's updates", "learner", _learn),
)  # fmt: skip


def record_stages(trainer: Trainer) -> list[tuple[Stage, list]]:
    """One step of `trainer`, recorded stage by stage (nothing runs): [(stage, its ops)]."""
    out = []
    with trainer.session.runtime.recording() as tape:
        for stage in STAGES:
            start = len(tape)
            stage.issue(trainer, trainer.stream)
            out.append((stage, tape[start:]))
        trainer.observed = True
    return out


def stage_table(trainer: Trainer) -> list[dict[str, Any]]:
    """What each stage of `trainer`'s next step launches (a recorded step: nothing runs, but the
    trainer counts it as observed): its kernels in order, and the arrays they read and write
    by argument name."""
    table = []
    for stage, ops in record_stages(trainer):
        kernels, reads, writes = [], [], []
        for op in ops:
            if isinstance(op, Call):
                decl = op.kernel.decl
                kernels.append(decl.name)
                for arg, value in zip(decl.args, op.values, strict=True):
                    null = value is None or (isinstance(value, int) and value == 0)
                    if arg.is_pointer and not null:
                        (writes if arg.role is Role.OUT else reads).append(arg.name)
            else:
                kernels.append("copy" if isinstance(op, Copy) else "fill")
                assert isinstance(op, Copy | Fill)
        table.append({"stage": stage.number, "what": stage.what, "part": stage.part,
                      "kernels": kernels, "reads": sorted(set(reads)),
                      "writes": sorted(set(writes))})  # fmt: skip
    return table
