"""Checked reads of config values: each refuses a bad one before any work, naming the key, the
value, the range it must be in and where the setting lives."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from alpha_rl.errors import ConfigError

_ABSENT = object()


def _value(cfg: DictConfig, key: str, where: str) -> object:
    try:
        value = OmegaConf.select(cfg, key, default=_ABSENT)
    except OmegaConfBaseException as exc:  # a ${...} that does not resolve
        raise ConfigError(f"{key} cannot be resolved: {exc} (see {where})") from exc
    if value is _ABSENT:
        raise ConfigError(f"{key} is missing from the config (see {where})")
    return value


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def number(cfg: DictConfig, key: str, ok: Callable[[float], bool], what: str, where: str) -> float:
    """The number at `key` (an int or a float), refused unless `ok(value)`; `what` says the range
    ("> 0", "in (0, 1]")."""
    value = _value(cfg, key, where)
    if not _is_number(value) or not ok(float(value)):
        raise ConfigError(f"{key}={value!r} must be a number {what} (see {where})")
    return float(value)


def integer(cfg: DictConfig, key: str, ok: Callable[[int], bool], what: str, where: str) -> int:
    """The whole number at `key`, refused unless `ok(value)`."""
    value = _value(cfg, key, where)
    if not isinstance(value, int) or isinstance(value, bool) or not ok(value):
        raise ConfigError(f"{key}={value!r} must be a whole number {what} (see {where})")
    return value


def flag(cfg: DictConfig, key: str, where: str) -> bool:
    """The true/false at `key` (a YAML boolean, nothing else)."""
    value = _value(cfg, key, where)
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} must be true or false (see {where})")
    return value


def choice(cfg: DictConfig, key: str, options: Sequence[str], where: str) -> str:
    """The string at `key`, one of `options`."""
    value = _value(cfg, key, where)
    if value not in options:
        raise ConfigError(f"{key}={value!r} must be one of {', '.join(options)} (see {where})")
    return str(value)


def numbers(cfg: DictConfig, key: str, count: int, ok: Callable[[float], bool], what: str,
            where: str) -> tuple[float, ...]:  # fmt: skip
    """The list of `count` numbers at `key`, each refused unless `ok(value)`."""
    value = _value(cfg, key, where)
    if not (OmegaConf.is_list(value) and len(value) == count
            and all(_is_number(x) and ok(float(x)) for x in value)):  # fmt: skip
        shown = OmegaConf.to_container(value) if OmegaConf.is_list(value) else value
        raise ConfigError(f"{key}={shown!r} must be {count} numbers, each {what} (see {where})")
    return tuple(float(x) for x in value)


def section(node: DictConfig, name: str) -> DictConfig:
    """The `name` section of a config (as composed, or built alone) under its name, so that the
    readers above take and report its keys as the composed config's: `env.num_envs`."""
    return OmegaConf.create({name: OmegaConf.to_container(node, resolve=True)})
