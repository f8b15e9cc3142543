"""Checked reads of config values: each refuses a bad one before any work, naming the key, the
value, the range it must be in and where the setting lives."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from alpha_rl.convert import F32_MAX
from alpha_rl.errors import ConfigError

_ABSENT = object()
_seen: dict[str, tuple[str, str, str]] | None = None  # recording(): key -> (type, range, file)
# the largest float32: every number of the config reaches the kernels as a float32 (a scalar
# argument or an ISV slot), where a larger one is inf


@contextlib.contextmanager
def recording() -> Iterator[dict[str, tuple[str, str, str]]]:
    """Every key the readers below check while inside, with its type, its range and the file
    they name: {key: (type, range, where)} (the configuration reference is built from it)."""
    global _seen
    _seen, outer = {}, _seen
    try:
        yield _seen
    finally:
        _seen = outer


def _note(key: str, kind: str, what: str, where: str) -> None:
    if _seen is not None:
        _seen.setdefault(key, (kind, what, where))


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


def representable(value: float) -> bool:
    """Whether the number `value` is finite and within float32's range (|value| <= 3.4e38)."""
    try:
        return math.isfinite(value) and abs(float(value)) <= F32_MAX
    except OverflowError:  # an int beyond any float
        return False


def _not_representable(key: str, value: object, what: str, where: str) -> ConfigError:
    """`what`: "a finite number > 0", "2 finite numbers, each in [0, 1)"."""
    return ConfigError(
        f"{key}={value!r} must be {what}; the kernels compute in float32, whose largest "
        f"magnitude is {F32_MAX:.4g} (see {where})"
    )


def number(cfg: DictConfig, key: str, ok: Callable[[float], bool], what: str, where: str) -> float:
    """The number at `key` (an int or a float), refused unless `ok(value)`; `what` says the range
    ("> 0", "in (0, 1]"). NaN, +-inf and magnitudes beyond float32's are refused too."""
    _note(key, "number", what, where)
    value = _value(cfg, key, where)
    if not _is_number(value):
        raise ConfigError(f"{key}={value!r} must be a number {what} (see {where})")
    if not representable(value):
        raise _not_representable(key, value, f"a finite number {what}", where)
    if not ok(float(value)):
        raise ConfigError(f"{key}={value!r} must be a number {what} (see {where})")
    return float(value)


def integer(cfg: DictConfig, key: str, ok: Callable[[int], bool], what: str, where: str) -> int:
    """The whole number at `key`, refused unless `ok(value)`."""
    _note(key, "whole number", what, where)
    value = _value(cfg, key, where)
    if not isinstance(value, int) or isinstance(value, bool) or not ok(value):
        raise ConfigError(f"{key}={value!r} must be a whole number {what} (see {where})")
    return value


def flag(cfg: DictConfig, key: str, where: str) -> bool:
    """The true/false at `key` (a YAML boolean, nothing else)."""
    _note(key, "true / false", "", where)
    value = _value(cfg, key, where)
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} must be true or false (see {where})")
    return value


def flag_or_auto(cfg: DictConfig, key: str, where: str) -> bool | None:
    """The true/false at `key`, or None for `auto` (the caller decides from what it knows)."""
    _note(key, "true / false / auto", "", where)
    value = _value(cfg, key, where)
    if value == "auto":
        return None
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} must be true, false or auto (see {where})")
    return value


def choice(cfg: DictConfig, key: str, options: Sequence[str], where: str) -> str:
    """The string at `key`, one of `options`."""
    _note(key, "choice", f"one of {', '.join(options)}", where)
    value = _value(cfg, key, where)
    if value not in options:
        raise ConfigError(f"{key}={value!r} must be one of {', '.join(options)} (see {where})")
    return str(value)


def numbers(cfg: DictConfig, key: str, count: int, ok: Callable[[float], bool], what: str,
            where: str) -> tuple[float, ...]:  # fmt: skip
    """The list of `count` numbers at `key`, each refused unless `ok(value)` and finite within
    float32's range."""
    _note(key, f"{count} numbers", f"each {what}", where)
    value = _value(cfg, key, where)
    shown = OmegaConf.to_container(value) if OmegaConf.is_list(value) else value
    if not (OmegaConf.is_list(value) and len(value) == count and all(map(_is_number, value))):
        raise ConfigError(f"{key}={shown!r} must be {count} numbers, each {what} (see {where})")
    if not all(representable(x) for x in value):
        raise _not_representable(key, shown, f"{count} finite numbers, each {what}", where)
    if not all(ok(float(x)) for x in value):
        raise ConfigError(f"{key}={shown!r} must be {count} numbers, each {what} (see {where})")
    return tuple(float(x) for x in value)


def section(node: DictConfig, name: str) -> DictConfig:
    """The `name` section of a config (as composed, or built alone) under its name, so that the
    readers above take and report its keys as the composed config's: `env.num_envs`."""
    return OmegaConf.create({name: OmegaConf.to_container(node, resolve=True)})
