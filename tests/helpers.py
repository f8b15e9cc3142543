"""Helpers shared by the tests."""

from __future__ import annotations

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from alpha_rl import paths


def compose_train(overrides: list[str] | None = None) -> tuple[DictConfig, dict[str, str]]:
    """The real conf/train.yaml composed with `overrides`; returns (cfg, Hydra runtime choices)."""
    with initialize_config_dir(config_dir=str(paths.conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=list(overrides or []), return_hydra_config=True)
    return cfg, dict(cfg.hydra.runtime.choices)


def compose_fixed(overrides: list[str] | None = None) -> tuple[DictConfig, dict[str, str]]:
    """compose_train with a fixed reward.scale, for ISV layouts built without a market
    (reward.scale=auto is resolved from the market's training ticks by the run)."""
    return compose_train(["reward.scale=1.0", *(overrides or [])])


def by_name(decl, *values) -> dict:
    """`values` in the order `decl` declares its arguments, keyed by the declared names: the
    keyword arguments of a bound kernel, for tests that build the list from the declaration."""
    names = [a.name for a in decl.args]
    if len(values) != len(names):
        raise TypeError(f"{decl.name} takes {len(names)} arguments ({names}), got {len(values)}")
    return dict(zip(names, values, strict=True))
