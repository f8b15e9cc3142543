"""Which hindsight directions a run has, and the one place that decodes them.

A HER variant is the set of directions it runs. The her group's flags choose it: her.enabled
(false: no HER at all) and one flag per direction (her.backward, her.forward), as conf/her/*.yaml
set them and as a run records them in its params. HerConfig, the ISV layout, the trainer and the
kill check get the variant from here (`from_config`, `from_params`) and read its directions;
nothing else reads the flags. Every true/false of the her group is a flag, so a flag this module
does not declare (a variant added without its row here) is an error, never read as off. A new
variant is a member of `HerVariant`, its row in `DIRECTIONS_OF` and its place in `TREATMENTS`
(docs/architecture.md). It imports only alpha_rl.errors: every layer may use it."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any

from alpha_rl.errors import ConfigError

DIRECTIONS = ("backward", "forward")  # her.<direction>: true runs that direction
FLAGS = ("enabled", *DIRECTIONS)  # her.enabled: false runs none


class HerVariantError(ConfigError):
    """A config or a recorded run whose HER flags make no variant this module declares."""


class HerVariant(enum.Enum):
    """off | backward | forward | on (both directions), as conf/her/ names them."""

    OFF = "off"
    BACKWARD = "backward"
    FORWARD = "forward"
    ON = "on"

    @property
    def directions(self) -> frozenset[str]:
        """The directions it runs (none: off)."""
        return DIRECTIONS_OF[self]

    @property
    def backward(self) -> bool:
        """Backward injection at trade closes (her_inject pushes)."""
        return "backward" in self.directions

    @property
    def forward(self) -> bool:
        """Forward judgement of closed trades `lookahead` steps later (the ring, her_forward)."""
        return "forward" in self.directions

    def flags(self) -> dict[str, bool]:
        """Its her.<flag> values, as conf/her/<value>.yaml sets them."""
        return {"enabled": bool(self.directions)} | {d: d in self.directions for d in DIRECTIONS}

    def params(self) -> dict[str, str]:
        """Its flags as a run records them: MLflow params her.<flag> = "True" / "False"."""
        return {f"her.{name}": str(value) for name, value in self.flags().items()}


# the directions each variant runs
DIRECTIONS_OF: dict[HerVariant, frozenset[str]] = {
    HerVariant.OFF: frozenset(),
    HerVariant.BACKWARD: frozenset({"backward"}),
    HerVariant.FORWARD: frozenset({"forward"}),
    HerVariant.ON: frozenset({"backward", "forward"}),
}
# the treatments of the HER axis in the order the seed plan names them
TREATMENTS = (HerVariant.BACKWARD, HerVariant.FORWARD, HerVariant.ON)


def _names(variants: tuple[HerVariant, ...] | type[HerVariant]) -> str:
    """`her=backward, her=forward or her=on`."""
    words = [f"her={v.value}" for v in variants]
    return ", ".join(words[:-1]) + f" or {words[-1]}" if len(words) > 1 else words[0]


def decode(flags: Mapping[str, bool], where: str) -> HerVariant:
    """The variant whose her.<flag> values are `flags` (an absent direction is false);
    HerVariantError, ending in `(where)`, for a flag or a combination no variant has."""
    unknown = [name for name in flags if name not in FLAGS]
    if unknown:
        shown = ", ".join(f"her.{name}={flags[name]}" for name in unknown)
        declared = ", ".join(f"her.{name}" for name in FLAGS)
        raise HerVariantError(
            f"{shown}: a HER flag that no variant of alpha_rl/her_variant.py has (its flags: "
            f"{declared}); a new variant is declared there (docs/architecture.md) ({where})"
        )
    full = {name: bool(flags.get(name, False)) for name in FLAGS}
    for variant in HerVariant:
        if variant.flags() == full:
            return variant
    shown = ", ".join(f"her.{d}={full[d]}" for d in DIRECTIONS)
    if not full["enabled"]:
        raise HerVariantError(f"her.enabled=false with {shown}: nothing would run; use "
                              f"{_names(TREATMENTS)} ({where})")  # fmt: skip
    if not any(full[d] for d in DIRECTIONS):
        needs = " or ".join(f"her.{d}" for d in DIRECTIONS)
        raise HerVariantError(f"her.enabled=true needs {needs} ({where})")
    raise HerVariantError(f"{shown}: no variant of alpha_rl/her_variant.py runs these "
                          f"directions; use {_names(HerVariant)} ({where})")  # fmt: skip


def from_config(group: Mapping[str, Any] | None, read: Callable[[str], bool],
                where: str) -> HerVariant:  # fmt: skip
    """The variant of a composed config's her group: `read(key)` is the checked reader of the
    true/false at `key` (her.enabled always; a direction where the group sets it; and any other
    true/false of the group, an undeclared flag that `decode` refuses)."""
    group = group or {}
    others = [k for k, v in group.items() if k not in FLAGS and isinstance(v, bool)]
    names = ["enabled", *(d for d in DIRECTIONS if d in group), *others]
    return decode({name: read(f"her.{name}") for name in names}, where)


def from_params(params: Mapping[str, str], where: str) -> HerVariant | None:
    """The variant a run recorded in its params (her.<flag> = "True" / "False"); None for a run
    without her.enabled (one that records no HER variant). HerVariantError for a flag that is
    not true or false, or flags no variant has: such a run is never taken for one that is off."""
    if "her.enabled" not in params:
        return None
    flags: dict[str, bool] = {}
    for key, value in params.items():
        name = key.removeprefix("her.")
        if name == key or "." in name:
            continue
        word = value.strip().lower()
        if word in ("true", "false"):
            flags[name] = word == "true"
        elif name in FLAGS:
            raise HerVariantError(f"{key}={value!r} is not true or false ({where})")
    return decode(flags, where)
