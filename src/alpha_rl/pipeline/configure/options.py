"""A plain `key=value` whose key the chosen options of its group do not have: refused before Hydra
composes, naming the options that have it.

keys.py refuses a key that no file of conf/ declares. A key that some option declares may still
be absent from the config a command line composes: `her.threshold=2` with `her='off'`,
`market.session_gap=1h` with the synthetic market, `beta.gain=1` with `beta=sentinel`. Hydra
would refuse it with the advice to add it (`+key=value`), which makes a key that nothing of this
config reads. Here the command line's group selections are composed once (each value of a
swept group in turn), and such a key is refused in one line naming the options of its group that
have it, and the override to choose one. An `init` of a slot a part owns
(`isv.slots.her.her_threshold.init=-5`) is refused naming the setting its value comes from. A key
that no option has is left to Hydra.
"""

from __future__ import annotations

from collections.abc import Iterator

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob, Override
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from alpha_rl import paths
from alpha_rl.errors import ConfigError
from alpha_rl.pipeline.configure.keys import file_keys, option_files
from alpha_rl.pipeline.configure.parts import PARTS

_QUOTED = ("on", "off", "true", "false")  # option names that YAML would read as booleans


def _typed(option: str) -> str:
    """An option as the command line takes it (`'off'` quoted: bare, YAML reads a boolean)."""
    return f"'{option}'" if option in _QUOTED else option


def _is_group(key: str) -> bool:
    return "/" in key or (paths.conf_dir() / key).is_dir()


def _plain_keys(parsed: list[Override]) -> list[Override]:
    """The overrides that set a key the config must already have (no +, no ~, no group, no
    Hydra key, no package)."""
    return [
        o for o in parsed
        if not (o.is_add() or o.is_force_add() or o.is_delete() or o.package is not None)
        and not _is_group(o.key_or_group) and o.key_or_group.split(".")[0] != "hydra"
    ]  # fmt: skip


def _selections(parsed: list[Override]) -> dict[str, list[str | None]] | None:
    """Each group the command line selects -> the options it takes (several for a sweep; None:
    the group removed, `~group`); None where one is a glob (Hydra expands it)."""
    chosen: dict[str, list[str | None]] = {}
    for o in parsed:
        group = o.key_or_group
        if o.package is not None or not _is_group(group) or group.split("/")[0] == "hydra":
            continue
        if o.is_delete():
            chosen[group] = [None]
            continue
        if isinstance(o.value(), Glob):
            return None
        values = o.sweep_string_iterator() if o.is_sweep_override() else [o.value()]
        chosen[group] = [_typed(str(v).strip("'\"")) for v in values]
    return chosen


def _compose(selected: dict[str, str | None]) -> DictConfig | None:
    """conf/train.yaml composed with these group options (None: the group removed), with
    Hydra's runtime choices; None where Hydra refuses them (it will say why)."""
    overrides = [f"~{g}" if o is None else f"{g}={o}" for g, o in selected.items()]
    try:
        with initialize_config_dir(config_dir=str(paths.conf_dir()), version_base="1.3"):
            return compose("train", overrides=overrides, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException, ValueError):  # ValueError: `group=null`
        return None


def _probes(chosen: dict[str, list[str | None]]) -> Iterator[DictConfig]:
    """The configs the selections compose: each group at its first option, then each other
    option of a swept group in turn."""
    first = {group: options[0] for group, options in chosen.items()}
    variants = [{}] + [{g: o} for g, options in chosen.items() for o in options[1:]]
    for variant in variants:
        cfg = _compose({**first, **variant})
        if cfg is not None:
            yield cfg


def _has(cfg: DictConfig, key: str) -> bool:
    """Whether `cfg` has the key (a value still to be given, `???`, included)."""
    above, _, last = key.rpartition(".")
    parent = OmegaConf.select(cfg, above, throw_on_resolution_failure=False) if above else cfg
    if isinstance(parent, ListConfig):
        return True  # an index: Hydra's to judge
    return isinstance(parent, DictConfig) and last in list(parent.keys())


def check_chosen_options(overrides: list[str]) -> None:
    """Refuse (ConfigError) a plain `key=value` whose key the composed options do not have while
    another option of its group does, or that sets an owned ISV slot's init (module docstring)."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:
        return  # a malformed override: Hydra says where
    always = file_keys(paths.conf_dir() / "train.yaml")  # set whatever the options
    keys = [o for o in _plain_keys(parsed) if o.key_or_group not in always]
    chosen = _selections(parsed)
    if not keys or chosen is None:
        return
    for cfg in _probes(chosen):
        for override in keys:
            if not _has(cfg, override.key_or_group):
                _refuse(override, cfg, chosen)


def _owner(key: str) -> tuple[str, str] | None:
    """(part, setting) where `key` is `isv.slots.<group>.<slot>.init` of a slot a part owns."""
    words = key.split(".")
    if len(words) != 5 or words[:2] != ["isv", "slots"] or words[4] != "init":
        return None
    return next(((p.name, p.owns[words[3]]) for p in PARTS if words[3] in p.owns), None)


def _refuse(override: Override, cfg: DictConfig, chosen: dict[str, list[str | None]]) -> None:
    """Raise the one line for a key `cfg` lacks: its owner's setting, or the options of its
    group that have it; return where neither applies (Hydra's to refuse)."""
    key, line = override.key_or_group, override.input_line
    value = line.split("=", 1)[1]
    owner = _owner(key)
    if owner is not None:
        part, setting = owner
        raise ConfigError(
            f"{line}: the {part} part sets the slot {key.split('.')[3]}'s initial value from "
            f"{setting} (range-checked there), never from an init; set {setting}={value} instead"
        )
    current = dict(cfg.hydra.runtime.choices)
    first = {group: options[0] for group, options in chosen.items()}
    for group in _declaring_groups(key):
        holders = [
            option for option in _options(group)
            if option != current.get(group)
            and (probe := _compose({**first, group: _typed(option)})) is not None
            and _has(probe, key)
        ]  # fmt: skip
        if holders:
            now = current.get(group)
            here = f"this config's {group}={_typed(now)}" if now else f"this config (no {group})"
            them = "it" if len(holders) == 1 else "one of them"
            raise ConfigError(
                f"{line}: {key} exists in {group}={', '.join(map(_typed, holders))}, not in "
                f"{here}: choose {them} ({group}={_typed(holders[0])} {line}), or drop the "
                "override"
            )


def _declaring_groups(key: str) -> list[str]:
    """The config groups (top level) with an option file that declares `key` (or keys under
    it), the group the key is named after first (`her` for her.* and isv.slots.her.*; debug=tiny
    sets her.lookahead too, but HER's options are the answer)."""
    conf = paths.conf_dir()
    found = {
        p.relative_to(conf).parts[0] for p in option_files()
        if any(k == key or k.startswith(key + ".") for k in file_keys(p))
    }  # fmt: skip
    words = key.split(".")
    own = words[2] if words[:2] == ["isv", "slots"] and len(words) > 2 else words[0]
    return sorted(found, key=lambda group: (group != own, group))


def _options(group: str) -> list[str]:
    """The options of a config group, by file name."""
    return sorted(p.stem for p in (paths.conf_dir() / group).glob("*.yaml"))
