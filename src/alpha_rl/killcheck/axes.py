"""The variant axis a check judges: which config keys make up the variant, what value a run has on
it, and which value is the baseline.

Five axes are variant groups of the config: `her` (the HER variant, off | backward | forward |
on, as alpha_rl.her_variant decodes a run's params; baseline off), `beta` (sentinel | active |
active_controller, beta.mode and beta.controller; baseline sentinel), `alpha` (off | on,
alpha.mode; baseline off), `reward` (stride6 | stride7, reward.stride; baseline stride6) and
`agent` (the learner: dqn, rainbow or dqn with Rainbow's pieces, named as conf/agent/ names
them by alpha_rl.agent.pieces from its pieces' params; baseline dqn). A sixth,
`search` (trial<N> | default, from search.trial), is alpha-rl-confirm's: a search's candidates
against the default config, owning the keys the search varied. Each owns
the params under its group and its ISV slots (`her.`, `isv.slots.her.`, ...), which may differ
between paired runs; the agent axis only its pieces' params (and the agent's slots), so runs that
also differ in another agent key (agent.lr) pair only with their own. Any other axis is one
config key (`--axis agent.lr`): the key and the keys under it; its baseline is the value of the
default config (conf/train.yaml) unless given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import yaml

from alpha_rl.agent import pieces
from alpha_rl.errors import AlphaRlError
from alpha_rl.her_variant import TREATMENTS, HerVariant, from_params
from alpha_rl.tracking import RunRecord

HER_ORDER = tuple(v.value for v in TREATMENTS)  # the seed plan's order


def her_variant(run: RunRecord) -> HerVariant | None:
    """The run's HER variant, as alpha_rl.her_variant decodes its her.* params; None when it has
    none. HerVariantError for flags no declared variant has: never taken for off."""
    if "her_variant" not in run.cache:
        run.cache["her_variant"] = from_params(
            run.params, f"run {run.name!r}, {run.run_id}; the kill check judges the variants "
            "alpha_rl/her_variant.py declares")  # fmt: skip
    return run.cache["her_variant"]


def her_value(run: RunRecord) -> str | None:
    """off | backward | forward | on (`her_variant`); None when the run has no HER params."""
    variant = her_variant(run)
    return None if variant is None else variant.value


def beta_value(run: RunRecord) -> str | None:
    """sentinel | active | active_controller (beta=active with beta.controller=share)."""
    mode = run.params.get("beta.mode")
    if mode is None:
        return None
    return f"{mode}_controller" if run.params.get("beta.controller") == "share" else mode


# the learner's pieces: the agent axis owns these (a sweep may vary agent.lr across it too)
AGENT_KEYS = pieces.KEYS


def agent_value(run: RunRecord) -> str | None:
    """The learner's variant (alpha_rl.agent.pieces): dqn, rainbow, or dqn_ followed by the
    pieces it adds (dqn_nstep3, dqn_dueling_c51); None when the run has no such params."""
    return pieces.from_params(run.params)


def _param(key: str, prefix: str = "") -> Callable[[RunRecord], str | None]:
    def value(run: RunRecord) -> str | None:
        found = run.params.get(key)
        return None if found is None else f"{prefix}{found}"

    return value


@lru_cache(maxsize=4096)
def normalise(value: str) -> Any:
    """A param string as the value it spells (so '3e-4' and '0.0003' compare equal)."""
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


@dataclass(frozen=True)
class Axis:
    """One variant axis: its name, the params it owns, a run's value on it, the baseline."""

    name: str
    groups: tuple[str, ...]  # param prefixes (ending in ".") owned by the axis
    key: str | None  # the config key of a key axis
    value: Callable[[RunRecord], str | None]  # a run's value on the axis (None: it has none)
    baseline: str

    @property
    def is_her(self) -> bool:
        """Whether HER's own criteria (1-4) apply."""
        return self.name == "her"

    def owns(self, param: str) -> bool:
        """Whether `param` belongs to the axis (and may differ between paired runs)."""
        if self.key is not None and (param == self.key or param.startswith(self.key + ".")):
            return True
        return param.startswith(self.groups)

    def is_baseline(self, value: str) -> bool:
        return value == self.baseline or normalise(value) == normalise(self.baseline)

    def label(self, value: str) -> str:
        """`her=backward`."""
        return f"{self.name}={value}"

    def order(self, values: set[str]) -> list[str]:
        """Treatment values in reading order (HER's in the seed plan's, others sorted)."""
        known = [v for v in HER_ORDER if v in values] if self.is_her else []
        return known + sorted(values - set(known), key=str)


def search_value(run: RunRecord) -> str | None:
    """`trial<N>` for a run of a search trial's config (search.trial), `default` for one of the
    default config (a confirmation's baseline); None when the run has no search params."""
    if "search.trial" not in run.params:
        return None
    trial = normalise(run.params["search.trial"])
    return "default" if trial is None or trial == "None" else f"trial{trial}"


GROUP_AXES = {
    "her": (("her.", "isv.slots.her."), her_value, "off"),
    "beta": (("beta.", "isv.slots.beta."), beta_value, "sentinel"),
    "alpha": (("alpha.", "isv.slots.alpha."), _param("alpha.mode"), "off"),
    "reward": (("reward.", "isv.slots.reward."), _param("reward.stride", "stride"), "stride6"),
    "agent": ((*AGENT_KEYS, "isv.slots.agent."), agent_value, "dqn"),
    # a search's candidates against the default config (alpha-rl-confirm adds the searched keys)
    "search": (("search.", "isv.slots."), search_value, "default"),
}


def default_value(key: str) -> str:
    """The value of config key `key` in the default config (conf/train.yaml)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from alpha_rl import paths

    with initialize_config_dir(config_dir=str(paths.conf_dir()), version_base="1.3"):
        cfg = compose("train")
    missing = object()
    found = OmegaConf.select(cfg, key, default=missing)
    if found is missing:
        raise AlphaRlError(f"--axis {key}: not a key of the default config (conf/train.yaml); "
                           "pass --baseline VALUE to name the baseline arm")  # fmt: skip
    if OmegaConf.is_config(found):
        found = OmegaConf.to_container(found, resolve=True)
    return str(found)


def axis_for(name: str, baseline: str | None = None, owns: tuple[str, ...] = ()) -> Axis:
    """The axis `name` (her, beta, alpha, reward, agent, search or a config key), with its
    baseline; `owns`: more params (prefixes) it owns (the keys a search varied)."""
    if name in GROUP_AXES:
        groups, value_of, default = GROUP_AXES[name]
        chosen = baseline if baseline is not None else default
        return Axis(name, (*groups, *owns), None, value_of, chosen)
    if not name or name.startswith(".") or name.endswith("."):
        raise AlphaRlError(f"--axis {name!r}: name her, beta, alpha, reward, agent or a config key "
                           "(agent.lr)")  # fmt: skip
    chosen = baseline if baseline is not None else default_value(name)
    return Axis(name, (), name, _param(name), chosen)
