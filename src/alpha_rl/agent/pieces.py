"""The learner's pieces as a learner variant names them: the one place that names a run's learner
from its recorded params (the kill check's agent axis reads it here).

A variant is dqn and the pieces it adds, in the order of `PIECES`: the dueling network
(agent.dueling), n-step returns (agent.n_step = n > 1: nstep<n>), noisy nets (agent.noisy) and
each head of `agent.head.HEADS` that a flag picks (agent.distributional: c51), as conf/agent/
names them (dqn_nstep3, dqn_c51); all of Rainbow's pieces together are `rainbow`. A new head
joins by its place in HEADS, with nothing to add here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from alpha_rl.agent.head import HEADS


@dataclass(frozen=True)
class Piece:
    """One piece: its agent.<key>, its value when it is absent, its name for any other value."""

    key: str
    off: Any  # also the value of a run recorded before the piece existed
    name: Callable[[Any], str]


PIECES = (
    Piece("dueling", False, lambda _: "dueling"),
    Piece("n_step", 1, lambda n: f"nstep{n}"),
    Piece("noisy", False, lambda _: "noisy"),
    *(Piece(h.key, False, lambda _, h=h: h.piece) for h in HEADS if h.key is not None),
)
KEYS = tuple(f"agent.{p.key}" for p in PIECES)  # the params that make up a learner variant
RAINBOW = ("dueling", "nstep3", "noisy", "c51")  # agent=rainbow: all of Rainbow's pieces


def variant_name(values: Mapping[str, Any]) -> str:
    """dqn, rainbow, or dqn_ followed by the pieces it adds (dqn_nstep3, dqn_dueling_c51), of the
    pieces' values by key (an absent key: the piece is off)."""
    added = tuple(p.name(values[p.key]) for p in PIECES if values.get(p.key, p.off) != p.off)
    return "rainbow" if added == RAINBOW else "_".join(["dqn", *added])


def _value(text: str) -> Any:
    """A recorded param as the value it spells ("True", "3")."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def from_params(params: Mapping[str, str]) -> str | None:
    """The learner variant a run recorded (its agent.<piece> params); None for a run without
    agent.n_step (one that records no learner)."""
    if "agent.n_step" not in params:
        return None
    return variant_name({k.removeprefix("agent."): _value(params[k]) for k in KEYS if k in params})
